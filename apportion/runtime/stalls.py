"""Data stalls: the share of a job's step time spent waiting for its next batch (DS-Analyzer's measure).

A step's time is split in two: waiting for the next batch (the GPU idles) and the rest
(computing). The wait is timed where the job asks for its batch: ``Job.batches(loader)``
times each ``next()`` on the loader; a plain loop wraps its own read in
``job.waiting_for_data()`` or tells ``job.data_wait(seconds)``. The job's reading code may
mark the part of a wait spent fetching (I/O) with :func:`fetching`; the rest of the wait is
pre-processing (CPU), as DS-Analyzer splits it. With a PyTorch DataLoader whose workers load
in other processes, the wait is what the training process waits in ``next()``; only its total
is known. Each timed wait costs a ``perf_counter`` pair.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# the progress report's fields (docs/serve-contract.md): shares of step time, 0 to 1
STALL, FETCH, PREPROCESS = "data_stall", "fetch_stall", "preprocess_stall"
STALL_FIELDS = (STALL, FETCH, PREPROCESS)


@dataclass(frozen=True)
class DataStall:
    """Shares of step time (0 to 1): waiting for data, and of it fetching and pre-processing where known."""

    wait: float
    fetch: float | None = None
    preprocess: float | None = None

    def fields(self) -> dict[str, float]:
        """The progress report's fields: ``data_stall``, and ``fetch_stall``/``preprocess_stall`` when known."""
        said = {STALL: self.wait}
        if self.fetch is not None and self.preprocess is not None:
            said.update({FETCH: self.fetch, PREPROCESS: self.preprocess})
        return said


class _Sums:
    """Seconds of steps, of waits (those outside a step too) and of fetching within them."""

    __slots__ = ("step_s", "wait_s", "outside_s", "fetch_s")

    def __init__(self) -> None:
        self.step_s = self.wait_s = self.outside_s = self.fetch_s = 0.0

    def stall(self, split: bool) -> DataStall | None:
        total = self.step_s + self.outside_s  # a wait outside a step's body is time the steps did not count
        if total <= 0:
            return None
        wait = min(1.0, self.wait_s / total)
        if not split:
            return DataStall(wait)
        fetch = min(wait, self.fetch_s / total)
        return DataStall(wait, fetch, wait - fetch)


class StallMeter:
    """Times a job's waits for data against its steps, over a report window and over the attempt."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.measured = False  # a wait was timed in this attempt: the job reports its stalls
        self.split = False  # a fetch was marked within a wait: the split is known
        self.in_step = False  # inside a step's body (``Job.steps`` between its yield and the next step)
        self._window, self._total = _Sums(), _Sums()
        self._waiting = 0  # nested waits count once
        self._wait_thread: int | None = None
        self._fetched = 0.0  # seconds fetching within the current wait

    # --- what the step loop tells ---------------------------------------------------
    def step_done(self, seconds: float) -> None:
        """A step's body took ``seconds`` (the waits inside it included)."""
        self.in_step = False
        self._window.step_s += seconds
        self._total.step_s += seconds

    # --- timing waits ---------------------------------------------------------------
    def batches(self, loader: Iterable[T]) -> Iterator[T]:
        """``loader``'s batches, pass after pass (iterated again each time it ends; a pass that gives
        nothing ends it), each ``next()`` timed as a wait for data."""
        while True:
            start = self._begin()
            try:
                iterator = iter(loader)  # a DataLoader starts its workers here: the steps wait for it too
            finally:
                self._end(start)
            given = False
            while True:
                start = self._begin()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                finally:
                    self._end(start)
                given = True
                yield batch
            if not given:
                return

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The block's time is a wait for data."""
        start = self._begin()
        try:
            yield
        finally:
            self._end(start)

    def waited(self, seconds: float, fetch_s: float | None = None) -> None:
        """A wait for data the job timed itself: ``seconds``, of which ``fetch_s`` fetching when it knows;
        ValueError naming the argument that is not a finite number >= 0."""
        for name, value in (("seconds", seconds), ("fetch_s", fetch_s)):
            if value is not None and not (math.isfinite(float(value)) and float(value) >= 0):
                raise ValueError(f"data_wait: {name} must be a finite number of seconds >= 0, got {value!r}")
        self._add(float(seconds), None if fetch_s is None else min(float(seconds), float(fetch_s)))

    def fetched(self, seconds: float) -> None:
        """``seconds`` of fetching (I/O), counted when they lie within a wait of this thread."""
        if self._waiting and self._wait_thread == threading.get_ident():
            self._fetched += seconds

    def _begin(self) -> float:
        if not self._waiting:
            self._wait_thread = threading.get_ident()
            self._fetched = 0.0
        self._waiting += 1
        return self.clock()

    def _end(self, start: float) -> None:
        elapsed = self.clock() - start
        self._waiting -= 1
        if not self._waiting:
            self._add(elapsed, self._fetched if self._fetched > 0 else None)

    def _add(self, wait_s: float, fetch_s: float | None) -> None:
        self.measured = True
        outside = 0.0 if self.in_step else wait_s
        for sums in (self._window, self._total):
            sums.wait_s += wait_s
            sums.outside_s += outside
        if fetch_s is not None:
            self.split = True
            fetch = min(fetch_s, wait_s)
            self._window.fetch_s += fetch
            self._total.fetch_s += fetch

    # --- what a report says ---------------------------------------------------------
    def window(self) -> DataStall | None:
        """The stall since the last window (then a new window starts); None when no wait was ever timed."""
        stall = self._window.stall(self.split) if self.measured else None
        self._window = _Sums()
        return stall

    def overall(self) -> DataStall | None:
        """The stall over the attempt so far; None when no wait was ever timed."""
        return self._total.stall(self.split) if self.measured else None


_current: StallMeter | None = None  # the meter of the job whose steps run in this process


def use(meter: StallMeter) -> None:
    """Make ``meter`` the one :func:`fetching` records into (``Job.steps`` does, as it starts)."""
    global _current
    _current = meter


@contextmanager
def fetching() -> Iterator[None]:
    """The block fetches data (reads files, storage, the network): within a timed wait for data,
    its time is the fetch part of the stall and the rest of the wait pre-processing."""
    meter = _current
    if meter is None:
        yield
        return
    start = meter.clock()
    try:
        yield
    finally:
        meter.fetched(meter.clock() - start)
