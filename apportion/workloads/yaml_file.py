"""Read a YAML input file: its data and its node tree (for line numbers), or one InputError.

Numbers are read as YAML 1.2 reads them: PyYAML follows YAML 1.1, where ``1e300`` and
``1.0e5`` (an exponent without a dot or without a sign) are strings, so ``total_steps: 1e6``
would be refused as text. :class:`Loader` reads them as the floats a person means.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from apportion.core.errors import InputError


class Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's exponent floats (``1e300``, ``2.5E-3``, ``1.0e5``)."""


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(path: str | Path, what: str) -> tuple[object, yaml.Node | None]:
    """The parsed data and the composed node tree of ``path``; ``what`` names it in errors."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(source, f"no such {what} file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(source, f"cannot read: {err}") from None
    return parse_yaml(text, source)


def parse_yaml(text: str, source: str) -> tuple[object, yaml.Node | None]:
    """The data and node tree of YAML ``text``; InputError (with its line) when it is not YAML."""
    try:
        return yaml.load(text, Loader=Loader), yaml.compose(text, Loader=Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(source, f"YAML syntax error: {' '.join(str(problem).split())}",
                         line=mark.line + 1 if mark else None) from None
    except (ValueError, RecursionError) as err:  # an integer too long to convert, nesting too deep
        raise InputError(source, f"cannot read: {' '.join(str(err).split()[:12])}") from None
