"""Progress of long work on stderr, never on stdout: a bar with an ETA on a terminal, elsewhere (a
pipe, a log file, a CI job) one plain line every few seconds, e.g.
``simulate: 12,000/103,000 jobs ended, virtual time 3.2 d, 14 s elapsed, ETA 1 min``.

Both take the same calls: ``add_task(description, total=, day=)`` and ``update(task, completed=, day=)``.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time

EVERY_S = "APPORTION_PROGRESS_EVERY_S"  # seconds between plain lines (default 5)
DEFAULT_EVERY_S = 5.0


def terminal_bar(console, what: str, virtual_time: bool = True):
    """rich's bar on ``console``: done of total ``what``, virtual day, time elapsed and ETA."""
    from rich.progress import (
        BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(what + (" · day {task.fields[day]:.1f}" if virtual_time else "")),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


class ProgressLines:
    """Plain progress lines on stderr, at most one every ``every_s`` seconds, the first after
    ``every_s``: work shorter than that prints nothing. Safe to update from several threads."""

    def __init__(self, what: str, virtual_time: bool = True, every_s: float | None = None, stream=None) -> None:
        self.what = what
        self.virtual_time = virtual_time
        self.every_s = every_s_from_env() if every_s is None else every_s
        self.stream = stream
        self._tasks: list[dict] = []
        self._started = time.monotonic()
        self._last_line = self._started
        self._lock = threading.Lock()

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: int, day: float | None = None, **_) -> int:
        with self._lock:
            self._tasks.append({"description": description, "total": total, "completed": 0, "day": day})
            return len(self._tasks) - 1

    def update(self, task: int, completed: int | None = None, day: float | None = None, total: int | None = None,
               **_) -> None:
        with self._lock:
            if total is not None:
                self._tasks[task]["total"] = total
            if completed is not None:
                self._tasks[task]["completed"] = completed
            if day is not None:
                self._tasks[task]["day"] = day
            now = time.monotonic()
            if now - self._last_line < self.every_s:
                return
            self._last_line = now
            line = self.line(now - self._started)
        print(line, file=self.stream or sys.stderr, flush=True)

    def line(self, elapsed_s: float) -> str:
        """Every task's count and virtual time, the time elapsed and the ETA of the slowest task."""
        parts = []
        for task in self._tasks:
            part = f"{task['description']}: {task['completed']:,}/{task['total']:,} {self.what}"
            if self.virtual_time and task["day"] is not None:
                part += f", virtual time {task['day']:.1f} d"
            parts.append(part)
        left = [remaining_s(t["completed"], t["total"], elapsed_s) for t in self._tasks]
        eta = max(left, default=math.nan)
        return "; ".join(parts) + f", {duration(elapsed_s)} elapsed, ETA {duration(eta)}"


def remaining_s(done: int, total: int, elapsed_s: float) -> float:
    """Seconds left at the pace so far (NaN before anything is done)."""
    if done >= total:
        return 0.0
    return elapsed_s * (total - done) / done if done > 0 else math.nan


def duration(seconds: float) -> str:
    """``14 s``, ``3 min``, ``2.5 h``; ``?`` for an unknown time."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def every_s_from_env() -> float:
    """``APPORTION_PROGRESS_EVERY_S`` if it is a positive number, else the default."""
    try:
        value = float(os.environ.get(EVERY_S, DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S
