"""Finish the current jobs as early as possible: minimise M with remaining_j / rate_j(X) ≤ M.

As an LP in w = 1/M: maximise w s.t. Σ_t X[j,t]·T[j,t] ≥ remaining_j · w for every job;
then, with w held, hand out what is left by normalised throughput. With ``space_sharing``
this is the max-min LP over T[j,t] / remaining_j with candidate pairs of one-GPU jobs
(apportion.policies.pairs): its level is w.
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.lp import LPPolicy
from apportion.solve.lp import LinearProgram, add_share_columns, shares_from

_W_SLACK = 1e-7


class MinMakespan(LPPolicy):
    name = "min-makespan"

    def __init__(self, *, agnostic: bool = False, space_sharing: bool = False) -> None:
        super().__init__(agnostic=agnostic, space_sharing=space_sharing)
        self.makespan_s = float("nan")  # the predicted time to finish every job, at the last solve

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        finishing = throughputs.steps_per_s / np.maximum(jobs.remaining_steps, 1e-12)[:, None]
        allocation, best_w = pairs.solve_max_min(jobs, cluster, throughputs, finishing, objective=value)
        self.makespan_s = 1.0 / best_w if best_w > 0 else float("inf")
        return allocation

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray) -> Allocation:
        steps_per_s = throughputs.steps_per_s
        runnable = steps_per_s > 0
        lp = LinearProgram()
        cols, job, gpu_type = add_share_columns(lp, runnable, jobs.num_gpus, cluster.capacity)
        w = lp.add_columns(1, cost=1.0)
        n = len(jobs)
        lp.add_rows(
            n,
            np.concatenate([job, np.arange(n)]),
            np.concatenate([cols, np.repeat(w, n)]),
            np.concatenate([steps_per_s[job, gpu_type], -jobs.remaining_steps]),
            lower=0.0,
        )
        solver = lp.build()
        best_w = solver.run("min-makespan LP")[w[0]]
        self.makespan_s = 1.0 / best_w if best_w > 0 else float("inf")
        # stage 2: keep w, spend what is left on normalised throughput
        solver.set_costs(np.concatenate([cols, w]), np.concatenate([value[job, gpu_type], [0.0]]))
        solver.set_col_bounds(w, np.array([best_w * (1 - _W_SLACK)]), np.array([np.inf]))
        values = solver.run("min-makespan LP, stage 2")
        return Allocation(jobs.index, shares_from(values, cols, job, gpu_type, runnable.shape))
