"""Pick at most one configuration per job so that the GPUs used fit, for the most total value.

A multiple-choice knapsack with one knapsack per GPU type, solved with HiGHS::

    maximise   Σ_j Σ_m value[j, m] · x[j, m]
    subject to Σ_m x[j, m] ≤ 1                                 each job: one configuration or none
               Σ_j Σ_{m of type t} gpus[j, m] · x[j, m] ≤ C_t   each GPU type's capacity
               x binary

``exact``: as a MILP, to HiGHS's default optimality gap (its dual bound is the proof).
Otherwise the LP relaxation, rounded: an extreme point of this LP leaves at most one job per
capacity row split between configurations, so rounding those few (each to its best
configuration that still fits), then spending any GPUs left free on the jobs that gain most
from them, loses little; the LP's optimum is the bound reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np

from apportion.solve.highs import quiet_highs, run as run_highs
from apportion.solve.shares import SolveError

INTEGRAL = 1e-6  # an LP value this close to 0 or 1 is taken as whole
RETRIES = ({}, {"simplex_scale_strategy": 0}, {"solver": "ipm"})  # HiGHS options tried in turn
# the MILP to a tight gap: values are scaled to at most 1, and what tells configurations apart
# is small beside what running at all is worth
MILP_OPTIONS = {"mip_rel_gap": 1e-9, "mip_abs_gap": 1e-9}


@dataclass(frozen=True)
class Choice:
    config: np.ndarray  # [n] the configuration (column of ``value``) each job takes, -1 for none
    objective: float  # Σ value of the choice
    bound: float  # no choice can do better than this (proved by HiGHS)
    exact: bool  # solved as a MILP (else: the LP relaxation, rounded)

    @property
    def gap(self) -> float:
        """How far the choice may be from the best, relative to the bound."""
        return (self.bound - self.objective) / max(abs(self.bound), 1e-12)


class ConfigurationChooser:
    """One HiGHS object reused across calls (a policy re-solves every round)."""

    def __init__(self) -> None:
        self._highs: highspy.Highs | None = None
        self._tuned = False

    def choose(self, value: np.ndarray, gpu_type: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, *,
               exact: bool = True) -> Choice:
        """``value`` [n, M] (−inf: not allowed), ``gpu_type`` [M] and ``gpus`` [n, M] of each configuration."""
        n, m = value.shape
        allowed = np.isfinite(value) & (gpus <= capacity[gpu_type][None, :])
        job, col = np.nonzero(allowed)
        if not len(job):
            return Choice(np.full(n, -1, dtype=np.int64), 0.0, 0.0, exact)
        num_types = len(capacity)
        lp = highspy.HighsLp()
        lp.num_col_ = len(job)
        lp.num_row_ = n + num_types
        lp.sense_ = highspy.ObjSense.kMaximize
        scale = float(np.max(np.abs(value[job, col]))) or 1.0  # costs of at most 1: HiGHS's tolerances are absolute
        # rounded to 1e-12 of the largest: the last bits of numpy's sums vary with memory alignment
        # from run to run, and the MILP's near-ties must not turn that into different choices
        lp.col_cost_ = np.round(value[job, col].astype(np.float64) / scale, 12)
        lp.col_lower_ = np.zeros(len(job))
        lp.col_upper_ = np.ones(len(job))
        lp.row_lower_ = np.full(n + num_types, -highspy.kHighsInf)
        lp.row_upper_ = np.concatenate([np.ones(n), capacity.astype(np.float64)])
        # each column has two entries: its job's row, then its type's row (rows ascending within a column)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.arange(0, 2 * len(job) + 1, 2, dtype=np.int32)
        lp.a_matrix_.index_ = np.column_stack([job, n + gpu_type[col]]).ravel().astype(np.int32)
        lp.a_matrix_.value_ = np.column_stack([np.ones(len(job)), gpus[job, col]]).ravel().astype(np.float64)
        if exact:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * len(job)
        highs = self._solve(lp, MILP_OPTIONS if exact else {})
        x = np.asarray(highs.getSolution().col_value)
        info = highs.getInfo()
        if exact:
            config = np.full(n, -1, dtype=np.int64)
            taken = x > 0.5
            config[job[taken]] = col[taken]
            bound = float(info.mip_dual_bound)
        else:
            config = _round(x, job, col, value, gpu_type, gpus, capacity, n)
            bound = float(info.objective_function_value)
        bound *= scale
        chosen = config >= 0
        objective = float(value[np.flatnonzero(chosen), config[chosen]].sum())
        return Choice(config, objective, max(bound, objective), exact)

    def _solve(self, lp: highspy.HighsLp, always: dict) -> highspy.Highs:
        """HiGHS run on ``lp`` to optimality; on numerical trouble, again without scaling, then by
        interior point, each from scratch. SolveError if none of them reaches an optimum."""
        statuses = []
        for options in RETRIES:
            highs = self._solver(fresh=bool(statuses) or self._tuned)
            self._tuned = bool(options or always)  # options set here must not carry over to the next problem
            for name, setting in {**always, **options}.items():
                highs.setOptionValue(name, setting)
            highs.passModel(lp)
            run_highs(highs)
            status = highs.getModelStatus()
            if status == highspy.HighsModelStatus.kOptimal:
                return highs
            statuses.append(highs.modelStatusToString(status))
        self._highs = None
        raise SolveError(f"configuration choice: {', then '.join(statuses)}")

    def _solver(self, fresh: bool = False) -> highspy.Highs:
        if self._highs is None or fresh:
            self._highs = quiet_highs()
        else:
            self._highs.clearModel()
            self._highs.clearSolver()
        return self._highs


def _round(x, job, col, value, gpu_type, gpus, capacity, n) -> np.ndarray:
    """A whole choice from an LP solution: whole picks kept, split jobs given their best fitting pick."""
    config = np.full(n, -1, dtype=np.int64)
    whole = x > 1 - INTEGRAL
    config[job[whole]] = col[whole]
    left = capacity.astype(np.float64).copy()
    np.subtract.at(left, gpu_type[col[whole]], gpus[job[whole], col[whole]])
    split = np.unique(job[(x > INTEGRAL) & ~whole])
    split = split[config[split] < 0]
    if not len(split):  # a whole LP optimum is the MILP's optimum too
        return config
    for j in split[np.argsort(-np.nanmax(np.where(np.isfinite(value[split]), value[split], -np.inf), axis=1))]:
        options = np.flatnonzero(np.isfinite(value[j]))
        options = options[np.argsort(-value[j, options], kind="stable")]
        for option in options.tolist():
            if value[j, option] > 0 and gpus[j, option] <= left[gpu_type[option]] + 1e-9:
                config[j] = option
                left[gpu_type[option]] -= gpus[j, option]
                break
    return _improve(config, value, gpu_type, gpus, left)


def _improve(config, value, gpu_type, gpus, left) -> np.ndarray:
    """Local search from a whole choice: repeatedly take the best single move (one job to another
    configuration that fits in what is free, its own GPUs counted free) or exchange (one job
    gives up GPUs, another takes them) that gains, until none does."""
    n, m = value.shape
    rows = np.arange(n)
    num_types = len(left)
    onehot = np.eye(num_types)[gpu_type]  # [M, T]
    while True:
        has = config >= 0
        current = np.where(has, value[rows, np.maximum(config, 0)], 0.0)
        held = np.zeros((n, num_types))
        held[rows[has], gpu_type[config[has]]] = gpus[rows[has], config[has]]
        # each move's gain and the GPUs of each type it takes from what is free (negative: gives back)
        gain = np.where(np.isfinite(value), value - current[:, None], -np.inf)  # [n, M]
        takes = gpus[:, :, None] * onehot[None, :, :] - held[:, None, :]  # [n, M, T]
        single = np.all(takes <= left + 1e-9, axis=2) & (gain > 1e-12)
        best_single = float(gain[single].max()) if single.any() else 0.0
        # exchanges: a move that takes GPUs paired with another job's move that frees them
        takers = np.flatnonzero((gain > 1e-12).ravel() & np.any(takes.reshape(n * m, num_types) > left + 1e-9, axis=1))
        givers = np.flatnonzero(np.isfinite(gain.ravel()) & np.any(takes.reshape(n * m, num_types) < -1e-9, axis=1))
        best_pair, pair = 0.0, None
        if len(takers) and len(givers):
            flat_gain, flat_takes = gain.ravel(), takes.reshape(n * m, num_types)
            total = flat_gain[takers][:, None] + flat_gain[givers][None, :]
            fits = np.all(flat_takes[takers][:, None, :] + flat_takes[givers][None, :, :] <= left + 1e-9, axis=2)
            fits &= (takers // m)[:, None] != (givers // m)[None, :]
            total = np.where(fits, total, -np.inf)
            if total.size and total.max() > 1e-12:
                a, b = np.unravel_index(int(np.argmax(total)), total.shape)
                best_pair, pair = float(total[a, b]), (takers[a], givers[b])
        if best_single <= 1e-12 and pair is None:
            return config
        moves = [pair] if best_pair > best_single else [np.flatnonzero(np.where(single, gain, -np.inf).ravel()
                                                                        == best_single)[:1][0]]
        for move in (moves[0] if best_pair > best_single else moves):
            j, c = divmod(int(move), m)
            left -= takes[j, c]
            config[j] = c
