"""The one way a command that replays runs (`simulate`, `compare`, `sweep`, `replay`): refuse an
``--out`` that cannot be written, read the inputs, show the work's progress on stderr, print the
result (a table, or JSON with ``--json``), then write ``--out``'s files and name them.

While the inputs are read and the work runs, stdout goes to stderr (a library's print never mixes
into a table or JSON) and a bad argument is the one-line error naming its flag.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar

from apportion.cli.inputs import as_flags
from apportion.cli.output import print_json, print_wrote, progress_bar
from apportion.stdio import stdout_to_stderr

Inputs = TypeVar("Inputs")
Result = TypeVar("Result")


class Progress:
    """The progress bars of one command's tasks, by name: what the work reports how far it has come to."""

    def __init__(self, bar, totals: dict[str, int]) -> None:
        self._bar = bar
        self._tasks = {name: bar.add_task(name, total=total, day=0.0) for name, total in totals.items()}

    def update(self, name: str, **fields) -> None:
        """Move task ``name``'s bar: ``completed=``, ``total=``, ``day=`` (virtual days)."""
        self._bar.update(self._tasks[name], **fields)

    def jobs_ended(self, name: str, ended: int, total: int, now_s: float) -> None:
        """A replay's report (``apportion.arguments.run``'s ``progress``): ``ended`` jobs of ``name``
        ended, at virtual time ``now_s``."""
        self.update(name, completed=ended, day=now_s / 86400)


def replay_command(*, out: Optional[Path], as_json: bool, prepare: Callable[[], Inputs],
                   tasks: Callable[[Inputs], dict[str, int]], work: Callable[[Inputs, Progress], Any],
                   to_json: Callable[[Inputs, Result], Any], show: Callable[[Inputs, Result], None],
                   write: Callable[[Inputs, Result, Path], list], digest: Callable[[Inputs, Any], Result] | None = None,
                   what: str = "jobs ended", virtual_time: bool = True, check_out: bool = True) -> Result:
    """Run one command: ``prepare()`` its inputs; ``work(inputs, progress)`` under a bar for each of
    ``tasks(inputs)`` (name: total), its answer the result, or turned into it by ``digest(inputs,
    answer)`` once the bars are gone (sweep's means and intervals); print ``to_json(inputs, result)``
    with ``--json``, else ``show(inputs, result)``; with ``--out``, ``write(inputs, result, out)`` and
    name the files it wrote. ``out`` is refused before anything is read unless ``check_out`` is False
    (where ``prepare`` checks it in the Python API's order: `sweep`)."""
    with as_flags(), stdout_to_stderr():
        if check_out:
            from apportion.arguments import check_out as refuse_unwritable

            refuse_unwritable(out)
        inputs = prepare()
        with progress_bar(as_json, what, virtual_time) as bar:
            result = work(inputs, Progress(bar, tasks(inputs)))
        if digest is not None:
            result = digest(inputs, result)
    if as_json:
        print_json(to_json(inputs, result))
    else:
        show(inputs, result)
    if out is not None:
        with stdout_to_stderr():
            paths = write(inputs, result, out)
        print_wrote(paths, as_json)
    return result
