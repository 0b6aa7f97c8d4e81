"""First in, first out.

apportion's form (the default) is non-preemptive: a started job runs to the end; the rest wait in
submission order, and a smaller later job may start on GPUs an earlier job cannot use yet.
``preemptive`` is Synergy's form (msr-fiddle/synergy, ``fifo_synergy_new.py``): every round is
decided afresh in submission order, so when an earlier job that did not fit does fit, it takes its
GPUs back from the later jobs that started meanwhile.

Either way a running job may still move to a faster type with free GPUs when that saves more than
the restart cost (OrderingPolicy), so a long job started on a K80 does not stay there while V100s
sit idle."""

from __future__ import annotations

import numpy as np

from apportion.core.views import JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, OrderingPolicy


class Fifo(OrderingPolicy):
    name = "fifo"

    def __init__(self, *, preemptive: bool = False, agnostic: bool = False,
                 restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        super().__init__(agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.preemptive = bool(preemptive)

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        if self.preemptive:
            return np.zeros(len(jobs))  # submission order alone, running or not
        waiting = jobs.running_type < 0
        return waiting.astype(np.float64)  # running jobs first; ties broken by submit time
