"""A heterogeneity-unaware policy: every job the same share of time, every GPU type alike."""

import math

import numpy as np

from apportion.policies.api import Allocation


class EqualShare:
    """every job an equal share of time, spread over GPU types by their size alone"""

    requires_api = 1

    def allocate(self, jobs, cluster, throughputs):
        runnable = throughputs.steps_per_s > 0  # [jobs, types]: where each job can run at all
        asked = max(int(jobs.num_gpus.sum()), 1)  # GPUs all the jobs want at once
        fraction = min(1.0, cluster.capacity.sum() / asked)  # of its time, the same for every job
        weight = runnable * cluster.capacity  # a type's part of a job's time: its GPU count, not its speed
        total = np.maximum(weight.sum(axis=1, keepdims=True), 1)
        return Allocation(jobs.index, fraction * weight / total)

    def next_change_s(self, jobs, running):
        return math.inf  # the shares change only when jobs come or go
