"""Share by user: the cluster is divided among users first, then each user's jobs are ordered
by the chosen policy, as Slurm's fair-share and Kueue's cohorts do, so that one user's backlog
never stands ahead of every later job of everyone else.

Each active user (one with a job in the round) is entitled to a share of the cluster in
proportion to its weight (1 unless ``weights`` names it); a user who needs less than its
share gives the rest to the others, level by level (water-filling). How the share is applied
depends on the policy:

- ordering policies (fifo, las, srtf, qssf): users take turns. A job's turn is the GPUs its
  user's jobs ranked before it take, divided by the user's weight; jobs run in order of turn,
  then the user who was given fewer GPU-seconds (over its weight) while shared first, then the
  policy's own order. So with equal weights each user's first job comes before any user's
  second; a user's running jobs may be preempted for another user's first (even under fifo,
  which never preempts within a user); and users whose jobs each take the whole cluster
  alternate. Whole GPUs, nothing idles that a job could use.
- LP policies (max-min-fairness, finish-time-fairness, min-makespan, max-throughput, min-cost,
  and their POP partitions): each user gets the same fraction of every GPU type's capacity,
  its water-filled share of the cluster's GPUs (demand: the GPUs of its jobs that can run
  somewhere), and the policy allocates the user's jobs on that part alone (one policy kept per
  user, so each solves warm), as POP does with its partitions.
- hierarchical (its fair queues already divide each queue among its users), goodput and optimus
  (they size jobs over the whole cluster), and policies registered from outside: unchanged.

Both clocks wrap their policy with :func:`share_by_user` (``SimConfig.share_by_user``,
``ServeConfig.share_by_user``), so a replay of a server run decides as it did.
"""

from __future__ import annotations

import copy
import math
from typing import Mapping

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import OrderingPolicy, Policy


