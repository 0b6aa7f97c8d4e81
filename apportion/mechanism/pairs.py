"""The round mechanism when an allocation pairs jobs on shared GPUs (space sharing).

Every (job, type) with a share and every (pair, type) with a pair share is a candidate
unit; its priority is allocated share / received share, as for single jobs (Gavel). Units
are taken in priority order while their GPU type has room and neither of their jobs is
already running this round, so a job runs either alone or in one pair.
"""

from __future__ import annotations

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.node_resources import NodeDemand
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.rounds import MIN_SHARE, NEVER_RECEIVED


def choose_with_pairs(
    share: np.ndarray,  # [n, T] time alone
    received_fraction: np.ndarray,  # [n, T] fraction of each job's time spent alone on each type
    pair_jobs: np.ndarray,  # [P, 2] positions of each pair's jobs
    pair_share: np.ndarray,  # [P, T] time together
    pair_received: np.ndarray,  # [P, T] fraction of the pair's time spent together on each type
    num_gpus: np.ndarray,  # [n]
    capacity: np.ndarray,  # [T]
) -> tuple[np.ndarray, np.ndarray]:
    """(type each job runs on this round or -1, type each pair runs on together or -1)."""
    n, num_types = share.shape
    single_job, single_type = np.nonzero(share >= MIN_SHARE)
    pair_row, pair_type = np.nonzero(pair_share >= MIN_SHARE)
    priority = np.concatenate([
        share[single_job, single_type] / np.maximum(received_fraction[single_job, single_type], NEVER_RECEIVED),
        pair_share[pair_row, pair_type] / np.maximum(pair_received[pair_row, pair_type], NEVER_RECEIVED),
    ])
    first = np.concatenate([single_job, pair_jobs[pair_row, 0]])
    second = np.concatenate([np.full(len(single_job), -1), pair_jobs[pair_row, 1]])
    unit_type = np.concatenate([single_type, pair_type])
    unit_pair = np.concatenate([np.full(len(single_job), -1), pair_row])
    gpus = num_gpus[first]
    order = np.argsort(-priority, kind="stable")

    chosen = np.full(n, -1, dtype=np.int64)
    pair_chosen = np.full(len(pair_jobs), -1, dtype=np.int64)
    remaining = capacity.astype(np.int64).copy()
    busy = np.zeros(n, dtype=bool)
    for u in order.tolist():
        t = unit_type[u]
        if remaining[t] < gpus[u]:
            continue
        a, b = first[u], second[u]
        if busy[a] or (b >= 0 and busy[b]):
            continue
        busy[a] = True
        chosen[a] = t
        if b >= 0:
            busy[b] = True
            chosen[b] = t
            pair_chosen[unit_pair[u]] = t
        remaining[t] -= gpus[u]
        if not remaining.any():
            break
    return chosen, pair_chosen


def place_units(
    cluster: Cluster,
    previous_owner: np.ndarray,
    previous_partner: np.ndarray,
    chosen: np.ndarray,
    partner: np.ndarray,
    num_gpus: np.ndarray,
    demand: NodeDemand | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Placement when some jobs share GPUs: each pair is placed as one unit on its GPUs (with
    ``demand``, where its node has room for both jobs' cores and memory, else neither runs).

    Returns the first and second job on each GPU (-1 where idle or not shared) and, per job,
    whether it kept exactly its GPUs (a unit that is the same pair, or the same job alone,
    on the same type).
    """
    n = len(chosen)
    index = np.arange(n)
    lead = (chosen >= 0) & ((partner < 0) | (index < partner))
    unit_first = np.flatnonzero(lead)
    unit_second = partner[unit_first]
    unit_key = unit_first * (n + 1) + unit_second + 1
    order = np.argsort(unit_key)
    held = previous_owner >= 0
    low = np.where(previous_partner >= 0, np.minimum(previous_owner, previous_partner), previous_owner)
    high = np.where(previous_partner >= 0, np.maximum(previous_owner, previous_partner), -1)
    gpu_key = low * (n + 1) + high + 1
    position = np.minimum(np.searchsorted(unit_key[order], gpu_key), max(len(unit_key) - 1, 0))
    previous_unit = np.full(len(previous_owner), -1, dtype=np.int64)
    if len(unit_key):
        match = held & (unit_key[order][position] == gpu_key)
        previous_unit[match] = order[position[match]]
    unit_demand = None if demand is None else demand.of_units(unit_first, unit_second)
    unit_owner, unit_kept = place_on_gpus(cluster, previous_unit, chosen[unit_first], num_gpus[unit_first],
                                          unit_demand)
    busy = unit_owner >= 0
    first = np.full(len(unit_owner), -1, dtype=np.int64)
    second = np.full(len(unit_owner), -1, dtype=np.int64)
    first[busy] = unit_first[unit_owner[busy]]
    second[busy] = unit_second[unit_owner[busy]]
    kept = np.zeros(n, dtype=bool)
    kept[unit_first] = unit_kept
    paired = unit_second >= 0
    kept[unit_second[paired]] = unit_kept[paired]
    return first, second, kept
