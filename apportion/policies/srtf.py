"""Shortest remaining time first: remaining steps at the job's fastest runnable speed."""

from __future__ import annotations

import numpy as np

from apportion.core.views import JobView, ThroughputView
from apportion.policies.base import OrderingPolicy


class Srtf(OrderingPolicy):
    name = "srtf"

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        fastest = throughputs.steps_per_s.max(axis=1)
        return np.divide(
            jobs.remaining_steps, fastest, out=np.full(len(jobs), np.inf), where=fastest > 0
        )
