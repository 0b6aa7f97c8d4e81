"""Least attained service, in two forms.

Attained service is GPU-seconds (GPUs × time run). apportion's form (the default) is Tiresias'
discretised 2D-LAS (NSDI'19): jobs sit in priority queues cut at ``thresholds_gpu_s``; a lower
queue runs first, and within a queue jobs run in arrival order, so a job is only demoted when it
crosses a threshold, not every round. ``continuous`` is Synergy's form (msr-fiddle/synergy,
``las_synergy_new.py``): jobs are ranked by their attained service itself, ties by arrival, and
re-ranked as it grows, so a running job gives way as soon as a waiting one has had less.
"""

from __future__ import annotations

import numpy as np

from apportion.core.views import JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, OrderingPolicy

DEFAULT_THRESHOLDS_GPU_S = (3600.0, 36000.0)  # 1 and 10 GPU-hours


class Las(OrderingPolicy):
    name = "las"

    def __init__(
        self, *, thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S, continuous: bool = False,
        agnostic: bool = False, restart_cost_s: float = DEFAULT_RESTART_COST_S,
    ) -> None:
        super().__init__(agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.thresholds_gpu_s = np.asarray(sorted(thresholds_gpu_s), dtype=np.float64)
        self.continuous = bool(continuous)

    def queue_level(self, attained_service_s: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.thresholds_gpu_s, attained_service_s, side="right")

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        if self.continuous:
            return np.asarray(jobs.attained_service_s, dtype=np.float64)
        return self.queue_level(jobs.attained_service_s).astype(np.float64)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        """Time until the first running job crosses into a lower-priority queue (``continuous``: until
        a running job's service passes that of the next waiting job above it)."""
        if self.continuous:
            return self._next_crossing_s(jobs, running)
        level = self.queue_level(jobs.attained_service_s[running])
        below_last = level < len(self.thresholds_gpu_s)
        if not np.any(below_last):
            return float("inf")
        next_threshold = self.thresholds_gpu_s[level[below_last]]
        gap = next_threshold - jobs.attained_service_s[running][below_last]
        return float(np.min(gap / jobs.num_gpus[running][below_last]))

    @staticmethod
    def _next_crossing_s(jobs: JobView, running: np.ndarray) -> float:
        """Seconds until some running job's attained service first passes a waiting job's that is
        above its own now: the ranking changes only there (running jobs grow, waiting ones do not)."""
        waiting = np.sort(jobs.attained_service_s[~running])
        served = jobs.attained_service_s[running]
        if not len(waiting) or not len(served):
            return float("inf")
        above = np.searchsorted(waiting, served, side="right")
        passes = above < len(waiting)
        if not np.any(passes):
            return float("inf")
        gap = waiting[above[passes]] - served[passes]
        return float(np.min(gap / jobs.num_gpus[running][passes]))
