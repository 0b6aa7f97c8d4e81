"""Most total normalised throughput: maximise Σ_j w_j Σ_t X[j,t]·T[j,t]/T_ref[j].

Each job's throughput counts relative to its speed on an average GPU of the cluster, so a
fast kind does not crowd out the rest just by running more steps per second. With
``space_sharing``, candidate pairs of one-GPU jobs may share a GPU (apportion.policies.pairs).
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.solve.lp import LinearProgram, add_share_columns, shares_from


class MaxThroughput:
    name = "max-throughput"

    def __init__(self, *, agnostic: bool = False, space_sharing: bool = False) -> None:
        self.agnostic = agnostic
        self.space_sharing = space_sharing

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        value = throughputs.normalised(cluster.capacity, agnostic=self.agnostic) * jobs.priority[:, None]
        if self.space_sharing and throughputs.pair_steps_per_s is not None:
            return pairs.solve_max_total(jobs, cluster, throughputs, value)
        lp = LinearProgram()
        cols, job, gpu_type = add_share_columns(lp, value > 0, jobs.num_gpus, cluster.capacity, value[value > 0])
        values = lp.build().run("max-throughput LP")
        return Allocation(jobs.index, shares_from(values, cols, job, gpu_type, value.shape))
