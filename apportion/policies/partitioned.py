"""POP (SOSP'21): split a large allocation problem into k random sub-problems and solve each.

Each job belongs to one partition for its whole life (a seeded hash of its row, so a
partition's solver can start warm from the last round); each partition gets 1/k of every
GPU type's capacity (fractional: an LP allocates time, not whole GPUs). The union of the
partitions' allocations is feasible for the whole cluster.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import Policy

_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing constant: spreads consecutive rows evenly


class Partitioned:
    def __init__(self, make_part: Callable[[], Policy], partitions: int, *, seed: int = 0) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.parts = [make_part() for _ in range(partitions)]
        self.seed = seed
        self.name = f"{self.parts[0].name}"

    @property
    def agnostic(self) -> bool:
        return bool(getattr(self.parts[0], "agnostic", False))

    @property
    def space_sharing(self) -> bool:
        return bool(getattr(self.parts[0], "space_sharing", False))

    @property
    def durations(self) -> str:
        return getattr(self.parts[0], "durations", "oracle")

    def partition_of(self, index: np.ndarray) -> np.ndarray:
        mixed = (index.astype(np.uint64) + np.uint64(self.seed)) * _MIX
        return ((mixed >> np.uint64(33)) % np.uint64(len(self.parts))).astype(np.int64)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        part = self.partition_of(jobs.index)
        return min(
            (p.next_change_s(jobs.subset(part == k), running[part == k]) for k, p in enumerate(self.parts)),
            default=float("inf"),
        )

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        part = self.partition_of(jobs.index)
        share = np.zeros(throughputs.steps_per_s.shape)
        pair_jobs, pair_share = [], []
        sub_cluster = ClusterView(cluster.gpu_types, cluster.capacity / len(self.parts), cluster.price_per_gpu_hour)
        for k, policy in enumerate(self.parts):
            rows = np.flatnonzero(part == k)
            if len(rows):
                sub_throughputs = ThroughputView(throughputs.steps_per_s[rows], throughputs.pair_steps_per_s)
                sub = policy.allocate(jobs.subset(rows), sub_cluster, sub_throughputs)
                share[rows] = sub.share
                pair_jobs.append(rows[sub.pair_jobs])
                pair_share.append(sub.pair_share)
        if any(len(p) for p in pair_jobs):
            return Allocation(jobs.index, share, np.concatenate(pair_jobs), np.concatenate(pair_share))
        return Allocation(jobs.index, share)
