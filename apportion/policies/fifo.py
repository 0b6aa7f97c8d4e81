"""First in, first out.

apportion's form (the default) is non-preemptive: a started job runs to the end; the rest wait in
submission order, and a smaller later job may start on GPUs an earlier job cannot use yet.
``preemptive`` is Synergy's form (msr-fiddle/synergy, ``fifo_synergy_new.py``): every round is
decided afresh in submission order, so when an earlier job that did not fit does fit, it takes its
GPUs back from the later jobs that started meanwhile.

Either way a running job may still move to a faster type with free GPUs when that saves more than
the restart cost (OrderingPolicy), so a long job started on a K80 does not stay there while V100s
sit idle.

``head_of_line`` (``fifo:head-of-line``) is Helios's FIFO: strictly in submission order, no
later job starts while an earlier one waits."""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, OrderingPolicy, head_of_line


class Fifo(OrderingPolicy):
    name = "fifo"

    def __init__(self, *, preemptive: bool = False, head_of_line: bool = False, agnostic: bool = False,
                 restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        super().__init__(agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.preemptive = bool(preemptive)
        self.head_of_line = bool(head_of_line)

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        if self.preemptive:
            return np.zeros(len(jobs))  # submission order alone, running or not
        waiting = jobs.running_type < 0
        return waiting.astype(np.float64)  # running jobs first; ties broken by submit time

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        order = self.order(jobs, throughputs)
        allocation = self.allocate_ordered(order, jobs, cluster, throughputs)
        if self.head_of_line:
            head_of_line(order, allocation.share, jobs, throughputs.steps_per_s, cluster.capacity)
        return allocation
