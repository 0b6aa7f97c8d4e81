"""Job dependencies as arrays: the jobs each job must see completed before it starts.

One compressed row per job (CSR): job ``i`` waits for the keys
``keys[start[i]:start[i + 1]]``. In a ``JobTable`` the keys are its own rows; elsewhere
(the server) they are whatever identifies a job to the one asking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class Dependencies:
    start: np.ndarray  # [n + 1] int64, where each job's keys begin in ``keys``
    keys: np.ndarray  # [m] int64, the jobs each waits for, job after job

    def __post_init__(self) -> None:
        if len(self.start) < 1 or self.start[0] != 0 or self.start[-1] != len(self.keys):
            raise ValueError(f"Dependencies: start must run from 0 to {len(self.keys)}")

    def __len__(self) -> int:
        """The number of jobs (not of dependencies)."""
        return len(self.start) - 1

    @classmethod
    def of_lists(cls, lists: Sequence[Iterable[int]]) -> Dependencies:
        """From one sequence of keys per job (empty where a job waits for nothing)."""
        lengths = np.fromiter((len(keys) for keys in lists), dtype=np.int64, count=len(lists))
        start = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=start[1:])
        keys = np.fromiter((k for keys in lists for k in keys), dtype=np.int64, count=int(start[-1]))
        return cls(start, keys)

    @classmethod
    def none(cls, n: int) -> Dependencies:
        """``n`` jobs that wait for nothing."""
        return cls(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))

    @property
    def counts(self) -> np.ndarray:
        """[n] how many jobs each waits for."""
        return np.diff(self.start)

    @property
    def owner(self) -> np.ndarray:
        """[m] the job each key belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.counts)

    def of(self, i: int) -> np.ndarray:
        """The keys job ``i`` waits for."""
        return self.keys[self.start[i]:self.start[i + 1]]

    def subset(self, rows: np.ndarray) -> Dependencies:
        """The jobs at ``rows``, in that order, keys unchanged."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.counts[rows]
        start = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        # position of each gathered key in ``keys``: its job's start plus its place within the job
        within = np.arange(int(start[-1]), dtype=np.int64) - np.repeat(start[:-1], counts)
        return Dependencies(start, self.keys[np.repeat(self.start[:-1][rows], counts) + within])

    def take(self, rows: np.ndarray) -> Dependencies:
        """The jobs at ``rows``, in that order, keys renumbered to positions in ``rows``; a key
        naming a job left out is dropped (those jobs are not part of what is kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        kept = self.subset(rows)
        position = np.full(len(self), -1, dtype=np.int64)
        position[rows] = np.arange(len(rows), dtype=np.int64)
        renumbered = position[kept.keys]
        inside = renumbered >= 0
        if inside.all():
            return Dependencies(kept.start, renumbered)
        counts = np.bincount(kept.owner[inside], minlength=len(rows))
        start = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        return Dependencies(start, renumbered[inside])
