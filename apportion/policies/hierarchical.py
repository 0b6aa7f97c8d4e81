"""Hierarchical fairness: first across queues (nominal quota, then weight), then inside each
queue by the queue's own policy (``fair`` or ``fifo``). Queues are Kueue's: see docs/queues.md.

Level 1, across queues. Jobs are grouped into classes k (same queue q(k), GPUs s_k and
normalised throughputs a[k, t], i.e. ``ThroughputView.normalised`` over the whole cluster);
m_k jobs in class k. x[k, t] is how many of them run on type t (fractional: time shares).
A queue's throughput is measured in average-GPU equivalents (one GPU type: GPUs held),

    U_q = Σ_{k∈q} Σ_t s_k a[k,t] x[k,t].

Every stage keeps   Σ_t x[k,t] ≤ m_k  (a job holds at most all of its time)
                    Σ_k s_k x[k,t] ≤ C_t  (capacity).

  stage 1 (guarantees):  G_q = max U_q  with queue q confined to its nominal quota,
                         Σ_{k∈q} s_k x[k,t] ≤ N[q,t]. Queues do not interact here (the
                         quotas add up to at most C, checked), so one LP gives every G_q:
                         what the quota is worth to the queue's jobs now, 0 with no jobs.
  stage 2 (borrowing):   weighted max-min (water-filling) of the borrowed part over the
                         queues with ``borrowing: true`` (B):
                             max z  s.t.  U_q − G_q ≥ w_q z   for q in B not yet frozen
                                          U_q − G_q ≥ w_q L_q for q in B frozen at level L_q
                                          U_q ≥ G_q                        for every q
                                          Σ_{k∈q} s_k x[k,t] ≤ N[q,t]      for q not in B
                         then queues that cannot rise above z are frozen at L_q = z and the
                         rest go on (the rise test of ``apportion.solve.max_min``).
  stage 3 (hand out):    max Σ_q U_q with every level held, so no capacity idles that some
                         queue could use.

Queue q's entitlement is then c[q, t] = Σ_{k∈q} s_k x[k, t] GPUs of each type. A queue with
no active job is not in the LP at all: its quota is lent (stage 2 shares it), and the
allocation after its first job arrives gives it back, up to what its jobs can use (G_q).

Level 2, inside a queue, on a cluster of capacity c[q] (fractional):
  fair  max-min fairness (``MaxMinFairness``, one kept per queue) over the queue's jobs, its
        normalisation taken over the queue's own capacity; each job's priority is divided by
        its user's active job count in the queue, so the queue's users share it equally.
  fifo  whole GPUs in Fifo's order (running jobs first, then submit time) on floor(c[q]),
        then the fractional rest of c[q] as time shares, in the same order (a job takes
        min(1 − its share, rest_t / s_j) of its best types), so no entitled capacity idles.

The union is feasible for the cluster: each queue stays within c[q] and Σ_q c[q] ≤ C.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.queues import DEFAULT_QUEUE, Queue, QueueConfig
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import allocate_in_order
from apportion.policies.max_min_fairness import MaxMinFairness
from apportion.solve.lp import INF, LinearProgram
from apportion.solve.shares import NOISE

_SLACK = 1e-7  # a held level or guarantee gives up this relative fraction to stay feasible
_RISE = 1e-4  # the rise test asks whether a queue can rise by this fraction of the level


@dataclass(frozen=True)
class QueueShares:
    """Level 1's answer for the queues with active jobs."""

    queues: tuple[Queue, ...]  # the active queues, in the config's order, the default last
    queue_of: np.ndarray  # [n] position in ``queues`` of each job
    capacity: np.ndarray  # [Q, T] GPUs of each type each queue is entitled to, c[q, t]
    throughput: np.ndarray  # [Q] U_q, average-GPU equivalents
    guarantee: np.ndarray  # [Q] G_q, what the nominal quota alone gives the queue's jobs