def check_user_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` as {user: positive finite float}; ValueError saying which user's is wrong and how."""
    checked = {}
    for user, weight in dict(weights).items():
        if not isinstance(user, str) or not user.strip():
            raise ValueError(f"a user's name must be text, got {user!r}")
        try:
            value = float(weight)
        except (TypeError, ValueError):
            value = math.nan
        if not 0 < value < math.inf:
            raise ValueError(f"{user.strip()}'s weight must be a positive number, got {weight!r}")
        checked[user.strip()] = value
    return checked


def parse_user_weights(text: str) -> dict[str, float]:
    """``alice=2,bob=1`` → {"alice": 2.0, "bob": 1.0}; ValueError saying what is wrong."""
    weights: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        user, sep, weight = part.partition("=")
        if not sep or not user.strip():
            raise ValueError(f"must be USER=WEIGHT,… (e.g. alice=2,bob=1), got '{part.strip()}'")
        weights[user.strip()] = weight.strip()
    return check_user_weights(weights)


def user_weight_array(users: np.ndarray, weights: Mapping[str, float]) -> np.ndarray:
    """[U] the weight of each user in ``users`` (1 for a user ``weights`` does not name)."""
    return np.array([float(weights.get(str(u), 1.0)) for u in users], dtype=np.float64)


def users_of(jobs: JobView) -> tuple[np.ndarray, np.ndarray]:
    """(users, user_of [n]): the users with jobs, sorted, and each job's position among them.

    Compared run by run: a user's jobs mostly sit together (an array's tasks, one user's
    submits), so only each run's first name is sorted, not every job's."""
    names = jobs.user
    if len(names) == 0:
        return np.zeros(0, dtype=str), np.zeros(0, dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(names[1:] != names[:-1]) + 1]
    users, run_of = np.unique(names[starts].astype(str), return_inverse=True)
    return users, np.repeat(run_of.reshape(-1), np.diff(np.r_[starts, len(names)]))


def interleave_users(order: np.ndarray, jobs: JobView, weights: Mapping[str, float],
                     used: Mapping[str, float] | None = None,
                     users: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``order`` (positions in ``jobs``, first to run first) with users taking turns: each job's
    turn is the GPUs of its user's jobs before it in ``order`` over the user's weight; by turn,
    then (``used``: GPU-seconds each user held) the user who held less over its weight first,
    then by ``order``. ``users``: ``users_of(jobs)``, if known."""
    names, user_of = users if users is not None else users_of(jobs)
    if len(order) < 2 or len(names) < 2:
        return order
    user_of = user_of[order]
    gpus = jobs.num_gpus[order].astype(np.float64)
    weight = user_weight_array(names, weights)
    turn = np.empty(len(order))
    if len(names) <= 16:  # a few users: one pass each
        for u in range(len(names)):
            mine = user_of == u
            taken = gpus[mine]
            turn[mine] = (np.cumsum(taken) - taken) / weight[u]
    else:
        by_user = np.argsort(user_of, kind="stable")  # each user's jobs together, in ``order``
        through = np.cumsum(gpus[by_user])
        first = np.r_[True, user_of[by_user][1:] != user_of[by_user][:-1]]
        start = np.maximum.accumulate(np.where(first, np.arange(len(by_user)), 0))
        before_user = np.where(start > 0, through[start - 1], 0.0)  # GPUs of the users sorted before
        turn[by_user] = (through - gpus[by_user] - before_user) / weight[user_of[by_user]]
    held = np.array([float((used or {}).get(u, 0.0)) for u in names.tolist()]) / weight
    if not held.any():
        return order[np.argsort(turn, kind="stable")]
    return order[np.lexsort((held[user_of], turn))]  # stable: ties stay in ``order``


class UserTurns:
    """Whose turn it is, for an ordering policy shared by user: the users' weights, and the
    GPU-seconds each user's jobs were given while shared (what breaks a tie between turns, so
    that a user whose jobs each take the whole cluster does not come first every time)."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        self.weights = dict(weights)
        self.used: dict[str, float] = {}  # user -> GPU-seconds allocated so far
        self._held: dict[str, float] = {}  # user -> GPUs allocated at the last solve
        self._since: float | None = None  # when
        self._users: tuple[JobView, tuple[np.ndarray, np.ndarray]] | None = None  # the jobs being solved, their users

    def users(self, jobs: JobView) -> tuple[np.ndarray, np.ndarray]:
        """``users_of(jobs)``, worked out once for the jobs being solved."""
        if self._users is None or self._users[0] is not jobs:
            self._users = (jobs, users_of(jobs))
        return self._users[1]

    def order(self, order: np.ndarray, jobs: JobView) -> np.ndarray:
        return interleave_users(order, jobs, self.weights, self.used, self.users(jobs))

    def charge(self, now_s: float) -> None:
        """Count the GPUs allocated at the last solve up to ``now_s``."""
        if self._since is not None and now_s > self._since:
            for user, held in self._held.items():
                self.used[user] = self.used.get(user, 0.0) + held * (now_s - self._since)
        if self._since is None or now_s > self._since:
            self._since = now_s

    def hold(self, jobs: JobView, allocation: Allocation) -> None:
        """The GPUs each user's jobs are allocated from now on."""
        names, user_of = self.users(jobs)
        gpus = np.bincount(user_of, weights=allocation.share.sum(axis=1) * jobs.num_gpus, minlength=len(names))
        self._held = dict(zip(names.tolist(), gpus.tolist()))
        self._users = None  # hold no job view past its solve


def water_fill(demand: np.ndarray, weight: np.ndarray, total: float) -> np.ndarray:
    """[U] each user's share of ``total``: in proportion to ``weight``, none above its ``demand``,
    what one leaves given to the others, level by level; all of ``total`` handed out while
    demand lasts."""
    share = np.zeros(len(demand))
    left = float(total)
    active = demand > 0
    while active.any() and left > 1e-12:
        level = left / weight[active].sum()
        capped = active & (demand - share <= weight * level + 1e-12)
        if not capped.any():
            share[active] += weight[active] * level
            break
        left -= (demand[capped] - share[capped]).sum()
        share[capped] = demand[capped]
        active &= ~capped
    return share


def user_shares(jobs: JobView, steps_per_s: np.ndarray, capacity: np.ndarray,
                weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users, user_of [n], fraction [U]): the active users, each job's, and the fraction of every
    GPU type each user is entitled to (water-filled on the GPUs of its jobs that can run)."""
    users, user_of = users_of(jobs)
    runnable = (steps_per_s > 0).any(axis=1) if steps_per_s.size else np.zeros(len(jobs), dtype=bool)
    demand = np.bincount(user_of, weights=np.where(runnable, jobs.num_gpus, 0.0), minlength=len(users))
    share = water_fill(demand, user_weight_array(users, weights), float(np.sum(capacity)))
    total = share.sum()
    fraction = share / total if total > 0 else np.zeros(len(users))
    return users, user_of, fraction


def how_shared(policy) -> str:
    """How :class:`ByUser` shares ``policy``'s cluster among users: "turns" (an ordering policy),
    "split" (an LP policy: a part of the cluster per user) or "unchanged" (the others)."""
    from apportion.policies.registry import ENTRIES, base_name

    if isinstance(policy, OrderingPolicy):
        return "turns"
    entry = ENTRIES.get(base_name(str(getattr(policy, "name", ""))))  # a plugin file's path.py:Name whole
    return "split" if entry is not None and entry.is_lp else "unchanged"


class ByUser:
    """``inner`` with the cluster shared among users first (the module docstring says how)."""

    def __init__(self, inner: Policy, weights: Mapping[str, float] | None = None) -> None:
        self.inner = inner
        self.weights = check_user_weights(weights or {})
        self.name = inner.name
        self.mode = how_shared(inner)
        self.turns = UserTurns(self.weights) if self.mode == "turns" else None
        if self.turns is not None:
            inner.user_turns = self.turns
        self._template = _fresh_copy(inner) if self.mode == "split" else None  # never used itself: copied per user
        self._parts: dict[str, Policy] = {}  # split: one policy per active user, kept warm

    def __getattr__(self, attribute: str):
        if attribute in ("inner", "__deepcopy__", "__getstate__", "__setstate__"):
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)  # agnostic, space_sharing, durations, sizes_jobs, never_runs …

    def _part(self, user: str) -> Policy:
        """The policy that allocates ``user``'s part: its own copy, or the one policy for all when
        ``inner`` could not be copied (it has solved already: one solver then serves every user)."""
        if self._template is None:
            return self.inner
        part = self._parts.get(user)
        if part is None:
            part = self._parts[user] = copy.deepcopy(self._template)
        return part

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        if self.turns is not None:
            self.turns.charge(jobs.now_s)
            allocation = self.inner.allocate(jobs, cluster, throughputs)
            self.turns.hold(jobs, allocation)
            return allocation
        if self.mode != "split":
            return self.inner.allocate(jobs, cluster, throughputs)
        users, user_of, fraction = user_shares(jobs, throughputs.steps_per_s, np.asarray(cluster.capacity),
                                               self.weights)
        if len(users) < 2:
            return self.inner.allocate(jobs, cluster, throughputs)
        for gone in set(self._parts) - set(users.tolist()):
            del self._parts[gone]
        share = np.zeros(throughputs.steps_per_s.shape)
        pair_jobs, pair_share = [], []
        for u, user in enumerate(users.tolist()):
            rows = np.flatnonzero(user_of == u)
            if fraction[u] <= 0:
                continue
            part_cluster = ClusterView(cluster.gpu_types, np.asarray(cluster.capacity) * fraction[u],
                                       cluster.price_per_gpu_hour)
            part = self._part(user).allocate(jobs.subset(rows), part_cluster,
                                             ThroughputView(throughputs.steps_per_s[rows], throughputs.pair_steps_per_s))
            share[rows] = part.share
            if len(part.pair_jobs):
                pair_jobs.append(rows[part.pair_jobs])
                pair_share.append(part.pair_share)
        if pair_jobs:
            return Allocation(jobs.index, share, np.concatenate(pair_jobs), np.concatenate(pair_share))
        return Allocation(jobs.index, share)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        if self.mode != "split":
            return self.inner.next_change_s(jobs, running)
        users, user_of = users_of(jobs)
        if len(users) < 2:
            return self.inner.next_change_s(jobs, running)
        return min((self._part(user).next_change_s(jobs.subset(user_of == u), running[user_of == u])
                    for u, user in enumerate(users.tolist())), default=float("inf"))


def _fresh_copy(policy: Policy) -> Policy | None:
    """A copy of ``policy`` made before it has solved anything; None once it holds a solver."""
    try:
        return copy.deepcopy(policy)
    except (TypeError, copy.Error):
        return None


def share_by_user(policy: Policy, weights: Mapping[str, float] | None = None) -> Policy:
    """``policy`` with the cluster shared among users first, weighted by ``weights`` (user → weight)."""
    return ByUser(policy, weights)
