"""Gavel's heterogeneity-aware max-min fairness (OSDI'20) over normalised effective throughput.

A job's normalised throughput is Σ_t X[j,t]·T[j,t] / T_ref[j], where T_ref is its speed on
an average GPU of the cluster; the LP maximises the smallest normalised throughput divided
by the job's priority weight, then hands out what is left by total normalised throughput.

``share_by`` says what is made equal. ``"gpu-time"`` (the default, Gavel's): normalised
throughput × the job's GPU count, so that every job gets the same GPU time on an average
GPU, and an 8-GPU job runs 1/8 of the time a one-GPU job runs. ``"rate"``: normalised
throughput alone, so that every job advances at the same fraction of its own full speed and
an 8-GPU job holds 8 times the GPU time of a one-GPU job; with mixed sizes, large jobs then
crowd out many small ones and the average JCT is worse (docs/gavel-comparison.md).
``water_filling`` raises the jobs that can still rise level by level instead, so that no
job's normalised throughput can rise without lowering a smaller one (about twice the solver
work). ``agnostic`` treats every GPU type as equally fast (time shares only), the baseline
Gavel compares against. ``space_sharing`` adds candidate pairs of one-GPU jobs sharing a GPU
(apportion.policies.pairs), where the throughputs know the pair's speeds.
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.rows import row_any
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.classes import JobClasses
from apportion.policies.lp import LPPolicy


SHARE_BY = ("gpu-time", "rate")  # the first is the default


class MaxMinFairness(LPPolicy):
    name = "max-min-fairness"

    def __init__(self, *, agnostic: bool = False, water_filling: bool = False, space_sharing: bool = False,
                 share_by: str = SHARE_BY[0]) -> None:
        super().__init__(agnostic=agnostic, space_sharing=space_sharing, water_filling=water_filling)
        if share_by not in SHARE_BY:
            raise ValueError(f"{self.name}: share_by must be one of {', '.join(SHARE_BY)}, got '{share_by}'")
        self.water_filling = water_filling
        self.share_by = share_by

    def value(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        weight = 1.0 / jobs.priority
        if self.share_by == "gpu-time":
            weight = weight * jobs.num_gpus
        return super().value(jobs, cluster, throughputs) * weight[:, None]

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        return pairs.solve_max_min(jobs, cluster, throughputs, value)[0]

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray) -> Allocation:
        share = np.zeros_like(value)
        can_run = row_any(value > 0)
        if not can_run.any():
            return Allocation(jobs.index, share)
        self._classes = JobClasses.for_cluster(self._classes, cluster.capacity, water_filling=self.water_filling)
        share[can_run] = self._classes.shares(jobs.index[can_run], value[can_run], jobs.num_gpus[can_run], level=True)
        return Allocation(jobs.index, share)
