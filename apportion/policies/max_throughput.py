"""Most total normalised throughput: maximise Σ_j w_j Σ_t X[j,t]·T[j,t]/T_ref[j].

Each job's throughput counts relative to its speed on an average GPU of the cluster, so a
fast kind does not crowd out the rest just by running more steps per second. Jobs with equal
rows share one LP column per type (an optimum exists where they get equal shares), and the
model is kept across rounds so HiGHS restarts warm when only job counts change. With
``space_sharing``, candidate pairs of one-GPU jobs may share a GPU (apportion.policies.pairs).
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.classes import JobClasses


class MaxThroughput:
    name = "max-throughput"

    def __init__(self, *, agnostic: bool = False, space_sharing: bool = False) -> None:
        self.agnostic = agnostic
        self.space_sharing = space_sharing
        self._classes: JobClasses | None = None  # kept across rounds: HiGHS restarts warm

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        value = throughputs.normalised(cluster.capacity, agnostic=self.agnostic) * jobs.priority[:, None]
        if self.space_sharing and throughputs.pair_steps_per_s is not None:
            return pairs.solve_max_total(jobs, cluster, throughputs, value)
        self._classes, share = JobClasses.most_total(self._classes, jobs, cluster.capacity, value)
        return Allocation(jobs.index, share)
