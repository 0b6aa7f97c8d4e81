"""Read a YAML input file: its data and its node tree (for line numbers), or one InputError."""

from __future__ import annotations

from pathlib import Path

import yaml

from apportion.core.errors import InputError


def read_yaml(path: str | Path, what: str) -> tuple[object, yaml.Node | None]:
    """The parsed data and the composed node tree of ``path``; ``what`` names it in errors."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(source, f"no such {what} file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(source, f"cannot read: {err}") from None
    try:
        return yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(source, f"YAML syntax error: {problem}", line=mark.line + 1 if mark else None) from None
