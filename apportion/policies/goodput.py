"""Goodput: each job's GPU type, GPU count and batch size, chosen together (Pollux OSDI'21, Sia SOSP'23).

Every round, for every job j and configuration c = (GPU type, GPU count) it may run in, the
job model gives its goodput at the best batch for c (``apportion.core.goodput``); its speedup
s[j, c] is that over its goodput at a fair share (the cluster's GPUs ÷ the jobs, rounded down to
a configuration's count, on an average GPU of the cluster). The policy picks at most one configuration per job, within each type's
capacity, to maximise the fairness-weighted generalised mean of the speedups,
(Σ_j w_j s_j^p / Σ_j w_j)^(1/p), with p = −1 by default (Pollux's): a job left waiting has
speedup 0, counted as ε = 1e-3 so that the mean stays finite and waiting is very costly. The
mean is monotone in Σ_j w_j u(s_j) with u(s) = ε^p − (s + ε)^p (p < 0), log(1 + s/ε) (p = 0)
or (s + ε)^p − ε^p (p > 0), which is linear in the choice: a multiple-choice knapsack, solved
with HiGHS (``apportion.solve.choice``): its LP relaxation, rounded (by default; the LP's
optimum bounds how far the rounding can be from the best), or exactly as a MILP (``exact``).

- Restarts: a running job's configurations other than its current one have their speedup
  multiplied by Pollux's (age − restarts·d) / (age + d) (at least 0), d the restart cost, so
  that young jobs are not rescaled every round for small gains; a running job is not given more
  GPUs where, the restart included, it would finish no sooner than where it is.
- Placement: a running job's current configuration is valued on the nodes its GPUs really lie
  on (``ElasticView.nodes_now``), where those are more than a tight placement needs, as Pollux
  values a placement rather than a count; every other configuration, as tightly placed.
- Limits: counts from each job's min_gpus to max_gpus; counts that pack whole into nodes (1, 2,
  4 … up to a node, then whole nodes), so that goodput is predicted for a tight placement.
- Heterogeneity: configurations on every GPU type, each with that type's step-time model
  (Sia's configurations); ``agnostic`` believes every type runs like the largest one.
- Ties among jobs that would run on equal terms go to the least attained service (LAS), by
  a bonus of at most 1e-4 of u(1).

On fixed-size jobs (no elastic columns) each job's only configuration is its own GPU count,
and its speedup its normalised throughput. docs/goodput.md gives the formulation in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.elastic import goodput_table
from apportion.core.goodput import nodes_for
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S

EPSILON = 1e-3  # a speedup of 0 (waiting) counts as this in the generalised mean
TIE_BREAK = 1e-4  # the most the least attained service adds to running, as a fraction of u(1)


@dataclass(frozen=True)
class GoodputProblem:
    """One round's choice: M configurations a job, at most one each, within each type's capacity."""

    value: np.ndarray  # [n, M] w_j · u(speedup) of each configuration, −inf where not allowed
    config_type: np.ndarray  # [M] GPU type of each configuration
    gpus: np.ndarray  # [n, M] GPUs it takes
    batch: np.ndarray | None  # [n, M] the batch it runs at (None: fixed-size jobs)


class Goodput:
    name = "goodput"
    sizes_jobs = True  # chooses elastic jobs' GPU counts (Allocation.num_gpus)

    def __init__(self, *, p: float = -1.0, agnostic: bool = False,
                 restart_cost_s: float = DEFAULT_RESTART_COST_S, exact: bool = False) -> None:
        if not (math.isfinite(p) and p <= 1):
            raise ValueError(f"goodput: p must be a number <= 1, got {p}")
        if not restart_cost_s >= 0:
            raise ValueError(f"goodput: restart_cost_s must be >= 0, got {restart_cost_s}")
        from apportion.solve.choice import ConfigurationChooser

        self.p = float(p)
        self.agnostic = agnostic
        self.restart_cost_s = float(restart_cost_s)
        self.exact = exact
        self.chooser = ConfigurationChooser()
        self._tables = GoodputTables()
        self._agnostic_kinds: tuple | None = None  # (kinds, (reference type, types), kinds as it runs)
        self.last_choice = None  # the last solve's Choice: objective, bound, gap

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        """Elastic jobs' speeds change as they train: ask every round. Fixed ones: only on a change."""
        return 0.0 if jobs.elastic is not None else math.inf

    def utility(self, speedup: np.ndarray) -> np.ndarray:
        """u(s): the generalised mean's increasing transform, 0 at s = 0."""
        s = np.maximum(speedup, 0.0)
        if self.p < 0:
            return EPSILON**self.p - (s + EPSILON) ** self.p
        if self.p == 0:
            return np.log1p(s / EPSILON)
        return (s + EPSILON) ** self.p - EPSILON**self.p

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        n, num_types = len(jobs), len(cluster.gpu_types)
        if n == 0:
            return Allocation(jobs.index, np.zeros((0, num_types)))
        problem = self.problem(jobs, cluster, throughputs)
        choice = self.chooser.choose(problem.value, problem.config_type, problem.gpus,
                                     cluster.capacity.astype(np.float64), exact=self.exact)
        self.last_choice = choice
        rows = np.flatnonzero(choice.config >= 0)
        picked = choice.config[rows]
        share = np.zeros((n, num_types))
        share[rows, problem.config_type[picked]] = 1.0
        if problem.batch is None:
            return Allocation(jobs.index, share)
        num_gpus = jobs.num_gpus.copy()
        num_gpus[rows] = problem.gpus[rows, picked].astype(np.int64)
        batch_size = jobs.elastic.batch_size.astype(np.float64).copy()
        batch_size[rows] = problem.batch[rows, picked]
        return Allocation(jobs.index, share, num_gpus=num_gpus, batch_size=batch_size)

    def problem(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> GoodputProblem:
        """The configurations each job may take this round and what each is worth."""
        n, num_types = len(jobs), len(cluster.gpu_types)
        if jobs.elastic is None:
            counts = None
            speedup = throughputs.normalised(cluster.capacity, agnostic=self.agnostic)[:, :, None]
            gpus = jobs.num_gpus.astype(np.float64)[:, None, None] * np.ones((1, num_types, 1))
            batch = None
            allowed = (speedup > 0) & (gpus <= cluster.capacity[None, :, None])
        else:
            counts, allowed_counts = self.counts(jobs, cluster)
            speedup, batch, base = self.speedups(jobs, cluster, counts)
            gpus = np.broadcast_to(counts[None, None, :].astype(np.float64), speedup.shape)
            allowed = allowed_counts[None, :, :] & (speedup > 0)
            allowed &= self.sooner_after_restart(jobs, counts, speedup, base)
            allowed &= counts[None, None, :] >= jobs.elastic.min_gpus[:, None, None]
            allowed &= counts[None, None, :] <= jobs.elastic.max_gpus[:, None, None]
        speedup = speedup * self.restart_factor(jobs, counts, gpus.shape)
        value = jobs.priority[:, None, None] * (self.utility(speedup) + self.tie_break(jobs)[:, None, None])
        value = np.where(allowed & ~dominated(np.where(allowed, value, -np.inf)), value, -np.inf)
        return GoodputProblem(
            value=value.reshape(n, -1), config_type=np.repeat(np.arange(num_types), gpus.shape[2]),
            gpus=gpus.reshape(n, -1), batch=None if batch is None else batch.reshape(n, -1),
        )

    def counts(self, jobs: JobView, cluster: ClusterView) -> tuple[np.ndarray, np.ndarray]:
        """([C] GPU counts any job may be given, [T, C] which of them each type allows).

        Per type: the divisors of its node size that are powers of two, then whole nodes, up to
        its capacity; and the size of every job that has only one (a fixed-size job among elastic
        ones), so that it can run."""
        per_node = jobs.elastic.gpus_per_node
        one_size = np.unique(jobs.elastic.min_gpus[jobs.elastic.min_gpus == jobs.elastic.max_gpus]).tolist()
        per_type = []
        for t in range(len(cluster.gpu_types)):
            node = int(per_node[t])
            within = [c for c in (2**i for i in range(node.bit_length())) if node % c == 0]
            whole = list(range(2 * node, int(cluster.capacity[t]) + 1, node))
            per_type.append({c for c in within + whole + one_size if c <= cluster.capacity[t]})
        counts = np.array(sorted(set().union(*per_type)) or [1], dtype=np.int64)
        allowed = np.array([[c in types for c in counts.tolist()] for types in per_type], dtype=bool)
        return counts, allowed

    def speedups(self, jobs: JobView, cluster: ClusterView, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([n, T, C] speedup over a fair share, [n, T, C] the batch that gets it)."""
        elastic = jobs.elastic
        kinds = elastic.kinds
        per_node = elastic.gpus_per_node
        if self.agnostic:  # every type runs as the largest one does
            reference = int(np.argmax(cluster.capacity))
            kinds = self.as_one_type(kinds, reference, len(cluster.gpu_types))
            per_node = np.full(len(cluster.gpu_types), per_node[reference])
        value, batch = self._tables.get(jobs, kinds, counts, per_node)
        value, batch = self.where_placed(jobs, kinds, counts, per_node, value, batch)
        # a fair share: the cluster's GPUs over the jobs, down to a configuration's count, within the job's limits
        fair = np.clip(np.full(len(jobs), cluster.capacity.sum() // len(jobs)), elastic.min_gpus, elastic.max_gpus)
        column = np.clip(np.searchsorted(counts, fair, side="right") - 1, 0, len(counts) - 1)
        at_fair = np.take_along_axis(value, column[:, None, None], axis=2)[:, :, 0]
        weight = np.where(at_fair > 0, cluster.capacity[None, :], 0.0)
        base = (at_fair * weight).sum(axis=1) / np.maximum(weight.sum(axis=1), 1e-300)
        speedup = np.divide(value, base[:, None, None], out=np.zeros_like(value), where=base[:, None, None] > 0)
        return speedup, batch, base

    def sooner_after_restart(self, jobs: JobView, counts: np.ndarray, speedup: np.ndarray,
                             base: np.ndarray) -> np.ndarray:
        """[n, T, C] False for a running job's larger configurations where it would finish no sooner,
        its restart included, than where it is: a job with less work left than a restart wins back
        is not grown (GPUs it would hold only to finish later). Shrinking or moving one, for others'
        sake, stays the generalised mean's choice."""
        sooner = np.ones(speedup.shape, dtype=bool)
        running = np.flatnonzero(jobs.running_type >= 0)
        if not len(running) or self.restart_cost_s <= 0:
            return sooner
        column = np.minimum(np.searchsorted(counts, jobs.elastic.gpus_now[running]), len(counts) - 1)
        current = counts[column] == jobs.elastic.gpus_now[running]
        rows, column = running[current], column[current]
        now = speedup[rows, jobs.running_type[rows], column] * base[rows]  # goodput where it is
        left = jobs.remaining_steps[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            stay_s = np.where(now > 0, left / now, np.inf)
            moved_s = self.restart_cost_s + left[:, None, None] / (speedup[rows] * base[rows, None, None])
        larger = counts[None, None, :] > jobs.elastic.gpus_now[rows, None, None]
        sooner[rows] = (moved_s < stay_s[:, None, None]) | ~larger
        sooner[rows, jobs.running_type[rows], column] = True
        return sooner

    def where_placed(self, jobs: JobView, kinds, counts: np.ndarray, per_node: np.ndarray, value: np.ndarray,
                     batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tables with each running job's current configuration valued on the nodes it really lies
        on, where those are more than its GPUs need (Pollux values a job's placement, not its count):
        a job left spread over nodes by an earlier round is then worth moving or resizing."""
        nodes_now = jobs.elastic.nodes_now
        if nodes_now is None:
            return value, batch
        running = np.flatnonzero(jobs.running_type >= 0)
        gpus_now = jobs.elastic.gpus_now[running]
        gpu_type = jobs.running_type[running]
        column = np.minimum(np.searchsorted(counts, gpus_now), len(counts) - 1)
        spread = (counts[column] == gpus_now) & (nodes_now[running] > nodes_for(gpus_now, per_node[gpu_type]))
        if not spread.any():
            return value, batch
        rows, column, gpu_type = running[spread], column[spread], gpu_type[spread]
        there, there_batch = goodput_table(kinds, jobs.kind[rows], counts[column][:, None],
                                           jobs.elastic.noise_scale[rows], per_node, nodes=nodes_now[rows][:, None])
        value, batch = value.copy(), batch.copy()
        value[rows, gpu_type, column] = there[np.arange(len(rows)), gpu_type, 0]
        batch[rows, gpu_type, column] = there_batch[np.arange(len(rows)), gpu_type, 0]
        return value, batch

    def as_one_type(self, kinds, reference: int, num_types: int):
        """``kinds`` with each of ``num_types`` types running as type ``reference`` does: the same object while
        neither changes, so that the goodput tables built on it are kept between rounds."""
        cached = self._agnostic_kinds
        if cached is None or cached[0] is not kinds or cached[1] != (reference, num_types):
            params = np.repeat(kinds.step_params[:, reference : reference + 1], num_types, axis=1)
            cached = self._agnostic_kinds = (kinds, (reference, num_types), replace(kinds, step_params=params))
        return cached[2]

    def restart_factor(self, jobs: JobView, counts: np.ndarray | None, shape: tuple[int, int, int]) -> np.ndarray:
        """[n, T, C] 1 for a job's current configuration (and for jobs that never ran), Pollux's
        (age − restarts·d) / (age + d) for the others."""
        started = ~np.isnan(jobs.first_start_s)
        factor = np.ones(shape)
        if not started.any():
            return factor
        restarts = jobs.elastic.restarts if jobs.elastic is not None else np.zeros(len(jobs))
        delay = self.restart_cost_s
        age = jobs.elapsed_s
        penalty = np.clip((age - restarts * delay) / np.maximum(age + delay, 1e-9), 0.0, 1.0)
        factor[started] = penalty[started, None, None]
        running = np.flatnonzero(jobs.running_type >= 0)
        if counts is None:  # a fixed-size job has one configuration per type
            column = np.zeros(len(running), dtype=np.int64)
            current = np.ones(len(running), dtype=bool)
        else:
            now_gpus = jobs.elastic.gpus_now[running]
            column = np.minimum(np.searchsorted(counts, now_gpus), len(counts) - 1)
            current = counts[column] == now_gpus
        factor[running[current], jobs.running_type[running[current]], column[current]] = 1.0
        return factor

    def tie_break(self, jobs: JobView) -> np.ndarray:
        """[n] a bonus for running, largest for the least attained service (ties: the earliest)."""
        order = np.lexsort((jobs.submit_time_s, jobs.attained_service_s))
        rank = np.empty(len(jobs))
        rank[order] = np.arange(len(jobs))
        return TIE_BREAK * float(self.utility(np.array(1.0))) * (len(jobs) - rank) / len(jobs)


def dominated(value: np.ndarray) -> np.ndarray:
    """[n, T, C] configurations no better than one with fewer GPUs of the same type: never worth
    their GPUs, so they are left out of the problem (counts ascend along the last axis)."""
    best_before = np.maximum.accumulate(value, axis=2)
    best_before = np.concatenate([np.full(value.shape[:2] + (1,), -np.inf), best_before[:, :, :-1]], axis=2)
    return value <= best_before


class GoodputTables:
    """Each job's goodput and best batch at every configuration, kept between rounds.

    A job's table is computed again only when its gradient noise scale has moved by more than
    ``NOISE_TOLERANCE`` since (it moves slowly, epoch by epoch) or the configurations changed.
    The kinds are told apart by identity, and the ones the tables were built on are held, so that
    another kinds object can never be taken for them."""

    NOISE_TOLERANCE = 0.02

    def __init__(self, *, fixed_batch: bool = False) -> None:
        self.fixed_batch = fixed_batch  # each job at its user's batch (else the best for each configuration)
        self._key: tuple | None = None
        self._noise = np.zeros(0)  # [rows] noise scale each cached table was computed at, 0: none
        self._value = np.zeros((0, 0, 0))
        self._batch = np.zeros((0, 0, 0))

    def get(self, jobs: JobView, kinds, counts: np.ndarray, per_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([n, T, C] goodput, [n, T, C] batch) of the view's jobs at ``counts`` GPUs of each type."""
        key = (kinds, counts.tobytes(), np.asarray(per_node).tobytes())
        rows = jobs.index
        shape = (len(kinds.gpu_types), len(counts))
        if self._key is None or key[0] is not self._key[0] or key[1:] != self._key[1:]:
            self._key = key
            self._noise = np.zeros(0)
            self._value = np.zeros((0,) + shape)
            self._batch = np.zeros((0,) + shape)
        if len(rows) and rows.max() >= len(self._noise):
            grow = int(rows.max()) + 1 - len(self._noise)
            grow = max(grow, len(self._noise))  # amortised doubling
            self._noise = np.concatenate([self._noise, np.zeros(grow)])
            self._value = np.concatenate([self._value, np.zeros((grow,) + shape)])
            self._batch = np.concatenate([self._batch, np.zeros((grow,) + shape)])
        noise = jobs.elastic.noise_scale
        cached = self._noise[rows]
        stale = ~(np.abs(noise - cached) <= self.NOISE_TOLERANCE * cached)
        if stale.any():
            todo = np.flatnonzero(stale)
            grid = np.broadcast_to(counts[None, :], (len(todo), len(counts)))
            value, batch = goodput_table(kinds, jobs.kind[todo], grid, noise[todo], per_node,
                                         batch_size=jobs.elastic.batch_size[todo] if self.fixed_batch else None)
            self._value[rows[todo]] = value
            self._batch[rows[todo]] = batch
            self._noise[rows[todo]] = noise[todo]
        return self._value[rows], self._batch[rows]
