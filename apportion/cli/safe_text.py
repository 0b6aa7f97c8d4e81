"""Text from users (job names, reasons, log lines, a state file's rows) made safe to print on a
terminal: every control character is shown as an escape (``\\x1b``, ``\\r``, ``\\u202e``) instead of
reaching the terminal, where an escape sequence could retitle the window, write the clipboard
(OSC 52), move the cursor to overwrite what was printed before, or reverse text (bidi overrides).

Tabs are kept, and newlines where the text is meant to have lines; rich markup is escaped
separately (``output.escape``), which uses this too.
"""

from __future__ import annotations

import re

# C0 but tab and newline, DEL, C1 (0x9b is CSI to many terminals), and the bidi controls
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEPING_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SHOWN = {"\r": "\\r", "\n": "\\n"}


def printable(text: object, *, lines: bool = True) -> str:
    """``text`` with its control characters escaped; ``lines``: newlines kept (else shown as ``\\n``)."""
    text = str(text)
    if text.isprintable():  # no control or format character at all: the common case, at C speed
        return text
    return (_UNSAFE_KEEPING_LINES if lines else _UNSAFE).sub(_escaped, text)


def has_unsafe(text: str) -> bool:
    """Whether ``text`` holds a character :func:`printable` would escape (newlines aside)."""
    return _UNSAFE_KEEPING_LINES.search(text) is not None


def log_text(text: str) -> str:
    """A job's output for a terminal: a carriage return (a progress bar redrawing its line) as a
    new line, every other control character escaped."""
    return printable(text.replace("\r\n", "\n").replace("\r", "\n"))


def _escaped(match: re.Match) -> str:
    char = match.group()
    return _SHOWN.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
