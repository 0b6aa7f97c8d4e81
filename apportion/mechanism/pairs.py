"""The round mechanism when an allocation pairs jobs on shared GPUs (space sharing).

Every (job, type) with a share and every (pair, type) with a pair share is a candidate
unit; its priority is allocated share / received share, as for single jobs (Gavel). Units
are taken in priority order while their GPU type has room and neither of their jobs is
already running this round, so a job runs either alone or in one pair.
"""

from __future__ import annotations

import numpy as np

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
