"""Gavel's round mechanism: which jobs run this round, on which GPU type.

Each (job, type) gets priority = allocated share / received share, where the received
share is the fraction of its time in the system the job has held that type. Jobs that got
less than the allocation asked for rise; over rounds, time-shares converge to X.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.packing import greedy_fill
from apportion.core.rows import first_true

NEVER_RECEIVED = 1e-9  # a share never received counts as this tiny fraction
MIN_SHARE = 1e-6  # smaller shares are LP rounding noise, not time a job should get


@dataclass
class RoundMechanism:
    round_s: float = 360.0

    def choose(
        self,
        share: np.ndarray,  # [n, T] allocation X for the active jobs
        received_fraction: np.ndarray,  # [n, T] fraction of each job's time spent on each type
        num_gpus: np.ndarray,  # [n]
        capacity: np.ndarray,  # [T]
    ) -> np.ndarray:
        """GPU type index each job runs on this round, -1 for jobs that wait."""
        n, num_types = share.shape
        whole = share > 1 - MIN_SHARE
        if np.all(whole | (share < MIN_SHARE)):  # integral X: run exactly the jobs it names, if they fit
            chosen = first_true(whole, none=-1)
            used = np.bincount(chosen[chosen >= 0], weights=num_gpus[chosen >= 0], minlength=num_types)
            if np.all(used <= capacity):
                return chosen
        eligible = share >= MIN_SHARE
        priority = np.where(
            eligible, share / np.maximum(received_fraction, NEVER_RECEIVED), -np.inf
        )
        preference = np.argsort(-priority, axis=1, kind="stable")  # [n, T] best type first
        chosen = np.full(n, -1, dtype=np.int64)
        remaining = capacity.astype(np.int64).copy()
        for rank in range(num_types):
            want = preference[:, rank]
            ok = np.flatnonzero((chosen < 0) & np.take_along_axis(eligible, preference[:, rank : rank + 1], axis=1)[:, 0])
            if not len(ok):  # no job left whose rank-th choice it is eligible for
                continue
            # candidates of every type at once, by type, then priority (highest first), then job index
            ok_type = want[ok]
            by_type = ok[np.lexsort((-priority[ok, ok_type], ok_type))]
            bounds = np.searchsorted(want[by_type], np.arange(num_types + 1)).tolist()
            for gpu_type in range(num_types):
                if remaining[gpu_type] <= 0 or bounds[gpu_type] == bounds[gpu_type + 1]:
                    continue
                order = by_type[bounds[gpu_type] : bounds[gpu_type + 1]]
                take = greedy_fill(num_gpus[order], remaining[gpu_type])
                taken = order[take]
                chosen[taken] = gpu_type
                remaining[gpu_type] -= int(num_gpus[taken].sum())
            if not np.any(remaining > 0):
                break  # the cluster is full: later ranks take nothing
        return chosen
