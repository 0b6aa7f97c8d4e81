"""Jobs grouped into classes of equal rows, on one warm max-min model kept across rounds.

Jobs with the same normalised throughputs, weight and GPU count are interchangeable in the
max-min, max-throughput and min-cost LPs (an optimum exists where they get equal shares), so
those policies solve over classes and hand each job its class's shares.
"""

from __future__ import annotations

import numpy as np

from apportion.core.rows import row_any
from apportion.core.views import JobView
from apportion.solve import max_min_dual
from apportion.solve.max_min import MaxMinModel

_FINGERPRINT = np.random.default_rng(20201104).uniform(1.0, 2.0, size=64)


class JobClasses:
    """Which LP class each job belongs to: jobs with equal rows (throughputs, weight, GPUs).

    A job's class is remembered by its row's fingerprint and looked up again only when the
    fingerprint changes, so a round costs a dot product per job, not a dictionary lookup.
    """

    def __init__(self, model: MaxMinModel) -> None:
        self.model = model
        self.class_of_key: dict[bytes, int] = {}
        self.job_class = np.full(0, -1, dtype=np.int64)
        self.job_print = np.full(0, np.nan)

    @classmethod
    def for_cluster(cls, kept: JobClasses | None, capacity: np.ndarray, *, water_filling: bool = False) -> JobClasses:
        """``kept`` if it was built for this capacity (its model then restarts warm), else a new one."""
        if kept is not None and np.array_equal(kept.model.capacity, capacity):
            return kept
        return cls(MaxMinModel(capacity, water_filling=water_filling))

    @classmethod
    def most_total(cls, kept: JobClasses | None, jobs: JobView, capacity: np.ndarray,
                   value: np.ndarray) -> tuple[JobClasses | None, np.ndarray]:
        """The most total Σ value·share over classes (max-throughput, min-cost); the classes to keep."""
        share = np.zeros(value.shape)
        can_run = row_any(value > 0)
        if not can_run.any():
            return kept, share
        kept = cls.for_cluster(kept, capacity)
        share[can_run] = kept.shares(jobs.index[can_run], value[can_run], jobs.num_gpus[can_run], level=False)
        return kept, share

    def shares(self, index: np.ndarray, a: np.ndarray, gpus: np.ndarray, *, level: bool) -> np.ndarray:
        """[n, T] each job's class shares: max-min then total (``level``), or the most total alone.

        Gavel's single level over more than ``max_min_dual.SMALL`` classes is solved through
        its capacity prices (apportion.solve.max_min_dual), the same optimum many times faster
        than the warm model; fewer classes, water-filling and the total alone use the model.
        """
        class_of = self.classify(index, a, gpus)
        count = np.bincount(class_of, minlength=self.model.num_classes).astype(np.float64)
        counted = np.flatnonzero(count > 0)
        if level and not self.model.water_filling and len(counted) > max_min_dual.SMALL:
            model = self.model
            class_a = np.zeros((model.num_classes, model.num_types))
            class_a[model.col_class, model.col_type] = model.col_a
            x = np.zeros((model.num_classes, model.num_types))
            x[counted], _ = max_min_dual.solve_max_min_fast(
                class_a[counted], count[counted], model.gpus[counted], model.capacity
            )
            return x[class_of]
        x, _ = self.model.solve(count, level=level)
        return x[class_of]

    def classify(self, index: np.ndarray, a: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        if len(index) and index.max() >= len(self.job_class):
            grow = int(index.max()) + 1 - len(self.job_class)
            grow = max(grow, len(self.job_class))
            self.job_class = np.concatenate([self.job_class, np.full(grow, -1, dtype=np.int64)])
            self.job_print = np.concatenate([self.job_print, np.full(grow, np.nan)])
        fingerprint = a @ _FINGERPRINT[: a.shape[1]] + gpus * _FINGERPRINT[a.shape[1]]
        stale = np.flatnonzero(self.job_print[index] != fingerprint)
        if len(stale):
            unseen: dict[bytes, int] = {}  # key -> position among the new classes
            new_rows: list[int] = []
            pending = np.empty(len(stale), dtype=np.int64)
            for position, i in enumerate(stale):
                key = a[i].tobytes() + np.float64(gpus[i]).tobytes()
                cid = self.class_of_key.get(key)
                if cid is None:
                    cid = -1 - unseen.setdefault(key, len(unseen))
                    if -1 - cid == len(new_rows):
                        new_rows.append(i)
                pending[position] = cid
            if new_rows:
                members = np.bincount(-1 - pending[pending < 0], minlength=len(new_rows)).astype(np.float64)
                ids = self.model.add_classes(a[new_rows], gpus[new_rows].astype(np.float64), members)
                for key, position in unseen.items():
                    self.class_of_key[key] = int(ids[position])
                fresh = pending < 0
                pending[fresh] = ids[-1 - pending[fresh]]
            self.job_class[index[stale]] = pending
            self.job_print[index[stale]] = fingerprint[stale]
        return self.job_class[index]
