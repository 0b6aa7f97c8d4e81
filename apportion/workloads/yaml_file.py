"""Read a YAML input file: its data and its node tree (for line numbers), or one InputError.

Numbers and booleans are read as YAML 1.2 reads them: PyYAML follows YAML 1.1, where ``1e300``
and ``1.0e5`` (an exponent without a dot or without a sign) are strings, so ``total_steps: 1e6``
would be refused as text, and where ``yes``, ``no``, ``on``, ``off``, ``y`` and ``n`` are
booleans, so ``name: yes`` would be refused as not a name. :class:`Loader` reads exponents as the
floats a person means and takes only ``true`` and ``false`` for booleans (the 1.2 core schema).
A key given twice in one mapping is an error naming its line, not the last one silently winning.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from apportion.core.errors import InputError


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one mapping."""

    def __init__(self, key: object, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {str(key)!r} (first on line {first.line + 1})", again)
        self.key = key


class Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's exponent floats (``1e300``, ``2.5E-3``, ``1.0e5``) and
    booleans (only ``true`` and ``false``), refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be given again
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the base constructor says so
                continue
            if first is not key_node.start_mark:
                raise DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
Loader.yaml_implicit_resolvers = {  # YAML 1.1's yes/no/on/off/y/n are text
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in Loader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                             list("tTfF"))


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
    except DuplicateKey as err:
        raise InputError(source, err.problem, line=err.problem_mark.line + 1) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(source, f"YAML syntax error: {' '.join(str(problem).split())}",
                         line=mark.line + 1 if mark else None) from None
    except (ValueError, RecursionError) as err:  # an integer too long to convert, nesting too deep
        raise InputError(source, f"cannot read: {' '.join(str(err).split()[:12])}") from None
