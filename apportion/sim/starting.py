"""A round as the server plans it: attempts still starting keep their GPUs and stay out of it.

On the server an attempt that has not made its first lease call yet (it is importing, building
its model, restoring its checkpoint) keeps its slots and is left out of the round; the round is
planned over the other jobs and the slots left, as one node per slot type. The simulator on
the wall clock does the same (``plan_around``) and puts the decision back together over every
job and GPU.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster, NodeGroup
from apportion.mechanism.round_planner import RoundDecision, RoundPlanner, RoundState


class ServerClusters:
    """One node per GPU type holding the GPUs of a round, as the server builds it; one object per
    set of counts, so that the planner re-solves only when the counts change."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._by_counts: dict[tuple[int, ...], Cluster] = {}

    def of(self, gpus: np.ndarray) -> tuple[Cluster, np.ndarray]:
        """The cluster of GPUs ``gpus`` (ids in the full cluster), and its GPU ids in the full one."""
        types = self.cluster.gpu_type[gpus]
        order = gpus[np.argsort(types, kind="stable")]
        counts = tuple(np.bincount(types, minlength=len(self.cluster.gpu_types)).tolist())
        if counts not in self._by_counts:
            prices = self.cluster.price_per_gpu_hour
            self._by_counts[counts] = Cluster(tuple(NodeGroup(t, n, max(1, n), float(prices[k]))
                                                    for k, (t, n) in enumerate(zip(self.cluster.gpu_types, counts))))
        return self._by_counts[counts], order


def plan_around(planner: RoundPlanner, state: RoundState, clusters: ServerClusters, starting: np.ndarray) -> RoundDecision:
    """Plan ``state``'s round with the jobs at ``starting`` (positions; with whoever shares their GPUs)
    kept where they are, over the other jobs and GPUs."""
    holder, partner = state.holder, state.partner
    n = len(state.jobs)
    pinned = np.zeros(n, dtype=bool)
    pinned[starting] = True
    on_gpu = ((holder >= 0) & pinned[np.maximum(holder, 0)]) | ((partner >= 0) & pinned[np.maximum(partner, 0)])
    pinned[holder[on_gpu & (holder >= 0)]] = True  # whoever shares a starting job's GPU stays with it
    pinned[partner[on_gpu & (partner >= 0)]] = True
    keep = np.flatnonzero(~pinned)
    cluster, gpus = clusters.of(np.flatnonzero(~on_gpu))
    position = np.full(n + 1, -1, dtype=np.int64)  # full position -> position among the kept; [-1] stays -1
    position[keep] = np.arange(len(keep))
    sub_state = RoundState(state.jobs.subset(keep), state.rates[keep], state.time_alone_s[keep],
                           position[holder[gpus]], position[partner[gpus]], state.rates_version)
    sub = planner.plan(sub_state, cluster) if len(keep) and len(gpus) else _nobody_runs(sub_state)

    back = np.append(keep, -1)  # position among the kept -> full position; [-1] stays -1

    def full(positions: np.ndarray) -> np.ndarray:
        return back[positions]

    chosen = np.full(n, -1, dtype=np.int64)
    chosen[keep] = sub.chosen_type
    chosen[pinned] = state.jobs.running_type[pinned]
    mate = np.full(n, -1, dtype=np.int64)
    mate[keep] = full(sub.partner)
    together = on_gpu & (partner >= 0)
    mate[holder[together]], mate[partner[together]] = partner[together], holder[together]
    owner, second = np.where(on_gpu, holder, -1), np.where(on_gpu, partner, -1)
    owner[gpus], second[gpus] = full(sub.owner), full(sub.second)
    kept = pinned.copy()
    kept[keep] = sub.kept
    was_running = np.zeros(n, dtype=bool)
    was_running[holder[holder >= 0]] = True
    was_running[partner[partner >= 0]] = True
    share = np.zeros((n, len(clusters.cluster.gpu_types)))
    share[keep] = sub.allocation.share
    share[pinned, chosen[pinned]] = 1.0
    pairs = keep[sub.allocation.pair_jobs] if sub.allocation.has_pairs else None
    allocation = Allocation(state.jobs.index, share, pairs, sub.allocation.pair_share if pairs is not None else None)
    # a starting job joins the next round, which may then change (a las threshold it crossed while
    # starting): no jumping over rounds while one is
    reallocate_at = sub.reallocate_at if not len(starting) else -math.inf
    return RoundDecision(chosen_type=chosen, partner=mate, owner=owner, second=second, kept=kept,
                         was_running=was_running, allocation=allocation, resolved=sub.resolved,
                         reallocate_at=reallocate_at)


def _nobody_runs(state: RoundState) -> RoundDecision:
    """No job or no GPU is left to plan: the others wait."""
    n, num_gpus = len(state.jobs), len(state.holder)
    none = np.full(n, -1, dtype=np.int64)
    return RoundDecision(chosen_type=none, partner=none.copy(), owner=np.full(num_gpus, -1, dtype=np.int64),
                         second=np.full(num_gpus, -1, dtype=np.int64), kept=np.zeros(n, dtype=bool),
                         was_running=np.zeros(n, dtype=bool),
                         allocation=Allocation(state.jobs.index, np.zeros((n, state.rates.shape[1]))),
                         resolved=False, reallocate_at=float("inf"))