class Hierarchical:
    name = "hierarchical"

    def __init__(self, queues: QueueConfig | None = None, *, agnostic: bool = False) -> None:
        if queues is None:
            raise ValueError("hierarchical needs --queues FILE (a queues YAML, see docs/queues.md)")
        self.config = queues
        self.agnostic = agnostic
        self._fair: dict[str, MaxMinFairness] = {}  # per queue, kept across rounds
        self._checked: tuple | None = None

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def never_runs(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        """[n] jobs in a queue that may not borrow whose nominal quota of every type they can run
        on is smaller than the job: they can never run, so they are unschedulable, not waiting."""
        names, name_of = np.unique(jobs.queue.astype(str), return_inverse=True)
        queues = [self.config.queue(name) for name in names]
        nominal = self.config.nominal_matrix(queues, cluster.gpu_types)[name_of.reshape(-1)]  # [n, T]
        fixed = np.array([not q.borrowing for q in queues], dtype=bool)[name_of.reshape(-1)]
        room = (throughputs.steps_per_s > 0) & (nominal >= jobs.num_gpus[:, None])
        return fixed & ~room.any(axis=1)

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        shares = self.entitle(jobs, cluster, throughputs)
        share = np.zeros(throughputs.steps_per_s.shape)
        for q, queue in enumerate(shares.queues):
            capacity = shares.capacity[q]
            if not capacity.any():
                continue
            rows = np.flatnonzero(shares.queue_of == q)
            sub = jobs.subset(rows)
            rates = throughputs.steps_per_s[rows]
            if queue.policy == "fifo":
                share[rows] = fifo_shares(sub, rates, capacity, agnostic=self.agnostic)
            else:
                _, user_of, per_user = np.unique(sub.user.astype(str), return_inverse=True, return_counts=True)
                sub = replace(sub, priority=sub.priority / per_user[user_of.reshape(-1)])
                policy = self._fair.setdefault(queue.name, MaxMinFairness(agnostic=self.agnostic))
                view = ClusterView(cluster.gpu_types, capacity, cluster.price_per_gpu_hour)
                share[rows] = policy.allocate(sub, view, ThroughputView(rates)).share
        return Allocation(jobs.index, share)

    def entitle(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> QueueShares:
        """Level 1: each active queue's GPUs of each type (the LP in the module docstring)."""
        key = (cluster.gpu_types, tuple(np.asarray(cluster.capacity, dtype=float)))
        if self._checked != key:
            self.config.check_cluster(cluster.gpu_types, np.asarray(cluster.capacity, dtype=float))
            self._checked = key
        listed = {q.name: i for i, q in enumerate(self.config.queues)}
        names, name_of = np.unique(jobs.queue.astype(str), return_inverse=True)
        slot = np.array([listed.get(name, len(listed)) for name in names], dtype=np.int64)
        job_slot = slot[name_of.reshape(-1)]
        active, queue_of = np.unique(job_slot, return_inverse=True)
        queue_of = queue_of.reshape(-1)
        queues = tuple(self.config.queues[s] if s < len(listed) else DEFAULT_QUEUE for s in active)
        capacity = np.asarray(cluster.capacity, dtype=np.float64)
        num_q, num_t = len(queues), len(capacity)
        if num_q == 0:
            return QueueShares(queues, queue_of, np.zeros((0, num_t)), np.zeros(0), np.zeros(0))

        a = throughputs.normalised(capacity, agnostic=self.agnostic)
        rows = np.column_stack([queue_of, jobs.num_gpus, a]).astype(np.float64)
        classes, count = np.unique(rows, axis=0, return_counts=True)
        model = _QueueModel(
            queue=classes[:, 0].astype(np.int64),
            gpus=classes[:, 1],
            a=classes[:, 2:],
            count=count.astype(np.float64),
            capacity=capacity,
            nominal=self.config.nominal_matrix(list(queues), cluster.gpu_types),
            weight=np.array([q.weight for q in queues]),
            borrowing=np.array([q.borrowing for q in queues]),
        )
        guarantee = model.guarantees()
        x = model.share_out(guarantee)
        used = np.zeros((num_q, num_t))
        np.add.at(used, model.queue, model.gpus[:, None] * x)
        throughput = np.zeros(num_q)
        np.add.at(throughput, model.queue, (model.gpus[:, None] * model.a * x).sum(axis=1))
        used = np.where(used < NOISE, 0.0, used)
        total = used.sum(axis=0)
        used *= np.where(total > capacity, capacity / np.maximum(total, 1e-300), 1.0)[None, :]
        return QueueShares(queues, queue_of, used, throughput, guarantee)


class _QueueModel:
    """Level 1's LPs over job classes (see the module docstring)."""

    def __init__(self, *, queue, gpus, a, count, capacity, nominal, weight, borrowing) -> None:
        self.queue, self.gpus, self.a, self.count = queue, gpus, a, count
        self.capacity, self.nominal, self.weight, self.borrowing = capacity, nominal, weight, borrowing
        self.num_queues = len(weight)

    def _columns(self, lp: LinearProgram, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x[k, t] for allowed (class, type) pairs, with the class and capacity rows."""
        k, t = np.nonzero(allowed)
        cols = lp.add_columns(len(k), upper=self.count[k])
        lp.add_rows(len(self.count), k, cols, 1.0, upper=self.count)
        lp.add_rows(len(self.capacity), t, cols, self.gpus[k], upper=self.capacity)
        return cols, k, t

    def _confine(self, lp: LinearProgram, cols, k, t, queues: np.ndarray) -> None:
        """Σ_{k∈q} s_k x[k, t] ≤ N[q, t] for the given queues."""
        inside = np.isin(self.queue[k], queues)
        num_t = len(self.capacity)
        lp.add_rows(self.num_queues * num_t, self.queue[k[inside]] * num_t + t[inside], cols[inside],
                    self.gpus[k[inside]], upper=self.nominal.reshape(-1))

    def guarantees(self) -> np.ndarray:
        """Stage 1: G_q, the most U_q the queue's jobs get from its nominal quota alone."""
        guarantee = np.zeros(self.num_queues)
        allowed = (self.a > 0) & (self.nominal[self.queue] > 0)
        if not allowed.any():
            return guarantee
        lp = LinearProgram()
        cols, k, t = self._columns(lp, allowed)
        self._confine(lp, cols, k, t, np.arange(self.num_queues))
        value = self.gpus[k] * self.a[k, t]
        solver = lp.build()
        solver.set_costs(cols, value)
        x = solver.run("hierarchical guarantees LP")[cols]
        np.add.at(guarantee, self.queue[k], value * x)
        return np.maximum(guarantee * (1 - _SLACK) - NOISE, 0.0)

    def share_out(self, guarantee: np.ndarray) -> np.ndarray:
        """Stages 2 and 3: x[k, t] with guarantees kept and the rest shared by weight."""
        num_q = self.num_queues
        lender_only = ~self.borrowing
        allowed = (self.a > 0) & ~(lender_only[self.queue][:, None] & (self.nominal[self.queue] <= 0))
        x = np.zeros_like(self.a)
        if not allowed.any():
            return x
        lp = LinearProgram()
        cols, k, t = self._columns(lp, allowed)
        self._confine(lp, cols, k, t, np.flatnonzero(lender_only))
        value = self.gpus[k] * self.a[k, t]
        # U_q ≥ G_q for every queue
        lp.add_rows(num_q, self.queue[k], cols, value, lower=guarantee)
        # water-filling over the borrowing queues that can run something
        can_run = np.zeros(num_q, dtype=bool)
        can_run[self.queue[k]] = True
        fill = np.flatnonzero(self.borrowing & can_run)
        z = lp.add_columns(1)[0]
        level = lp.add_columns(len(fill))  # l_q ≥ z while q waits; fixed at L_q once frozen
        rise = lp.add_columns(len(fill), upper=0.0)  # r_q, opened only by the rise test
        in_fill = np.full(num_q, -1)
        in_fill[fill] = np.arange(len(fill))
        mine = in_fill[self.queue[k]] >= 0
        f = len(fill)
        # U_q − w_q l_q − r_q ≥ G_q
        lp.add_rows(
            f,
            np.concatenate([in_fill[self.queue[k[mine]]], np.arange(f), np.arange(f)]),
            np.concatenate([cols[mine], level, rise]),
            np.concatenate([value[mine], -self.weight[fill], -np.ones(f)]),
            lower=guarantee[fill],
        )
        tie = lp.add_rows(f, np.r_[np.arange(f), np.arange(f)], np.r_[level, np.full(f, z)],
                          np.r_[np.ones(f), -np.ones(f)], lower=0.0)  # l_q − z ≥ 0
        solver = lp.build()

        waiting = np.arange(f)
        while len(waiting):
            solver.set_costs(np.array([z]), np.array([1.0]))
            z_star = float(solver.run("hierarchical level LP")[z])
            held = z_star * (1 - _SLACK)
            frozen = waiting
            if len(waiting) > 1:
                delta = max(_RISE * z_star, 1e-5)
                solver.set_costs(np.array([z]), np.array([0.0]))
                solver.set_col_bounds(np.array([z]), np.array([held]), np.array([held]))
                solver.set_costs(rise[waiting], np.ones(len(waiting)))
                solver.set_col_bounds(rise[waiting], np.zeros(len(waiting)), np.full(len(waiting), delta))
                risen = solver.run("hierarchical rise LP")[rise[waiting]] > 0.5 * delta
                solver.set_costs(rise[waiting], np.zeros(len(waiting)))
                solver.set_col_bounds(rise[waiting], np.zeros(len(waiting)), np.zeros(len(waiting)))
                solver.set_col_bounds(np.array([z]), np.array([0.0]), np.array([INF]))
                if risen.any() and not risen.all():
                    frozen = waiting[~risen]
            solver.set_col_bounds(level[frozen], np.full(len(frozen), held), np.full(len(frozen), held))
            solver.set_row_bounds(tie[frozen], np.full(len(frozen), -INF), np.full(len(frozen), INF))
            waiting = np.setdiff1d(waiting, frozen)

        solver.set_costs(np.array([z]), np.array([0.0]))
        solver.set_costs(cols, value)
        x[k, t] = solver.run("hierarchical hand-out LP")[cols]
        return np.where(x < NOISE, 0.0, x)


def fifo_shares(jobs: JobView, steps_per_s: np.ndarray, capacity: np.ndarray, *, agnostic: bool = False) -> np.ndarray:
    """A fifo queue's X on a fractional ``capacity``: whole GPUs in Fifo's order on its floor,
    then the fractional rest as time shares in the same order."""
    order = np.lexsort((jobs.submit_time_s, (jobs.running_type < 0).astype(np.float64)))
    whole = np.floor(capacity + 1e-6)
    share = allocate_in_order(order, jobs.num_gpus, steps_per_s, whole, agnostic=agnostic,
                              current_type=jobs.running_type)
    rest = capacity - (share * jobs.num_gpus[:, None]).sum(axis=0)
    runnable = steps_per_s > 0
    num_types = len(capacity)
    score = np.where(runnable, float(num_types) - np.arange(num_types)[None, :] if agnostic else steps_per_s, -np.inf)
    held = np.flatnonzero(jobs.running_type >= 0)
    score[held, jobs.running_type[held]] = np.inf
    waiting = order[share[order].sum(axis=1) < 1.0]  # jobs with no whole GPUs, in order
    # Each step either serves a job fully (at least one GPU of the rest) or uses up a type,
    # after which the jobs that can still use an open type are picked again: the loop is
    # bounded by the GPUs left over plus the number of types, not by the queue's length.
    while len(waiting) and rest.max() > NOISE:
        waiting = waiting[(runnable[waiting] & (rest > NOISE)[None, :]).any(axis=1)]
        closed = False
        for position, j in enumerate(waiting):
            size = float(jobs.num_gpus[j])
            for t in np.argsort(-score[j], kind="stable"):
                left = 1.0 - share[j].sum()
                if left <= NOISE or not runnable[j, t]:
                    break
                was_open = rest[t] > NOISE
                take = min(left, rest[t] / size)
                if take > NOISE:
                    share[j, t] += take
                    rest[t] -= take * size
                if was_open and rest[t] <= NOISE:  # this type has just been used up
                    rest[t] = 0.0
                    closed = True
            if closed:
                waiting = waiting[position + 1:]
                break
        else:
            break
    return share
