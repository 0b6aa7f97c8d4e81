"""Space sharing: two one-GPU jobs on the same GPU, as extra columns of a policy's LP.

Jobs with equal rows (kind, GPUs, values, steps/s) form a class; by symmetry and convexity an
optimum exists where jobs of one class get equal shares, so the LP is written over classes
and class pairs and the pair time is handed back to concrete job pairs afterwards.

A pair of classes (c, d) on type t is worth forming only when the two together do more than
time-slicing them would: r_c + r_d > 1, where r_c is c's steps/s in the pair over its steps/s
alone. Otherwise giving c a share r_c·y and d a share r_d·y alone yields the same progress on
no more GPU time and no more of either job's time, so such pairs are left out without losing
anything. Of the pairs that remain, each class keeps a bounded list of the most promising
partners (``partners`` groups of ``CLASSES_PER_GROUP`` classes), never all pairs of jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.solve.lp import LinearProgram, Solver
from apportion.solve.shares import NOISE, clean_shares

DEFAULT_PARTNERS = 8  # candidate partner groups (kind, runnable types) per class
CLASSES_PER_GROUP = 4  # candidate partner classes per partner group
_GAIN = 1e-6  # a pair must beat time-slicing by more than this (r_c + r_d > 1 + _GAIN)
_Z_SLACK = 1e-7


@dataclass(frozen=True)
class SharingProblem:
    """The class-level view of one allocation problem with candidate pairs."""

    class_of: np.ndarray  # [n] class of each job, -1 for jobs that cannot run anywhere
    count: np.ndarray  # [C] jobs in each class
    gpus: np.ndarray  # [C] GPUs per job
    value: np.ndarray  # [C, T] what a unit of time alone on each type is worth to one job
    pair_class: np.ndarray  # [Q, 2] classes of each candidate pair (first <= second)
    pair_value: np.ndarray  # [Q, T, 2] worth of a unit of pair time to each member; 0 where not formed
    objective: np.ndarray  # [C, T] what the last stage maximises per unit of time alone (default: value)
    pair_objective: np.ndarray  # [Q, T, 2] the same per unit of pair time


def sharing_problem(
    jobs: JobView,
    throughputs: ThroughputView,
    value: np.ndarray,
    *,
    partners: int = DEFAULT_PARTNERS,
    all_pairs: bool = False,
    objective: np.ndarray | None = None,
    distinct: np.ndarray | None = None,
) -> SharingProblem:
    """Classes of ``jobs`` and their candidate pairs; ``value`` [n, T] is each job's worth of a
    unit of time alone on each type (the policy's own normalisation and weights), ``objective``
    [n, T] what a last stage maximises in total, if not ``value``; ``distinct`` [n, k] more
    columns that must also be equal for two jobs to share a class.

    ``all_pairs`` keeps every pair that beats time-slicing, however many (the exact problem,
    for checking the bounded list against).
    """
    steps = throughputs.steps_per_s
    objective = value if objective is None else objective
    can_run = (value > 0).any(axis=1)
    extra = np.zeros((len(jobs), 0)) if distinct is None else np.asarray(distinct, dtype=np.float64).reshape(len(jobs), -1)
    rows = np.column_stack([jobs.kind, jobs.num_gpus, value, steps, objective, extra])[can_run]
    class_of = np.full(len(jobs), -1, dtype=np.int64)
    if not can_run.any():
        empty, no_pairs = np.zeros((0, value.shape[1])), np.zeros((0, value.shape[1], 2))
        return SharingProblem(class_of, np.zeros(0), np.zeros(0), empty, np.zeros((0, 2), np.int64), no_pairs,
                              empty, no_pairs)
    _, first, inverse, count = np.unique(rows, axis=0, return_index=True, return_inverse=True, return_counts=True)
    class_of[can_run] = inverse.reshape(-1)
    member = np.flatnonzero(can_run)[first]  # one job of each class
    class_value = value[member]
    class_steps = steps[member]
    class_kind = jobs.kind[member].astype(np.int64)
    class_gpus = jobs.num_gpus[member].astype(np.float64)
    pair_class, pair_rate = _candidate_pairs(
        throughputs.pair_steps_per_s, class_kind, class_gpus, class_steps, count,
        partners=partners, all_pairs=all_pairs,
    )
    class_objective = objective[member]

    def worth(per_unit: np.ndarray) -> np.ndarray:
        """[Q, T, 2] each member's worth of a unit of pair time, from its worth per step/s alone."""
        per_step = np.divide(per_unit, class_steps, out=np.zeros_like(per_unit), where=class_steps > 0)
        return pair_rate * np.stack([per_step[pair_class[:, 0]], per_step[pair_class[:, 1]]], axis=2)

    return SharingProblem(class_of, count.astype(np.float64), class_gpus, class_value, pair_class,
                          worth(class_value), class_objective, worth(class_objective))


def _candidate_pairs(pair_rates, kind, gpus, steps, count, *, partners: int, all_pairs: bool):
    """[Q, 2] class pairs worth forming and [Q, T, 2] their members' steps/s together (0 where not formed).

    How much a pair gains over time-slicing depends only on the two kinds and the types both
    may run on, so gains are computed per group (kind, runnable types), never per pair of
    jobs. Each class takes its ``partners`` best partner groups and, in each, the
    ``CLASSES_PER_GROUP`` largest classes.
    """
    num_types = steps.shape[1]
    none = (np.zeros((0, 2), np.int64), np.zeros((0, num_types, 2)))
    if pair_rates is None:
        return none
    single = np.flatnonzero((gpus == 1) & (kind < pair_rates.shape[0]))
    if not len(single):
        return none
    runnable = steps[single] > 0
    group_key = kind[single] * (1 << num_types) + (runnable * (1 << np.arange(num_types))).sum(axis=1)
    _, first_of_group, group_of = np.unique(group_key, return_index=True, return_inverse=True)
    group_of = group_of.reshape(-1)
    g_kind = kind[single[first_of_group]]
    g_steps = steps[single[first_of_group]]  # equal within a group: same kind, same types, one GPU
    rates = np.nan_to_num(pair_rates[g_kind[:, None], g_kind[None, :], :], nan=0.0)  # [G, G, T]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(g_steps[:, None, :] > 0, rates / g_steps[:, None, :], 0.0)
    both = (rates > 0) & (np.swapaxes(rates, 0, 1) > 0) & (g_steps[:, None, :] > 0) & (g_steps[None, :, :] > 0)
    gain = np.where(both, ratio + np.swapaxes(ratio, 0, 1), 0.0)
    best = gain.max(axis=2)
    worth = best > 1 + _GAIN

    # classes of each group, largest first
    order = np.lexsort((-count[single], group_of))
    bounds = np.searchsorted(group_of[order], np.arange(len(g_kind) + 1))
    in_group = [single[order[bounds[g]: bounds[g + 1]]] for g in range(len(g_kind))]
    firsts, seconds = [], []
    for g in range(len(g_kind)):
        partner_groups = np.flatnonzero(worth[g])
        if not len(partner_groups):
            continue
        partner_groups = partner_groups[np.argsort(-best[g, partner_groups], kind="stable")]
        if not all_pairs:
            partner_groups = partner_groups[:partners]
        partner_classes = np.concatenate(
            [in_group[h] if all_pairs else in_group[h][:CLASSES_PER_GROUP] for h in partner_groups]
        )
        firsts.append(np.repeat(in_group[g], len(partner_classes)))
        seconds.append(np.tile(partner_classes, len(in_group[g])))
    if not firsts:
        return none
    pair_class = np.sort(np.column_stack([np.concatenate(firsts), np.concatenate(seconds)]), axis=1)
    pair_class = np.unique(pair_class, axis=0)
    same = pair_class[:, 0] == pair_class[:, 1]
    pair_class = pair_class[~same | (count[pair_class[:, 0]] >= 2)]  # a class pairs with itself only with two jobs

    position = np.empty(len(kind), dtype=np.int64)
    position[single] = np.arange(len(single))
    first, second = pair_class[:, 0], pair_class[:, 1]
    group_first, group_second = group_of[position[first]], group_of[position[second]]
    formed = gain[group_first, group_second] > 1 + _GAIN  # [Q, T]: types where the pair beats time-slicing
    pair_rate = np.stack([
        np.where(formed, rates[group_first, group_second], 0.0),
        np.where(formed, rates[group_second, group_first], 0.0),
    ], axis=2)
    return pair_class.astype(np.int64), pair_rate


class SharingLP:
    """The class-level LP with a column per (class, type) alone and per (candidate pair, type).

    Per class c with m_c jobs, each job's time and worth are averages over the class:
    time  Σ_t x[c,t] + Σ_{q∋c} Σ_t y[q,t] / m_c ≤ 1,
    worth w_c = Σ_t v[c,t]·x[c,t] + Σ_{q∋c} Σ_t p[q,t,c]·y[q,t] / m_c,
    and per type Σ_c m_c s_c x[c,t] + Σ_q y[q,t] ≤ C_t, where y[q,t] is the pair-GPU time of
    all job pairs of q together (a pair of one-GPU jobs holds one GPU).
    """

    def __init__(self, problem: SharingProblem, capacity: np.ndarray, *, with_level: bool) -> None:
        self.problem = problem
        p = problem
        num_classes, num_types = p.value.shape
        lp = LinearProgram()
        self.z = lp.add_columns(1, upper=np.inf)[0] if with_level else -1
        self.x_class, self.x_type = np.nonzero(p.value > 0)
        self.x_cols = lp.add_columns(len(self.x_class), upper=1.0)
        self.y_pair, self.y_type = np.nonzero((p.pair_value > 0).all(axis=2))
        self.y_cols = lp.add_columns(len(self.y_pair), upper=np.inf)
        side_class = p.pair_class[self.y_pair]  # [Y, 2]
        # time rows, one per class
        lp.add_rows(
            num_classes,
            np.concatenate([self.x_class, side_class[:, 0], side_class[:, 1]]),
            np.concatenate([self.x_cols, self.y_cols, self.y_cols]),
            np.concatenate([np.ones(len(self.x_cols)), 1 / p.count[side_class[:, 0]], 1 / p.count[side_class[:, 1]]]),
            upper=1.0,
        )
        # capacity rows, one per type
        lp.add_rows(
            num_types,
            np.concatenate([self.x_type, self.y_type]),
            np.concatenate([self.x_cols, self.y_cols]),
            np.concatenate([p.count[self.x_class] * p.gpus[self.x_class], np.ones(len(self.y_cols))]),
            upper=capacity.astype(np.float64),
        )
        x_worth = p.value[self.x_class, self.x_type]
        y_worth = p.pair_value[self.y_pair, self.y_type]  # [Y, 2]
        self.total_worth = np.concatenate([
            p.count[self.x_class] * p.objective[self.x_class, self.x_type],
            p.pair_objective[self.y_pair, self.y_type].sum(axis=1),
        ])
        self.level_rows = np.zeros(0, dtype=np.int64)
        if with_level:  # w_c - z >= 0 for every class
            self.level_rows = lp.add_rows(
                num_classes,
                np.concatenate([self.x_class, side_class[:, 0], side_class[:, 1], np.arange(num_classes)]),
                np.concatenate([self.x_cols, self.y_cols, self.y_cols, np.full(num_classes, self.z)]),
                np.concatenate([x_worth, y_worth[:, 0] / p.count[side_class[:, 0]],
                                y_worth[:, 1] / p.count[side_class[:, 1]], -np.ones(num_classes)]),
                lower=0.0,
            )
        self.solver: Solver = lp.build()
        self.num_cols = lp.num_cols

    def max_total(self) -> np.ndarray:
        """Maximise the total Σ_c m_c w_c of the problem's objective; returns column values."""
        cols = np.concatenate([self.x_cols, self.y_cols])
        self.solver.set_costs(cols, self.total_worth)
        return self.solver.run("space-sharing LP")

    def level(self) -> float:
        """The largest common worth z every class can reach at once."""
        cols = np.concatenate([self.x_cols, self.y_cols])
        self.solver.set_costs(cols, np.zeros(len(cols)))
        self.solver.set_costs(np.array([self.z]), np.ones(1))
        return float(self.solver.run("space-sharing max-min level")[self.z])

    def meets(self, floor: np.ndarray) -> bool:
        """Whether every class can reach its own worth ``floor[c]`` at once (z held at 0)."""
        zero = np.zeros(1)
        self.solver.set_col_bounds(np.array([self.z]), zero, zero)
        self.solver.set_row_bounds(self.level_rows, floor, np.full(len(floor), np.inf))
        return self.solver.feasible()

    def max_total_above(self, floor: np.ndarray) -> np.ndarray:
        """The most total objective with every class at or above its worth ``floor[c]``."""
        self.meets(floor)
        cols = np.concatenate([self.x_cols, self.y_cols])
        self.solver.set_costs(cols, self.total_worth)
        return self.solver.run("space-sharing LP above floors")

    def max_min(self) -> tuple[np.ndarray, float]:
        """Gavel's two stages: the largest common worth z, then the most total objective keeping it."""
        z = self.level()
        level = z * (1 - _Z_SLACK)
        self.solver.set_col_bounds(np.array([self.z]), np.array([level]), np.array([level]))
        self.solver.set_costs(np.array([self.z]), np.zeros(1))
        return self.max_total(), z

    def shares(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x [C, T] per job alone, y [Q, T] pair time of each class pair) from column values."""
        p = self.problem
        x = np.zeros(p.value.shape)
        x[self.x_class, self.x_type] = values[self.x_cols]
        y = np.zeros(p.pair_value.shape[:2])
        y[self.y_pair, self.y_type] = np.where(values[self.y_cols] < NOISE, 0.0, values[self.y_cols])
        return clean_shares(x), y


def to_allocation(jobs: JobView, problem: SharingProblem, x: np.ndarray, y: np.ndarray) -> Allocation:
    """Hand the class solution to jobs: each job its class's share alone, and each class pair's
    time spread over concrete job pairs so that every job of a class gets the same pair time."""
    num_types = x.shape[1]
    share = np.zeros((len(jobs), num_types))
    runs = problem.class_of >= 0
    share[runs] = x[problem.class_of[runs]]
    members = _members(problem.class_of, len(problem.count))
    pair_jobs, pair_share = [], []
    for q in np.flatnonzero(y.sum(axis=1) > 0):
        first, second = problem.pair_class[q]
        jobs_pairs, weight = _spread(members[first], members[second], first == second)
        pair_jobs.append(jobs_pairs)
        pair_share.append(weight[:, None] * y[q][None, :])
    if not pair_jobs:
        return Allocation(jobs.index, share)
    pair_jobs_all = np.concatenate(pair_jobs)
    pair_share_all = np.concatenate(pair_share)
    keep = pair_share_all.max(axis=1) >= NOISE
    return Allocation(jobs.index, share, pair_jobs_all[keep], np.minimum(pair_share_all[keep], 1.0))


def _members(class_of: np.ndarray, num_classes: int) -> list[np.ndarray]:
    order = np.argsort(class_of, kind="stable")
    sorted_class = class_of[order]
    bounds = np.searchsorted(sorted_class, np.arange(num_classes + 1))
    return [order[bounds[c]: bounds[c + 1]] for c in range(num_classes)]


def _spread(first: np.ndarray, second: np.ndarray, same: bool) -> tuple[np.ndarray, np.ndarray]:
    """Job pairs and their weights (summing to 1) that give every job of each class an equal part.

    Two classes: lay each class's jobs side by side on [0, 1) and pair the jobs whose intervals
    overlap, weighted by the overlap (at most m_c + m_d − 1 pairs). One class with m jobs:
    pair job i with job i + m//2, each pair weight 1/m, so every job is in two pairs.
    """
    if same:
        m = len(first)
        partner = (np.arange(m) + m // 2) % m
        jobs_pairs = np.column_stack([first, first[partner]])
        jobs_pairs.sort(axis=1)
        unique, inverse = np.unique(jobs_pairs, axis=0, return_inverse=True)
        return unique, np.bincount(inverse.reshape(-1), minlength=len(unique)) / m
    m_first, m_second = len(first), len(second)
    cuts = np.union1d(np.arange(m_first + 1) / m_first, np.arange(m_second + 1) / m_second)
    cuts = np.unique(np.round(cuts, 15))
    middle = (cuts[:-1] + cuts[1:]) / 2
    weight = np.diff(cuts)
    keep = weight > 1e-12
    middle, weight = middle[keep], weight[keep]
    i = np.minimum((middle * m_first).astype(np.int64), m_first - 1)
    k = np.minimum((middle * m_second).astype(np.int64), m_second - 1)
    return np.column_stack([first[i], second[k]]), weight


def solve_max_min(jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray,
                  *, partners: int = DEFAULT_PARTNERS, all_pairs: bool = False,
                  objective: np.ndarray | None = None) -> tuple[Allocation, float]:
    """Max-min over ``value`` with candidate pairs, then the most total ``objective`` (default:
    ``value``) keeping that level; the allocation and the max-min worth."""
    problem = sharing_problem(jobs, throughputs, value, partners=partners, all_pairs=all_pairs, objective=objective)
    if not len(problem.count):
        return Allocation(jobs.index, np.zeros(value.shape)), 0.0
    lp = SharingLP(problem, cluster.capacity, with_level=True)
    values, z = lp.max_min()
    x, y = lp.shares(values)
    return to_allocation(jobs, problem, x, y), z


def solve_max_total(jobs: JobView, cluster: ClusterView, throughputs: ThroughputView, value: np.ndarray,
                    *, partners: int = DEFAULT_PARTNERS, all_pairs: bool = False) -> Allocation:
    """The most total worth with candidate pairs."""
    problem = sharing_problem(jobs, throughputs, value, partners=partners, all_pairs=all_pairs)
    if not len(problem.count):
        return Allocation(jobs.index, np.zeros(value.shape))
    lp = SharingLP(problem, cluster.capacity, with_level=False)
    x, y = lp.shares(lp.max_total())
    return to_allocation(jobs, problem, x, y)
