"""An LP-based policy: the most total normalised throughput, each job kept above a floor of time."""

import math

import numpy as np

from apportion.policies.api import Allocation, LinearProgram, Option, add_share_columns, shares_from


def _fraction(value):
    if not 0 <= float(value) <= 1:
        raise ValueError(f"must be between 0 and 1, got {value}")
    return float(value)


class ThroughputFloor:
    """most total normalised throughput, every job above --floor of an equal share of time"""

    requires_api = 1
    is_lp = True  # so POP's --partitions applies
    options = (Option("floor", float, "the part of an equal share of time each job is kept above", 0.5,
                      metavar="F", check=_fraction),)

    def __init__(self, floor=0.5):
        self.floor = floor

    def allocate(self, jobs, cluster, throughputs):
        n = len(jobs.index)
        value = throughputs.normalised(cluster.capacity) * jobs.priority[:, None]  # 1 = an average GPU
        lp = LinearProgram()
        # X[j, t] where job j can run on type t, worth its normalised throughput;
        # each job's time <= 1, each type's GPUs <= its capacity
        runnable = throughputs.runnable
        x, job, gpu_type = add_share_columns(lp, runnable, jobs.num_gpus, cluster.capacity, cost=value[runnable])
        # short[j]: how far job j falls below its floor, at a cost above any throughput it could buy
        short = lp.add_columns(n, cost=-1000.0, upper=1.0)
        equal = min(1.0, cluster.capacity.sum() / max(int(jobs.num_gpus.sum()), 1))
        lp.add_rows(n, np.concatenate([job, np.arange(n)]), np.concatenate([x, short]), 1.0,
                    lower=self.floor * equal)  # Σ_t X[j, t] + short[j] >= floor × equal share
        values = lp.build().run("throughput-floor")
        return Allocation(jobs.index, shares_from(values, x, job, gpu_type, value.shape))

    def next_change_s(self, jobs, running):
        return math.inf  # an LP's answer changes only when jobs come or go
