"""What a policy sees: column-oriented views of the active jobs, the cluster and throughputs.

Policies never learn whether time is simulated or real; these views are all they get.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from apportion.core.rows import row_sum

if TYPE_CHECKING:
    from apportion.core.duration_samples import DurationSamples
    from apportion.core.elastic import ElasticView
    from apportion.core.estimate_ratios import EstimateRatios


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
    deadline_s: np.ndarray | None = None  # [n] absolute time each job should finish by, NaN if none
    elastic: ElasticView | None = None  # elastic jobs' sizes, noise scales and models; None: fixed sizes
    # [n] GPU time each job is predicted to need in all, from the history of finished jobs
    # (apportion.core.durations: median GPU-seconds at its fastest speed, and the log standard
    # deviation); None unless the policy asked for predicted durations
    predicted_gpu_s: np.ndarray | None = None
    predicted_log_sd: np.ndarray | None = None
    # [n] the group of finished jobs whose GPU times rank each job (-1: none; by its predicted lognormal),
    # and those groups' samples (apportion.core.duration_samples); None unless the policy asked for them
    sample_group: np.ndarray | None = None
    duration_samples: DurationSamples | None = None
    # [n] each job's own estimate of its GPU time (GPU-seconds at its fastest speed; NaN: none), and the
    # finished estimated jobs' actual ÷ estimate as a sample (apportion.core.estimate_ratios), which ranks
    # the estimated jobs once it is ready; None unless the policy asked for samples and a job has an estimate
    estimated_gpu_s: np.ndarray | None = None
    estimate_ratios: EstimateRatios | None = None
    # [n] CPU cores and GiB of memory each job needs beside its GPUs (JobTable.cpus, memory_gib);
    # None: no job asks for any
    cpus: np.ndarray | None = None
    memory_gib: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.index)

    def subset(self, rows: np.ndarray) -> JobView:
        """The same view restricted to ``rows`` (positions in this view)."""
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                value = value[rows]
            elif f.name == "elastic" and value is not None:
                value = value.subset(rows)
            values[f.name] = value
        return JobView(**values)

    @property
    def elapsed_s(self) -> np.ndarray:
        """Time since each job was submitted."""
        return self.now_s - self.submit_time_s

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
    """steps/s of each active job on each GPU type at the job's scale; 0 where it cannot run.

    ``pair_steps_per_s`` (space sharing) is indexed by job kind, not by job: ``[i, j, t]`` is
    the steps/s of a one-GPU job of kind i sharing a GPU of type t with one of kind j; NaN
    where unknown, 0 where the two do not fit together. None: no pair is ever formed.
    """

    steps_per_s: np.ndarray  # [n, T]
    pair_steps_per_s: np.ndarray | None = None  # [K, K, T] by JobView.kind

    @property
    def runnable(self) -> np.ndarray:
        return self.steps_per_s > 0

    def normalised(self, capacity: np.ndarray, *, agnostic: bool = False) -> np.ndarray:
        """[n, T] what a unit of time on each type is worth to each job, 1 = an average GPU.

        ``agnostic``: every runnable type is worth 1, as if all GPU types were equally fast.
        """
        if agnostic:
            return self.runnable.astype(np.float64)
        reference = self.reference(capacity)[:, None]
        return np.divide(
            self.steps_per_s, reference, out=np.zeros_like(self.steps_per_s), where=reference > 0
        )

    def reference(self, capacity: np.ndarray) -> np.ndarray:
        """Each job's steps/s on an average GPU of the cluster (capacity-weighted over runnable types)."""
        weights = np.where(self.runnable, capacity[None, :], 0.0)
        total = row_sum(weights)
        return np.divide(
            row_sum(self.steps_per_s * weights), total, out=np.zeros(len(total)), where=total > 0
        )
