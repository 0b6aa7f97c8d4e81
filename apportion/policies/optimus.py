"""Optimus (EuroSys'18) with an oracle: GPUs go one at a time to the job they help most.

Each job keeps a fixed batch size: its user's, which apportion's elastic workloads tune as
Pollux's "TunedJobs" are (the batch that finishes soonest at the user's GPU count). Its
remaining time on k GPUs of a type is its remaining work (known exactly: the oracle) over its
goodput there at that batch. Every job, shortest remaining time first, gets its fewest GPUs
on its type (the one it runs on, else its fastest with room); then, one GPU at a time, the
job whose remaining time falls most per added GPU (by growing to any larger count on its
type) grows, until no GPU helps or none is left. A running job's remaining time in any
configuration but its current one includes the restart cost, so that it is not resized for
less than that saves. A job never gets more GPUs than its batch has micro-batches.

On fixed-size jobs it runs the shortest remaining time first at each job's own size.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, allocate_in_order
from apportion.policies.goodput import GoodputTables


class Optimus:
    name = "optimus"
    sizes_jobs = True  # chooses elastic jobs' GPU counts (Allocation.num_gpus)

    def __init__(self, *, agnostic: bool = False, restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        if not restart_cost_s >= 0:
            raise ValueError(f"optimus: restart_cost_s must be >= 0, got {restart_cost_s}")
        self.agnostic = agnostic
        self.restart_cost_s = float(restart_cost_s)
        self._tables = GoodputTables(fixed_batch=True)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return 0.0 if jobs.elastic is not None else math.inf

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        n, num_types = len(jobs), len(cluster.gpu_types)
        if n == 0:
            return Allocation(jobs.index, np.zeros((0, num_types)))
        if jobs.elastic is None:
            rate = throughputs.steps_per_s.max(axis=1)
            left = np.divide(jobs.remaining_steps, rate, out=np.full(n, np.inf), where=rate > 0)
            share = allocate_in_order(np.lexsort((jobs.submit_time_s, left)), jobs.num_gpus, throughputs.steps_per_s,
                                      cluster.capacity, agnostic=self.agnostic, current_type=jobs.running_type,
                                      remaining_steps=jobs.remaining_steps, restart_cost_s=self.restart_cost_s)
            return Allocation(jobs.index, share)
        return self._elastic(jobs, cluster)

    def _elastic(self, jobs: JobView, cluster: ClusterView) -> Allocation:
        elastic = jobs.elastic
        n, num_types = len(jobs), len(cluster.gpu_types)
        kinds = elastic.kinds
        most = int(cluster.capacity.max())
        counts = np.arange(1, most + 1)
        rate, _ = self._tables.get(jobs, kinds, counts, elastic.gpus_per_node)  # [n, T, K] at each user's batch
        usable = (counts[None, None, :] >= elastic.min_gpus[:, None, None]) & \
                 (counts[None, None, :] <= elastic.max_gpus[:, None, None]) & (rate > 0)
        left = np.maximum(jobs.remaining_steps, 0.0)[:, None, None]
        remaining_s = np.where(usable, left / np.where(rate > 0, rate, 1.0), np.inf)  # [n, T, K]
        # a running job pays the restart cost for any configuration but the one it has
        running = np.flatnonzero(jobs.running_type >= 0)
        change = np.zeros(remaining_s.shape, dtype=bool)
        change[running] = True
        now_k = np.clip(elastic.gpus_now[running] - 1, 0, most - 1)
        change[running, jobs.running_type[running], now_k] = False
        remaining_s = remaining_s + np.where(change, self.restart_cost_s, 0.0)

        fewest = np.where(usable.any(axis=2), np.argmax(usable, axis=2), -1)  # [n, T] index of min count
        first_s = np.where(fewest >= 0, np.take_along_axis(remaining_s, np.maximum(fewest, 0)[:, :, None],
                                                            axis=2)[:, :, 0], np.inf)  # [n, T]
        if self.agnostic:
            preference = np.argsort(-np.broadcast_to(cluster.capacity, (n, num_types)), axis=1, kind="stable")
        else:
            preference = np.argsort(first_s, axis=1, kind="stable")
        holds = jobs.running_type >= 0
        free = cluster.capacity.astype(np.int64).copy()
        job_type = np.full(n, -1, dtype=np.int64)
        given = np.zeros(n, dtype=np.int64)  # index into counts (k = given + 1), -1 none
        given[:] = -1
        for j in np.lexsort((jobs.submit_time_s, first_s.min(axis=1))).tolist():
            options = [int(jobs.running_type[j])] if holds[j] else []
            options += [t for t in preference[j].tolist() if t not in options]
            for t in options:
                k = fewest[j, t]
                if k >= 0 and counts[k] <= free[t]:
                    job_type[j], given[j] = t, k
                    free[t] -= counts[k]
                    break
        # the growth phase, greedily: a heap of each job's best move, checked against what is free when popped
        def best_move(j: int):
            t, k = job_type[j], given[j]
            steps = remaining_s[j, t]
            added = counts - counts[k]
            ok = (added > 0) & (added <= free[t]) & np.isfinite(steps)
            if not ok.any():
                return None
            gain = np.where(ok, (steps[k] - steps) / np.maximum(added, 1), -np.inf)  # seconds saved per GPU
            to = int(np.argmax(gain))
            return (-float(gain[to]), j, to, int(added[to])) if gain[to] > 0 else None

        heap = [move for move in map(best_move, np.flatnonzero(job_type >= 0).tolist()) if move is not None]
        heapq.heapify(heap)
        while heap and np.any(free > 0):
            _, j, to, added = heapq.heappop(heap)
            if added > free[job_type[j]]:  # no longer fits: the job's best move that still does
                again = best_move(j)
                if again is not None:
                    heapq.heappush(heap, again)
                continue
            free[job_type[j]] -= added
            given[j] = to
            again = best_move(j)
            if again is not None:
                heapq.heappush(heap, again)
        share = np.zeros((n, num_types))
        rows = np.flatnonzero(job_type >= 0)
        share[rows, job_type[rows]] = 1.0
        num_gpus = jobs.num_gpus.copy()
        num_gpus[rows] = counts[given[rows]]
        return Allocation(jobs.index, share, num_gpus=num_gpus, batch_size=elastic.batch_size.astype(np.float64))
