"""First in, first out, non-preemptive: a started job runs to the end; the rest wait in
submission order, and a smaller later job may start on GPUs an earlier job cannot use yet.
A running job may still move to a faster type with free GPUs when that saves more than the
restart cost (OrderingPolicy), so a long job started on a K80 does not stay there while
V100s sit idle."""

from __future__ import annotations

import numpy as np

from apportion.core.views import JobView, ThroughputView
from apportion.policies.base import OrderingPolicy


class Fifo(OrderingPolicy):
    name = "fifo"

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        waiting = jobs.running_type < 0
        return waiting.astype(np.float64)  # running jobs first; ties broken by submit time
