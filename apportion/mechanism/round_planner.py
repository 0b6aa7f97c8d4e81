"""The round, once: the simulator and the server both ask this who runs where next.

A round's state goes in (the active jobs with their service so far, their speeds, the
seconds each has held each type alone and each pair has run together, who holds each GPU
now); a decision comes out (the type each job runs on, alone or with which partner, on which
GPUs, who kept their GPUs, whether the policy re-solved). The two clocks differ only in how
they build the state and what they do with the decision: the simulator advances progress by
throughput, the server starts and stops processes.

The policy is re-solved when the set of jobs, the cluster, or the speeds change, and when
the policy said its answer could change by itself (``Policy.next_change_s``); otherwise the
last allocation stands and only the mechanism runs.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster
from apportion.core.node_resources import node_demand
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.mechanism.node_per_type import NodePerType
from apportion.mechanism.pairs import choose_with_pairs, place_units
from apportion.mechanism.pinned import plan_around
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.received import DEFAULT_RECEIVED_SINCE, ReceivedShare
from apportion.mechanism.round_state import RoundDecision, RoundState, running_types, was_running
from apportion.mechanism.rounds import RoundMechanism

__all__ = ["RoundDecision", "RoundPlanner", "RoundState", "running_types"]


def _placed_only(chosen: np.ndarray, partner: np.ndarray, owner: np.ndarray,
                 second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chosen types and partners of the jobs placement put on GPUs; -1 for the others."""
    placed = np.zeros(len(chosen), dtype=bool)
    placed[owner[owner >= 0]] = True
    placed[second[second >= 0]] = True
    return np.where(placed, chosen, -1), np.where(placed, partner, -1)


