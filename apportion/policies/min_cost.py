"""Most throughput per dollar: maximise Σ_j Σ_t X[j,t]·(T[j,t]/T_ref[j]) / price[t] (Gavel).

With ``slo``, a job with a deadline must progress at least at the rate that finishes it in
time: Σ_t X[j,t]·T[j,t] ≥ remaining_j / (deadline_j − now). A deadline the cluster cannot
meet is not dropped: a slack variable with a large penalty lets the LP stay feasible, and the
jobs whose slack is used are listed in ``unmeetable`` (the policy's prediction; the
simulator's summary counts the deadlines actually missed). With ``space_sharing`` (not with
``slo``), candidate pairs of one-GPU jobs may share a GPU (apportion.policies.pairs).
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.lp import LPPolicy
from apportion.solve.lp import LinearProgram, add_share_columns, shares_from

_PENALTY = 1e4  # per unit of missing deadline rate, in multiples of the largest objective term


class MinCost(LPPolicy):
    name = "min-cost"

    def __init__(self, *, agnostic: bool = False, slo: bool = False, space_sharing: bool = False) -> None:
        super().__init__(agnostic=agnostic, space_sharing=space_sharing, slo=slo)
        self.slo = slo
        self.unmeetable: np.ndarray = np.zeros(0, dtype=np.int64)  # job rows, at the last solve

    def value(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        prices = cluster.price_per_gpu_hour
        if np.any(np.isnan(prices)) or np.any(prices <= 0):
            missing = [t for t, p in zip(cluster.gpu_types, prices) if not p > 0]
            raise ValueError(
                f"min-cost needs a positive price per GPU-hour for every GPU type; none for "
                f"{', '.join(missing)} (set price_per_gpu_hour in the cluster YAML)"
            )
        return super().value(jobs, cluster, throughputs) / prices[None, :]

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        return pairs.solve_max_total(jobs, cluster, throughputs, value)

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray) -> Allocation:
        if not (self.slo and jobs.deadline_s is not None):
            return self.most_total(jobs, cluster, value)
        lp = LinearProgram()
        runnable = value > 0
        cols, job, gpu_type = add_share_columns(lp, runnable, jobs.num_gpus, cluster.capacity, value[runnable])

        slack = slo_jobs = None
        if self.slo and jobs.deadline_s is not None:
            time_left = jobs.deadline_s - jobs.now_s
            slo_jobs = np.flatnonzero(np.isfinite(jobs.deadline_s))
            rate = jobs.remaining_steps[slo_jobs] / np.maximum(time_left[slo_jobs], 1e-9)
            if len(slo_jobs):
                penalty = _PENALTY * max(float(value.max()), 1.0)
                slack = lp.add_columns(len(slo_jobs), cost=-penalty, upper=1.0)
                # Σ_t X[j,t]·T[j,t] + rate_j·slack_j >= rate_j, in units of the required rate
                position = np.full(len(jobs), -1)
                position[slo_jobs] = np.arange(len(slo_jobs))
                in_slo = position[job] >= 0
                entry_row = np.concatenate([position[job][in_slo], np.arange(len(slo_jobs))])
                entry_col = np.concatenate([cols[in_slo], slack])
                entry_val = np.concatenate([
                    throughputs.steps_per_s[job[in_slo], gpu_type[in_slo]] / rate[position[job][in_slo]],
                    np.ones(len(slo_jobs)),
                ])
                lp.add_rows(len(slo_jobs), entry_row, entry_col, entry_val, lower=1.0)
        values = lp.build().run("min-cost LP")
        if slack is not None:
            self.unmeetable = jobs.index[slo_jobs[values[slack] > 1e-6]]
        return Allocation(jobs.index, shares_from(values, cols, job, gpu_type, value.shape))
