"""Themis' finish-time fairness (NSDI'20), heterogeneity-aware as in Gavel.

A job's ratio ρ_j = (elapsed_j + remaining_j / rate_j(X)) / (elapsed_j + remaining_j / rate_iso_j),
where rate_iso_j is its rate on an isolated 1/n share of the cluster (n active jobs: a time
fraction min(1, G / (n·s_j)) spread over the GPU types in proportion to their counts). The
policy minimises the worst ρ. For a fixed ρ the constraints are linear —
rate_j(X) ≥ remaining_j / (ρ·D_j − elapsed_j) — so ρ is found by bisection on one HiGHS model
whose row bounds change between solves (warm starts); the isolated share itself gives ρ ≤ 1.
That model is kept across re-solves (apportion.solve.finish_time.FinishTimeModel: jobs
added and retired in place, the bisection's verdicts mostly read off bounds from one probe
near the previous ρ), and reaches the same ρ as solving each re-solve cold (``solve_cold``).
With ``space_sharing`` the same tests run on the space-sharing LP (candidate pairs of one-GPU
jobs, apportion.policies.pairs), its rate rows' floors moved the same way. ``durations``:
``oracle`` (the default) uses the true remaining steps, ``predicted`` what the history of
finished jobs predicts is left (apportion.policies.durations).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import pairs
from apportion.policies.durations import believed, check_durations
from apportion.policies.lp import LPPolicy
from apportion.solve.finish_time import FinishTimeModel
from apportion.solve.highs import quiet_highs
from apportion.solve.lp import INF, LinearProgram, add_share_columns, shares_from

RELATIVE_TOLERANCE = 1e-4  # bisection stops when ρ is known to this relative precision


class FinishTimeFairness(LPPolicy):
    name = "finish-time-fairness"

    def __init__(self, *, agnostic: bool = False, space_sharing: bool = False, durations: str = "oracle") -> None:
        super().__init__(agnostic=agnostic, space_sharing=space_sharing)
        self.durations = check_durations(durations, self.name)
        self.worst_ratio = float("nan")  # ρ at the last solve
        self._model: FinishTimeModel | None = None  # kept across re-solves: HiGHS restarts warm
        self._fresh = None  # a HiGHS object for the cold bisection's first test

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        return super().allocate(believed(jobs, throughputs, self.durations), cluster, throughputs)

    def isolated_rate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        gpus = float(cluster.capacity.sum())
        time_fraction = np.minimum(1.0, gpus / (len(jobs) * jobs.num_gpus))
        return time_fraction * (throughputs.steps_per_s @ (cluster.capacity / gpus))

    def isolated_finish(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        """[n] when each job would finish (from its submission) on its isolated share."""
        return _elapsed(jobs) + jobs.remaining_steps / self.isolated_rate(jobs, cluster, throughputs)

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray) -> Allocation:
        """The bisection on the model kept across re-solves; the same ρ as ``solve_cold``."""
        if self._model is None or len(self._model.capacity) != len(cluster.capacity):
            self._model = FinishTimeModel(cluster.capacity)
        isolated_finish = self.isolated_finish(jobs, cluster, throughputs)
        slots = self._model.sync(jobs.index, throughputs.steps_per_s, jobs.num_gpus)
        low, high = ratio_bracket(jobs, throughputs, isolated_finish)
        self.worst_ratio, share = self._model.solve(
            slots, jobs.remaining_steps, _elapsed(jobs), isolated_finish, value, cluster.capacity,
            low, high, bisect_ratio, self._cold_test(jobs, cluster, throughputs, isolated_finish),
        )
        return Allocation(jobs.index, share)

    def solve_cold(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                   value: np.ndarray) -> Allocation:
        """The same LP built afresh and bisected with a plain feasibility test at every midpoint
        (what ``solve`` computes, kept to check it against)."""
        isolated_finish = self.isolated_finish(jobs, cluster, throughputs)
        solver, rate_rows, cols, job, gpu_type = _cold_model(jobs, cluster, throughputs)
        n = len(jobs)

        def feasible(ratio: float) -> bool:
            solver.set_row_bounds(rate_rows, needed_rate(jobs, isolated_finish, ratio), np.full(n, INF))
            return solver.feasible()

        self.worst_ratio = high = lowest_ratio(jobs, throughputs, isolated_finish, feasible)
        # stage 2: hold every job at ρ = high, spend what is left on normalised throughput
        solver.set_row_bounds(rate_rows, needed_rate(jobs, isolated_finish, high * (1 + 1e-7)), np.full(n, INF))
        solver.set_costs(cols, value[job, gpu_type])
        values = solver.run("finish-time-fairness LP")
        return Allocation(jobs.index, shares_from(values, cols, job, gpu_type, throughputs.steps_per_s.shape))

    def _cold_test(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                   isolated_finish: np.ndarray) -> Callable[[float], bool]:
        """The cold bisection's first feasibility test, on a model built for it alone (in a HiGHS
        object kept for the purpose, cleared each time)."""
        def feasible(ratio: float) -> bool:
            if self._fresh is None:
                self._fresh = quiet_highs()
            solver, rate_rows, *_ = _cold_model(jobs, cluster, throughputs, self._fresh)
            solver.set_row_bounds(rate_rows, needed_rate(jobs, isolated_finish, ratio), np.full(len(jobs), INF))
            return solver.feasible()
        return feasible

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        isolated_finish = self.isolated_finish(jobs, cluster, throughputs)
        distinct = np.column_stack([jobs.remaining_steps, _elapsed(jobs), isolated_finish])
        problem = pairs.sharing_problem(jobs, throughputs, throughputs.steps_per_s, objective=value, distinct=distinct)
        sharing = pairs.SharingLP(problem, cluster.capacity, with_level=True)
        runs = problem.class_of >= 0

        def class_floor(ratio: float) -> np.ndarray:
            """Each class's needed rate (its jobs are alike, so any member's)."""
            floor = np.zeros(len(problem.count))
            floor[problem.class_of[runs]] = needed_rate(jobs, isolated_finish, ratio)[runs]
            return floor

        self.worst_ratio = high = lowest_ratio(jobs, throughputs, isolated_finish,
                                               lambda ratio: sharing.meets(class_floor(ratio)))
        x, y = sharing.shares(sharing.max_total_above(class_floor(high * (1 + 1e-7))))
        return pairs.to_allocation(jobs, problem, x, y)


def _cold_model(jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, highs=None):
    """A fresh HiGHS model of the share LP with a rate row per job (floors 0); its solver, rate rows and columns."""
    steps_per_s = throughputs.steps_per_s
    lp = LinearProgram()
    cols, job, gpu_type = add_share_columns(lp, steps_per_s > 0, jobs.num_gpus, cluster.capacity)
    rate_rows = lp.add_rows(len(jobs), job, cols, steps_per_s[job, gpu_type], lower=0.0)
    return lp.build(highs), rate_rows, cols, job, gpu_type


def _elapsed(jobs: JobView) -> np.ndarray:
    return np.maximum(jobs.elapsed_s, 0.0)


def needed_rate(jobs: JobView, isolated_finish: np.ndarray, ratio: float) -> np.ndarray:
    """[n] the rate each job needs to finish by ``ratio`` times its isolated finish time (inf: too late)."""
    time_left = ratio * isolated_finish - _elapsed(jobs)
    return np.where(time_left > 0, jobs.remaining_steps / np.maximum(time_left, 1e-12), INF)


def ratio_bracket(jobs: JobView, throughputs: ThroughputView, isolated_finish: np.ndarray) -> tuple[float, float]:
    """Where the bisection starts: running flat out (no allocation does better) and the isolated share (ρ = 1)."""
    fastest_finish = _elapsed(jobs) + jobs.remaining_steps / throughputs.steps_per_s.max(axis=1)
    return float(np.max(fastest_finish / isolated_finish)) * (1 - 1e-9), 1.0


def bisect_ratio(low: float, high: float, feasible: Callable[[float], bool]) -> float:
    """The smallest feasible worst ρ to ``RELATIVE_TOLERANCE``, by bisection from [low, high]."""
    if feasible(low):
        high = low
    while high - low > RELATIVE_TOLERANCE * high:
        middle = 0.5 * (low + high)
        if feasible(middle):
            high = middle
        else:
            low = middle
    return high


def lowest_ratio(jobs: JobView, throughputs: ThroughputView, isolated_finish: np.ndarray,
                 feasible: Callable[[float], bool]) -> float:
    """The smallest feasible worst ρ, by bisection between running flat out and the isolated share (ρ = 1)."""
    return bisect_ratio(*ratio_bracket(jobs, throughputs, isolated_finish), feasible)