class RoundPlanner:
    """Policy → allocation → mechanism → placement, for one round at a time.

    Holds the policy's last allocation and decides when to ask again; everything else a round
    needs comes with its :class:`RoundState`. ``cluster`` is the default for every round.
    ``pair_rates`` ([K, K, T] steps/s of kind i sharing a GPU with kind j) is the default for a
    state that brings none, and is used only by a policy that shares GPUs; with it, allocations
    may pair jobs and the state's ``together`` (a ``PairClock``) decides whose turn it is.
    ``received_since``: the received share counts, as Gavel's does, from the last time the policy
    re-solved (``"allocation"``, the default), or from each job's ``"arrival"`` (``mechanism/received.py``).
    """

    def __init__(self, policy, cluster: Cluster | None = None, *, pair_rates: np.ndarray | None = None,
                 received_since: str = DEFAULT_RECEIVED_SINCE) -> None:
        self.policy = policy
        self.cluster = cluster
        self.pair_rates = pair_rates
        self.mechanism = RoundMechanism()
        self.received = ReceivedShare(received_since)
        self._views: dict[int, tuple[Cluster, ClusterView]] = {}
        self._node_per_type: NodePerType | None = None
        self._allocation: Allocation | None = None
        self._solved_for: tuple | None = None  # the job set and speeds the allocation was solved for
        self._solved_on: Cluster | None = None  # and the cluster (held and compared by identity)
        self._reallocate_at = math.inf

    @staticmethod
    def space_sharing(policy) -> bool:
        return bool(getattr(policy, "space_sharing", False))

    def cluster_view(self, cluster: Cluster | None = None) -> ClusterView:
        cluster = cluster or self.cluster
        cached = self._views.get(id(cluster))
        if cached is None or cached[0] is not cluster:
            if len(self._views) > 256:
                self._views.clear()
            cached = (cluster, ClusterView(cluster.gpu_types, cluster.capacity, cluster.price_per_gpu_hour))
            self._views[id(cluster)] = cached
        return cached[1]

    def never_runs(self, jobs: JobView, rates: np.ndarray, cluster: Cluster | None = None) -> np.ndarray:
        """[n] jobs the policy says it can never run whatever else happens (e.g. larger than a
        non-borrowing queue's quota); all False for policies that do not say."""
        never_runs = getattr(self.policy, "never_runs", None)
        if never_runs is None or len(jobs) == 0:
            return np.zeros(len(jobs), dtype=bool)
        return np.asarray(never_runs(jobs, self.cluster_view(cluster), ThroughputView(rates)), dtype=bool)

    def invalidate(self) -> None:
        """Ask the policy again next round, whatever changed."""
        self._allocation = None

    def plan(self, state: RoundState, cluster: Cluster | None = None) -> RoundDecision:
        """Decide one round over ``cluster`` (default: the planner's), from ``state``; with
        ``state.pinned`` or ``state.offline`` given, around them over one node per type
        (``mechanism/pinned.py``)."""
        cluster = cluster or self.cluster
        if state.around:
            return plan_around(self._plan, state, cluster, self._clusters_like(cluster))
        return self._plan(state, cluster)

    def _clusters_like(self, cluster: Cluster) -> NodePerType:
        """The one-node-per-type clusters of ``cluster``'s types (kept while its types and prices are)."""
        if self._node_per_type is None or not self._node_per_type.matches(cluster):
            self._node_per_type = NodePerType.like(cluster)
        return self._node_per_type

    def _plan(self, state: RoundState, cluster: Cluster) -> RoundDecision:
        """One round over ``cluster`` for every job of ``state``."""
        jobs = state.jobs
        n = len(jobs)
        pair_rates = state.pair_rates if state.pair_rates is not None else self.pair_rates
        if not self.space_sharing(self.policy):
            pair_rates = None

        solved_for = (jobs.index.tobytes(), state.rates_version)
        resolved = (self._allocation is None or solved_for != self._solved_for or cluster is not self._solved_on
                    or jobs.now_s >= self._reallocate_at)
        if resolved:
            self._allocation = self.policy.allocate(
                jobs, self.cluster_view(cluster), ThroughputView(state.rates, pair_rates))
            self._solved_for = solved_for
            self._solved_on = cluster
        allocation = self._allocation
        # an elastic policy names each job's GPU count; otherwise every job runs at its own
        num_gpus = jobs.num_gpus if allocation.num_gpus is None else allocation.num_gpus

        pairs = allocation.pair_jobs if allocation.has_pairs else None
        together_s = None
        if pairs is not None:
            together_s = (state.together.seconds(jobs.index[pairs]) if state.together is not None
                          else np.zeros((len(pairs), len(cluster.gpu_types))))
        if resolved:
            self.received.reset(jobs.now_s, state.time_alone_s, together_s)
        received = self.received.jobs(jobs.now_s, jobs.submit_time_s, state.time_alone_s)
        partner = np.full(n, -1, dtype=np.int64)
        if pairs is not None:
            in_system = self.received.in_system(jobs.now_s, jobs.submit_time_s)
            pair_received = self.received.pairs(in_system, pairs, together_s)
            chosen, pair_chosen = choose_with_pairs(
                allocation.share, received, pairs, allocation.pair_share, pair_received,
                num_gpus, cluster.capacity,
            )
            together = pairs[pair_chosen >= 0]
            partner[together[:, 0]] = together[:, 1]
            partner[together[:, 1]] = together[:, 0]
        else:
            chosen = self.mechanism.choose(allocation.share, received, num_gpus, cluster.capacity)

        demand = node_demand(cluster, jobs.num_gpus, jobs.cpus, jobs.memory_gib)  # None: GPUs alone count
        if (state.partner >= 0).any() or (partner >= 0).any():
            owner, second, kept = place_units(cluster, state.holder, state.partner, chosen, partner, num_gpus, demand)
        else:
            owner, kept = place_on_gpus(cluster, state.holder, chosen, num_gpus, demand)
            second = np.full(len(owner), -1, dtype=np.int64)
        unplaced = None
        if demand is not None:  # chosen by GPUs, but no node had room for its cores or memory: it waits
            by_gpus = chosen
            chosen, partner = _placed_only(chosen, partner, owner, second)
            unplaced = (by_gpus >= 0) & (chosen < 0)
        if resolved:  # the policy's word when it answered; rounds that only re-run the mechanism leave it
            self._reallocate_at = jobs.now_s + self.policy.next_change_s(jobs, chosen >= 0)
        return RoundDecision(
            chosen_type=chosen, partner=partner, owner=owner, second=second, kept=kept,
            was_running=was_running(state.holder, state.partner, n), allocation=allocation, resolved=resolved,
            reallocate_at=self._reallocate_at, num_gpus=allocation.num_gpus, unplaced=unplaced,
        )
