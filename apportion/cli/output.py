"""What every command prints through: the stdout and stderr consoles, JSON, tables, one-line
errors, and long work's progress.

Text that comes from a user (a job's name, a file path, a server's answer) is printed with
:func:`escape`, so that ``[blink]root[/blink]`` shows as typed instead of as rich markup and an
escape sequence shows as ``\x1b[...`` instead of reaching the terminal (safe_text.py).
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape as _escape_markup

from apportion.cli.safe_text import has_unsafe, printable


class _Console(Console):
    """A console that wraps text for a terminal only: into a pipe or a file each line stays whole
    (rich would break it at 80 columns, a pipe having no width), and that shows ``:x:`` as typed, not
    as an emoji (a plugin's ``file.py:X``, a user's text)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, emoji=False, **kwargs)

    def print(self, *objects, soft_wrap: bool | None = None, **options) -> None:
        super().print(*objects, soft_wrap=(not self.is_terminal) if soft_wrap is None else soft_wrap, **options)


console = _Console()
errors = _Console(stderr=True)

WIDEST = 100_000  # a table printed into a pipe or a file is never cut: it may be this wide
HIGHLIGHTED_JSON = 100_000  # characters of JSON coloured on a terminal; longer JSON is written plain


def escape(text: object) -> str:
    """``text`` made safe to print with markup on: every ``[`` that would open a tag is escaped, and
    every control character but newline and tab (safe_text.py)."""
    return _escape_markup(printable(text))


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on stderr; raise the result to exit with status 2."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def print_json(data) -> None:
    """``data`` as JSON on stdout: the only thing a ``--json`` command writes there. A list is one item
    a line (the standard library's fast encoder: 50,000 jobs in a fraction of a second), anything else
    indented. Characters a terminal would act on (C1 controls, bidi overrides) are written as
    ``\\uXXXX`` escapes; coloured on a terminal when short."""
    if isinstance(data, list):
        text = "[\n" + ",\n".join(json.dumps(item, ensure_ascii=False) for item in data) + "\n]" if data else "[]"
    else:
        text = json.dumps(data, indent=2, ensure_ascii=False)  # C0 controls escaped already
    if has_unsafe(text):
        text = json.dumps(data, indent=2, ensure_ascii=True)
    print_json_text(text)


def print_json_text(text: str) -> None:
    """JSON ``text`` on stdout as it is (re-encoded with ``\\uXXXX`` escapes when it holds a character a
    terminal would act on); coloured on a terminal when short (rich's colouring would take minutes
    over 50,000 jobs)."""
    if has_unsafe(text):
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=True)
    if console.is_terminal and len(text) <= HIGHLIGHTED_JSON:
        console.print_json(text, ensure_ascii=True)
        return
    console.file.write(text + "\n")
    console.file.flush()


def print_table(table, at_least: int = 0) -> None:
    """A rich table on stdout: fitted to a terminal (or ``at_least`` wide); into a pipe or a file
    at its full width, so that no cell is cut to '…' (a pipe has no width; rich assumes 80)."""
    if console.is_terminal:
        (console if console.width >= at_least else Console(width=at_least, emoji=False)).print(table)
    else:
        Console(file=console.file, width=WIDEST, color_system=None, emoji=False).print(table)


def print_line(text: str, *, markup: bool = False) -> None:
    """One line of text on stdout: wrapped by a terminal, never broken into a pipe or a file;
    without ``markup``, its control characters escaped (with it, the caller escapes: :func:`escape`)."""
    console.print(text if markup else printable(text), highlight=False, markup=markup,
                  soft_wrap=not console.is_terminal)


def print_wrote(paths, as_json: bool) -> None:
    """Name the files written: on stdout after a table, on stderr after JSON (stdout stays JSON)."""
    (errors if as_json else console).print(f"wrote {escape(', '.join(str(p) for p in paths))}", highlight=False)


def progress_bar(as_json: bool = False, what: str = "jobs ended", virtual_time: bool = True):
    """Long work's progress on stderr, never on stdout: a bar with an ETA when both stdout and
    stderr are a terminal and the output is not JSON; otherwise a plain line every few seconds
    (``cli/progress.py``), so that a pipe, a log file or a CI job sees it too."""
    from apportion.cli.progress import ProgressLines, terminal_bar

    if not as_json and errors.is_terminal and console.is_terminal:
        return terminal_bar(errors, what, virtual_time)
    return ProgressLines(what, virtual_time)


def cell(text: object, most: int = 64) -> str:
    """A user's string as a line to print with markup: :func:`cell_text`, markup escaped."""
    return escape(cell_text(text, most))


def cell_text(text: object, most: int = 64) -> str:
    """A user's string as a table cell: its first line, at most ``most`` characters (a state file
    written before names had bounds may hold a name of any length), control characters escaped."""
    lines = str(text).splitlines()
    line = lines[0] if lines else ""
    if len(line) > most:
        line = line[: most - 3] + "..."
    return printable(line, lines=False)
