"""Tiresias' discretised least attained service (2D-LAS, NSDI'19).

Attained service is GPU-seconds (GPUs × time run). Jobs sit in priority queues cut at
``thresholds_gpu_s``; a lower queue runs first, and within a queue jobs run in arrival
order, so a job is only demoted when it crosses a threshold, not every round.
"""

from __future__ import annotations

import numpy as np

from apportion.core.views import JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, OrderingPolicy

DEFAULT_THRESHOLDS_GPU_S = (3600.0, 36000.0)  # 1 and 10 GPU-hours


class Las(OrderingPolicy):
    name = "las"

    def __init__(
        self, *, thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S, agnostic: bool = False,
        restart_cost_s: float = DEFAULT_RESTART_COST_S,
    ) -> None:
        super().__init__(agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.thresholds_gpu_s = np.asarray(sorted(thresholds_gpu_s), dtype=np.float64)

    def queue_level(self, attained_service_s: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.thresholds_gpu_s, attained_service_s, side="right")

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        return self.queue_level(jobs.attained_service_s).astype(np.float64)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        """Time until the first running job crosses into a lower-priority queue."""
        level = self.queue_level(jobs.attained_service_s[running])
        below_last = level < len(self.thresholds_gpu_s)
        if not np.any(below_last):
            return float("inf")
        next_threshold = self.thresholds_gpu_s[level[below_last]]
        gap = next_threshold - jobs.attained_service_s[running][below_last]
        return float(np.min(gap / jobs.num_gpus[running][below_last]))
