"""The words the API document's schemas are written in: patterns for what ``bounds.check_line`` lets
through (a line, a name, a word), and a text or a whole number with its bounds, for every part of the
server that describes a body (``http/api_schema.py``, an optional resource's routes)."""

from __future__ import annotations

import unicodedata

from apportion.serve.base.bounds import MAX_NAME, MAX_STEPS, REFUSED_IN_LINE


def _class_of(chars: list[str]) -> str:
    """The inside of a regex character class holding ``chars``, as ranges of the characters themselves
    (no escapes: Python's, ECMAScript's and Rust's regexes read a literal character alike)."""
    codes = sorted(ord(c) for c in chars)
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


def _refused_in_line() -> str:
    """What bounds.check_line refuses in a name (control and format characters, line and paragraph
    separators; a lone surrogate cannot reach a JSON string a schema checks), as a class's inside.
    Unicode places them in planes 0 and 1 and in plane 14's tags; the other planes hold none."""
    codes = [*range(0x20000), *range(0xE0000, 0xE1000)]
    return _class_of([chr(c) for c in codes if not 0xD800 <= c <= 0xDFFF
                      and unicodedata.category(chr(c)) in REFUSED_IN_LINE])


CONTROL = _refused_in_line()
SPACE = _class_of([chr(c) for c in range(0x3001) if chr(c).isspace() and unicodedata.category(chr(c))
                   not in REFUSED_IN_LINE])  # what str.strip() takes off a name besides (all below U+3001)
LINE = f"^[^{CONTROL}]*$"  # one printable line, maybe empty
NAMED = f"^[^{CONTROL}]*[^{CONTROL}{SPACE}][^{CONTROL}]*$"  # one printable line, not only spaces
WORD = f"^[^{CONTROL}{SPACE}]+$"  # one printable word
NO_NUL = "^[^\u0000]*$"  # a path, an argument, an environment variable's value: anything but NUL
NOT_BLANK = "^[^\u0000]*[^\u0000\\s][^\u0000]*$"


def text(description: str, most: int = MAX_NAME, pattern: str = LINE) -> dict:
    return {"type": "string", "maxLength": most, "pattern": pattern, "description": description}


def whole(description: str, least: int = 1, most: int = MAX_STEPS) -> dict:
    return {"type": "integer", "minimum": least, "maximum": most, "description": description}


_text, _whole = text, whole  # the names http/api_schema.py writes them by
