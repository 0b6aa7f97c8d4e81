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
from apportion.policies.lp import LPPolicy


class MaxThroughput(LPPolicy):
    name = "max-throughput"

    def value(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        return super().value(jobs, cluster, throughputs) * jobs.priority[:, None]

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        return pairs.solve_max_total(jobs, cluster, throughputs, value)

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray) -> Allocation:
        return self.most_total(jobs, cluster, value)
