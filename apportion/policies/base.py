"""The Policy seam, and the one helper the ordering policies (fifo, srtf, las) share."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.core.packing import greedy_fill


class Policy(Protocol):
    name: str

    def allocate(
        self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView
    ) -> Allocation: ...

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        """Seconds until the allocation could change with no job arriving or leaving (inf: never)."""
        ...

    # Optional: never_runs(jobs, cluster, throughputs) -> [n] bool, the jobs this policy can never
    # run whatever else happens; the simulator reports them unschedulable on arrival.


class OrderingPolicy:
    """A policy that ranks jobs and gives whole GPUs in rank order until the cluster is full.

    Each job takes its fastest type with room (``agnostic``: the cluster's first type with
    room, as if all types were equal). A running job prefers the type it holds; only a job
    ranked above it can take that room, and then it moves to another type with room rather
    than wait.
    """

    name = "ordering"

    def __init__(self, *, agnostic: bool = False) -> None:
        self.agnostic = agnostic

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        """Smaller runs first."""
        raise NotImplementedError

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(
        self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView
    ) -> Allocation:
        order = np.lexsort((jobs.submit_time_s, self.rank_key(jobs, throughputs)))
        share = allocate_in_order(
            order,
            jobs.num_gpus,
            throughputs.steps_per_s,
            cluster.capacity,
            agnostic=self.agnostic,
            current_type=jobs.running_type,
        )
        return Allocation(jobs.index, share)


def allocate_in_order(
    order: np.ndarray,
    num_gpus: np.ndarray,
    steps_per_s: np.ndarray,
    capacity: np.ndarray,
    *,
    agnostic: bool = False,
    current_type: np.ndarray | None = None,
) -> np.ndarray:
    """X with whole GPUs (0/1 shares): walking ``order``, each job takes its best type with room.

    A job's best type is its fastest (``agnostic``: the cluster's first); with
    ``current_type`` given, a running job's best type is the one it holds.

    Exactly the sequential loop's answer. Each pass lets every remaining job pick its best
    type that still has room and fills each type in order; everything before the first job
    that lost its pick to an earlier one is final, and the next pass resumes there.
    """
    n, num_types = steps_per_s.shape
    runnable = steps_per_s > 0
    if agnostic:
        score = np.where(runnable, float(num_types) - np.arange(num_types)[None, :], -np.inf)
    else:
        score = np.where(runnable, steps_per_s, -np.inf)
    if current_type is not None:
        holding = np.flatnonzero(current_type >= 0)
        score[holding, current_type[holding]] = np.inf
    share = np.zeros((n, num_types))
    remaining = capacity.astype(np.int64).copy()
    demand = np.cumsum(num_gpus[order])  # a pass looks only as far as the free GPUs could reach
    position = 0
    while position < len(order) and remaining.max() > 0:
        before = demand[position - 1] if position else 0
        reach = int(np.searchsorted(demand, before + remaining.sum(), side="right")) + 1
        rest = order[position:reach]
        sizes = num_gpus[rest]
        room = remaining[None, :] >= sizes[:, None]
        pick_score = np.where(room, score[rest], -np.inf)
        pick = np.argmax(pick_score, axis=1)
        can = pick_score[np.arange(len(rest)), pick] > -np.inf
        first_miss = len(rest)
        takes = []
        for gpu_type in range(num_types):
            candidates = np.flatnonzero(can & (pick == gpu_type))
            if not len(candidates):
                continue
            take = greedy_fill(sizes[candidates], remaining[gpu_type])
            missed = candidates[~take]
            if len(missed):
                first_miss = min(first_miss, int(missed[0]))
            takes.append((gpu_type, candidates[take]))
        for gpu_type, taken in takes:
            taken = taken[taken < first_miss]
            share[rest[taken], gpu_type] = 1.0
            remaining[gpu_type] -= int(sizes[taken].sum())
        position += first_miss
    return share
