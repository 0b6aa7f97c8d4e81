"""An allocation X[job, gpu_type]: the fraction of time each job should hold GPUs of each type."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Allocation:
    job_index: np.ndarray  # [n] JobTable rows, same order as the JobView it was made for
    share: np.ndarray  # [n, T] time fractions; each row sums to <= 1

    def __post_init__(self) -> None:
        if self.share.shape[0] != len(self.job_index):
            raise ValueError("Allocation share rows must match job_index")

    def effective_throughput(self, steps_per_s: np.ndarray) -> np.ndarray:
        """Σ_type X[job, type] · T[job, type]: the rate each job progresses at under X."""
        return (self.share * steps_per_s).sum(axis=1)

    def gpus_used(self, num_gpus: np.ndarray) -> np.ndarray:
        """[T] expected GPUs busy of each type: Σ_job X[job, type] · num_gpus[job]."""
        return (self.share * num_gpus[:, None]).sum(axis=0)

    def is_integral(self, tol: float = 1e-6) -> bool:
        """True when every job holds one type all the time or none at all (nothing to rotate)."""
        return bool(np.all((self.share < tol) | (self.share > 1 - tol)))
