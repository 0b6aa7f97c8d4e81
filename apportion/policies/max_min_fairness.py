"""Gavel's heterogeneity-aware max-min fairness (OSDI'20) over normalised effective throughput.

A job's normalised throughput is Σ_t X[j,t]·T[j,t] / T_ref[j], where T_ref is its speed on
an average GPU of the cluster; the LP maximises the smallest normalised throughput divided
by the job's priority weight, then hands out what is left by total normalised throughput.
``water_filling`` raises the jobs that can still rise level by level instead, so that no
job's normalised throughput can rise without lowering a smaller one (about twice the solver
work). ``agnostic`` treats every GPU type as equally fast (time shares only), the baseline
Gavel compares against. ``space_sharing`` adds candidate pairs of one-GPU jobs sharing a GPU
(apportion.policies.pairs), where the throughputs know the pair's speeds.
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.classes import JobClasses


class MaxMinFairness:
    name = "max-min-fairness"

    def __init__(self, *, agnostic: bool = False, water_filling: bool = False, space_sharing: bool = False) -> None:
        if water_filling and space_sharing:
            raise ValueError("max-min-fairness: --water-filling and --space-sharing cannot be combined")
        self.agnostic = agnostic
        self.water_filling = water_filling
        self.space_sharing = space_sharing
        self._classes: JobClasses | None = None  # kept across rounds: HiGHS restarts warm

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(
        self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView
    ) -> Allocation:
        a = throughputs.normalised(cluster.capacity, agnostic=self.agnostic) / jobs.priority[:, None]
        share = np.zeros_like(a)
        can_run = (a > 0).any(axis=1)
        if not can_run.any():
            return Allocation(jobs.index, share)
        if self.space_sharing and throughputs.pair_steps_per_s is not None:
            return pairs.solve_max_min(jobs, cluster, throughputs, a)[0]
        self._classes = JobClasses.for_cluster(self._classes, cluster.capacity, water_filling=self.water_filling)
        share[can_run] = self._classes.shares(jobs.index[can_run], a[can_run], jobs.num_gpus[can_run], level=True)
        return Allocation(jobs.index, share)
