"""What a policy sees: column-oriented views of the active jobs, the cluster and throughputs.

Policies never learn whether time is simulated or real; these views are all they get.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JobView:
    """The jobs a policy must allocate this round (arrived, not finished), as arrays."""

    index: np.ndarray  # [n] rows in the JobTable, identifying each job
    submit_time_s: np.ndarray  # [n]
    kind: np.ndarray  # [n] job-kind index
    num_gpus: np.ndarray  # [n] GPUs each job runs on when it runs (its scale this round)
    priority: np.ndarray  # [n] weight
    total_steps: np.ndarray  # [n]
    steps_done: np.ndarray  # [n]
    attained_service_s: np.ndarray  # [n] GPU-seconds received so far
    first_start_s: np.ndarray  # [n] when each job first ran, NaN if never
    running_type: np.ndarray  # [n] GPU type index it holds now, -1 if none
    queue: np.ndarray  # [n] str
    user: np.ndarray  # [n] str
    now_s: float

    def __len__(self) -> int:
        return len(self.index)

    @property
    def remaining_steps(self) -> np.ndarray:
        return self.total_steps - self.steps_done


@dataclass(frozen=True)
class ClusterView:
    gpu_types: tuple[str, ...]
    capacity: np.ndarray  # [T] GPUs of each type
    price_per_gpu_hour: np.ndarray  # [T], NaN where unknown


@dataclass(frozen=True)
class ThroughputView:
    """steps/s of each active job on each GPU type at the job's scale; 0 where it cannot run."""

    steps_per_s: np.ndarray  # [n, T]

    @property
    def runnable(self) -> np.ndarray:
        return self.steps_per_s > 0

    def reference(self, capacity: np.ndarray) -> np.ndarray:
        """Each job's steps/s on an average GPU of the cluster (capacity-weighted over runnable types)."""
        weights = np.where(self.runnable, capacity[None, :], 0.0)
        total = weights.sum(axis=1)
        return np.divide(
            (self.steps_per_s * weights).sum(axis=1), total, out=np.zeros(len(total)), where=total > 0
        )
