"""An allocation X[job, gpu_type]: the fraction of time each job should hold GPUs of each type.

With space sharing it also names pairs of jobs that share the same GPUs, and the fraction of
time each pair should run together on each type. A job's shares alone and in its pairs
together sum to at most 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from apportion.core.rows import row_sum


@dataclass(frozen=True)
class Allocation:
    job_index: np.ndarray  # [n] JobTable rows, same order as the JobView it was made for
    share: np.ndarray  # [n, T] time fractions alone on each type
    pair_jobs: np.ndarray = field(default=None)  # [P, 2] positions (rows of share) of the two jobs of each pair
    pair_share: np.ndarray = field(default=None)  # [P, T] time fractions each pair runs together
    # elastic policies: GPUs each job runs on (instead of its JobView.num_gpus) and its total batch;
    # None: each job's own size and batch
    num_gpus: np.ndarray | None = None  # [n]
    batch_size: np.ndarray | None = None  # [n]

    def __post_init__(self) -> None:
        if self.share.shape[0] != len(self.job_index):
            raise ValueError("Allocation share rows must match job_index")
        if self.pair_jobs is None:
            object.__setattr__(self, "pair_jobs", np.zeros((0, 2), dtype=np.int64))
        if self.pair_share is None:
            object.__setattr__(self, "pair_share", np.zeros((0, self.share.shape[1])))
        if self.pair_share.shape != (len(self.pair_jobs), self.share.shape[1]):
            raise ValueError("Allocation pair_share must have one row per pair and one column per type")
        for name in ("num_gpus", "batch_size"):
            value = getattr(self, name)
            if value is not None and len(value) != len(self.job_index):
                raise ValueError(f"Allocation {name} must have one entry per job")

    @property
    def has_pairs(self) -> bool:
        return len(self.pair_jobs) > 0

    def time_fraction(self) -> np.ndarray:
        """[n] each job's whole share of time, alone and in pairs."""
        total = row_sum(self.share)
        if self.has_pairs:
            pair_total = self.pair_share.sum(axis=1)
            np.add.at(total, self.pair_jobs[:, 0], pair_total)
            np.add.at(total, self.pair_jobs[:, 1], pair_total)
        return total

    def effective_throughput(self, steps_per_s: np.ndarray, pair_steps_per_s: np.ndarray | None = None) -> np.ndarray:
        """The rate each job progresses at under X: alone Σ_t X[j,t]·T[j,t], plus, given
        ``pair_steps_per_s`` ([P, T, 2]: each pair member's rate together), its pairs' share."""
        rate = (self.share * steps_per_s).sum(axis=1)
        if self.has_pairs and pair_steps_per_s is not None:
            np.add.at(rate, self.pair_jobs[:, 0], (self.pair_share * pair_steps_per_s[:, :, 0]).sum(axis=1))
            np.add.at(rate, self.pair_jobs[:, 1], (self.pair_share * pair_steps_per_s[:, :, 1]).sum(axis=1))
        return rate

    def gpus_used(self, num_gpus: np.ndarray) -> np.ndarray:
        """[T] expected GPUs busy of each type: Σ_job X[job, type] · num_gpus[job], plus the pairs'."""
        used = (self.share * num_gpus[:, None]).sum(axis=0)
        if self.has_pairs:
            used += (self.pair_share * num_gpus[self.pair_jobs[:, 0]][:, None]).sum(axis=0)
        return used

    def is_integral(self, tol: float = 1e-6) -> bool:
        """True when every job and pair holds one type all the time or none at all (nothing to rotate)."""
        def whole(x: np.ndarray) -> bool:
            return bool(np.all((x < tol) | (x > 1 - tol)))
        return whole(self.share) and whole(self.pair_share)
