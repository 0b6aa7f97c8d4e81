"""Most total normalised throughput: maximise Σ_j w_j Σ_t X[j,t]·T[j,t]/T_ref[j].

Each job's throughput counts relative to its speed on an average GPU of the cluster, so a
fast kind does not crowd out the rest just by running more steps per second.
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.solve.lp import LinearProgram, add_share_columns, shares_from


class MaxThroughput:
    name = "max-throughput"

    def __init__(self, *, agnostic: bool = False) -> None:
        self.agnostic = agnostic

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        value = throughputs.normalised(cluster.capacity, agnostic=self.agnostic) * jobs.priority[:, None]
        lp = LinearProgram()
        cols, job, gpu_type = add_share_columns(lp, value > 0, jobs.num_gpus, cluster.capacity, value[value > 0])
        values = lp.build().run("max-throughput LP")
        return Allocation(jobs.index, shares_from(values, cols, job, gpu_type, value.shape))
