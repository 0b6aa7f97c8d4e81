"""A round planned around what it may not touch: pinned jobs and offline GPUs.

A pinned job (its attempt still starting: importing, building its model, restoring its
checkpoint) keeps its GPUs, and so does whoever shares them; an offline GPU (its node went
away) is given to nobody. The other jobs are planned over the GPUs left, as one node per GPU
type, and the decision is put back together over every job and GPU. This is the seam for a
cluster whose nodes come and go: a node lost or back is GPUs offline or online next round.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster
from apportion.mechanism.node_per_type import NodePerType
from apportion.mechanism.round_state import RoundDecision, RoundState, was_running


def plan_around(plan: Callable[[RoundState, Cluster], RoundDecision], state: RoundState, cluster: Cluster,
                clusters: NodePerType) -> RoundDecision:
    """``plan`` the round of ``state`` over the jobs not pinned and the GPUs not held by pinned ones
    nor offline, as one node per type of ``cluster``'s; the decision over every job and GPU."""
    holder, partner = state.holder, state.partner
    n = len(state.jobs)
    pinned = np.zeros(n, dtype=bool) if state.pinned is None else np.asarray(state.pinned, dtype=bool).copy()
    starting = bool(pinned.any())
    on_gpu = ((holder >= 0) & pinned[np.maximum(holder, 0)]) | ((partner >= 0) & pinned[np.maximum(partner, 0)])
    pinned[holder[on_gpu & (holder >= 0)]] = True  # whoever shares a pinned job's GPU stays with it
    pinned[partner[on_gpu & (partner >= 0)]] = True
    usable = ~on_gpu if state.offline is None else ~on_gpu & ~np.asarray(state.offline, dtype=bool)
    keep = np.flatnonzero(~pinned)
    held = _held_by(state, pinned, len(cluster.gpu_types)) if clusters.counts_resources else None
    sub_cluster, gpus = clusters.of(cluster.gpu_type, np.flatnonzero(usable), held)
    position = np.full(n + 1, -1, dtype=np.int64)  # full position -> position among the kept; [-1] stays -1
    position[keep] = np.arange(len(keep))
    sub_state = RoundState(state.jobs.subset(keep), state.rates[keep], state.time_alone_s[keep],
                           position[holder[gpus]], position[partner[gpus]], state.rates_version,
                           state.together, state.pair_rates)
    sub = plan(sub_state, sub_cluster) if len(keep) and len(gpus) else _nobody_runs(sub_state)

    back = np.append(keep, -1)  # position among the kept -> full position; [-1] stays -1
    chosen = np.full(n, -1, dtype=np.int64)
    chosen[keep] = sub.chosen_type
    chosen[pinned] = state.jobs.running_type[pinned]
    mate = np.full(n, -1, dtype=np.int64)
    mate[keep] = back[sub.partner]
    together = on_gpu & (partner >= 0)
    mate[holder[together]], mate[partner[together]] = partner[together], holder[together]
    owner, second = np.where(on_gpu, holder, -1), np.where(on_gpu, partner, -1)
    owner[gpus], second[gpus] = back[sub.owner], back[sub.second]
    kept = pinned.copy()
    kept[keep] = sub.kept
    allocation, num_gpus = sub.allocation, sub.num_gpus
    if starting:
        allocation, num_gpus = _with_pinned(state, sub, keep, pinned, chosen)
    # a starting job joins the next round, which may then change (a las threshold it crossed while
    # starting): no jumping over rounds while one is
    reallocate_at = sub.reallocate_at if not starting else -math.inf
    unplaced = None
    if sub.unplaced is not None:
        unplaced = np.zeros(n, dtype=bool)
        unplaced[keep] = sub.unplaced
    return RoundDecision(chosen_type=chosen, partner=mate, owner=owner, second=second, kept=kept,
                         was_running=was_running(holder, partner, n), allocation=allocation,
                         resolved=sub.resolved, reallocate_at=reallocate_at, num_gpus=num_gpus, unplaced=unplaced)


def _held_by(state: RoundState, pinned: np.ndarray, num_types: int) -> tuple | None:
    """((cores, GiB) of each type) the pinned jobs asked for, which the jobs planned beside them cannot have;
    None when no job asks for either."""
    jobs = state.jobs
    if jobs.cpus is None and jobs.memory_gib is None:
        return None
    on = jobs.running_type[pinned]
    amounts = []
    for asked in (jobs.cpus, jobs.memory_gib):
        per_type = np.zeros(num_types)
        if asked is not None:
            np.add.at(per_type, on[on >= 0], asked[pinned][on >= 0])
        amounts.append(per_type)
    return tuple(zip(amounts[0].round(9).tolist(), amounts[1].round(9).tolist()))


def _with_pinned(state: RoundState, sub: RoundDecision, keep: np.ndarray, pinned: np.ndarray,
                 chosen: np.ndarray) -> tuple[Allocation, np.ndarray | None]:
    """The allocation over every job: the planned ones', and each pinned job wholly on the type it holds."""
    n = len(state.jobs)
    given = sub.allocation
    share = np.zeros((n, state.rates.shape[1]))
    share[keep] = given.share
    share[pinned, chosen[pinned]] = 1.0
    pairs = keep[given.pair_jobs] if given.has_pairs else None
    num_gpus = batch = None
    if given.num_gpus is not None:
        num_gpus = state.jobs.num_gpus.copy()
        num_gpus[keep] = given.num_gpus
    if given.batch_size is not None:
        batch = np.full(n, np.nan)
        batch[keep] = given.batch_size
    allocation = Allocation(state.jobs.index, share, pairs, given.pair_share if pairs is not None else None,
                            num_gpus=num_gpus, batch_size=batch)
    return allocation, (num_gpus if sub.num_gpus is not None else None)


def _nobody_runs(state: RoundState) -> RoundDecision:
    """No job or no GPU is left to plan: the others wait."""
    n, num_gpus = len(state.jobs), len(state.holder)
    none = np.full(n, -1, dtype=np.int64)
    return RoundDecision(chosen_type=none, partner=none.copy(), owner=np.full(num_gpus, -1, dtype=np.int64),
                         second=np.full(num_gpus, -1, dtype=np.int64), kept=np.zeros(n, dtype=bool),
                         was_running=np.zeros(n, dtype=bool),
                         allocation=Allocation(state.jobs.index, np.zeros((n, state.rates.shape[1]))),
                         resolved=False, reallocate_at=float("inf"))
