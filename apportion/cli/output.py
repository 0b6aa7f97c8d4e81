"""What every command prints through: the stdout and stderr consoles, JSON, one-line errors."""

from __future__ import annotations

import json

import typer
from rich.console import Console

console = Console()
errors = Console(stderr=True)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on stderr; raise the result to exit with status 2."""
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def print_json(data) -> None:
    """``data`` as JSON on stdout: the only thing a ``--json`` command writes there."""
    console.print_json(json.dumps(data))


def print_wrote(paths, as_json: bool) -> None:
    """Name the files written: on stdout after a table, on stderr after JSON (stdout stays JSON)."""
    (errors if as_json else console).print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


def progress_bar():
    """A replay's progress on stderr: jobs ended and virtual day, shown only in a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs done · day {task.fields[day]:.1f}"),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
        disable=not errors.is_terminal,
    )
