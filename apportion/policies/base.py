"""The Policy seam, and the one helper the ordering policies (fifo, srtf, las) share."""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.rows import row_any
from apportion.core.views import ClusterView, JobView, ThroughputView


class Turns(Protocol):
    """Whose turn it is among users (policies/by_user.py's ``UserTurns``): reorders a ranked order."""

    def order(self, order: np.ndarray, jobs: JobView) -> np.ndarray: ...


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
    # Optional: durations = "predicted": the jobs' views must carry their predicted GPU time
    # (JobView.predicted_gpu_s, from the jobs finished so far; see wants_predictions).


def wants_predictions(policy) -> bool:
    """Whether ``policy`` ranks jobs by predicted durations, so its views must carry predictions."""
    return getattr(policy, "durations", "oracle") == "predicted"


def wants_samples(policy) -> bool:
    """Whether ``policy`` ranks jobs by the Gittins index over their groups' samples of finished jobs,
    so its views must carry them (JobView.sample_group, duration_samples)."""
    return wants_predictions(policy) and bool(getattr(policy, "by_sample", False))


DEFAULT_RESTART_COST_S = 10.0  # the simulator's default (SimConfig.restart_cost_s)


class OrderingPolicy:
    """A policy that ranks jobs and gives whole GPUs in rank order until the cluster is full.

    Each job takes its fastest type with room (``agnostic``: the cluster's first type with
    room, as if all types were equal). A running job prefers the type it holds; only a job
    ranked above it can take that room, and then it moves to another type with room rather
    than wait. It also moves, when its turn comes, to a faster type whose GPUs are free (held
    by no job still to come) when the time that saves on its remaining steps is more than
    ``restart_cost_s``, the seconds of progress a move costs (the experiment passes the
    mechanism's; ``inf`` never moves a job by choice), as Gavel's heterogeneity-aware FIFO does.
    """

    name = "ordering"

    def __init__(self, *, agnostic: bool = False, restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        if not restart_cost_s >= 0:
            raise ValueError(f"{self.name}: restart_cost_s must be >= 0, got {restart_cost_s}")
        self.agnostic = agnostic
        self.restart_cost_s = float(restart_cost_s)
        # users take turns before the rank decides (policies/by_user.py's UserTurns); None: off
        self.user_turns: Turns | None = None

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        """Smaller runs first."""
        raise NotImplementedError

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def order(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        """Positions of the jobs, first to run first: by rank, then by submit time (users taking
        turns first, with ``user_turns``)."""
        return self.by_user(np.lexsort((jobs.submit_time_s, self.rank_key(jobs, throughputs))), jobs)

    def by_user(self, order: np.ndarray, jobs: JobView) -> np.ndarray:
        """``order`` as it stands, or with users taking turns (``policies/by_user.py``)."""
        return order if self.user_turns is None else self.user_turns.order(order, jobs)

    def allocate(
        self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView
    ) -> Allocation:
        return self.allocate_ordered(self.order(jobs, throughputs), jobs, cluster, throughputs)

    def allocate_ordered(
        self, order: np.ndarray, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView
    ) -> Allocation:
        """Whole GPUs walking ``order`` (positions in ``jobs``), each job on its best type with room."""
        share = allocate_in_order(
            order,
            jobs.num_gpus,
            throughputs.steps_per_s,
            cluster.capacity,
            agnostic=self.agnostic,
            current_type=jobs.running_type,
            remaining_steps=jobs.remaining_steps,
            restart_cost_s=self.restart_cost_s,
        )
        return Allocation(jobs.index, share)


def head_of_line(order: np.ndarray, share: np.ndarray, jobs: JobView, steps_per_s: np.ndarray,
                 capacity: np.ndarray) -> np.ndarray:
    """``share`` with no waiting job started behind the first waiting job (in ``order``) that got
    no GPUs: a strict queue, as Helios's FIFO and QSSF are, where a smaller job further down may
    not take GPUs the first one cannot use yet. A job no GPU type could ever hold (too large, or
    runs nowhere) does not hold the line."""
    waiting = order[jobs.running_type[order] < 0]
    if not len(waiting):
        return share
    could = ((steps_per_s[waiting] > 0) & (jobs.num_gpus[waiting, None] <= capacity[None, :])).any(axis=1)
    blocked = could & ~row_any(share[waiting] > 0)
    if blocked.any():
        share[waiting[int(np.argmax(blocked)):]] = 0.0
    return share


def allocate_in_order(
    order: np.ndarray,
    num_gpus: np.ndarray,
    steps_per_s: np.ndarray,
    capacity: np.ndarray,
    *,
    agnostic: bool = False,
    current_type: np.ndarray | None = None,
    remaining_steps: np.ndarray | None = None,
    restart_cost_s: float = math.inf,
) -> np.ndarray:
    """X with whole GPUs (0/1 shares): walking ``order``, each job takes its best type with room.

    A job's best type is its fastest (``agnostic``: the cluster's first); with
    ``current_type`` given, a running job's best type is the one it holds. With
    ``remaining_steps`` too, a running job first moves to the fastest type on which it would
    finish more than ``restart_cost_s`` sooner, if that type has enough free GPUs: room that
    no job still to come holds now, so a move never pushes out a job that keeps running.

    The sequential loop itself, in plain Python over lists: a round takes a few hundred jobs
    at most, and the walk stops as soon as no GPU is left or no job still to come fits in
    what is left. Each job's types are ranked once with numpy, best first and ties to the
    lower type index (argmax's rule); a type it cannot run on becomes a last, made-up type
    that never has room, so the loop asks one question per type.
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
    remaining = capacity.astype(np.int64).tolist() + [-1]  # free GPUs of each type, and the made-up one
    if not len(order) or max(remaining) <= 0:
        return share
    moves, held, reserved = {}, [-1] * n, None
    if current_type is not None and remaining_steps is not None and not agnostic:
        moves = faster_types(steps_per_s, current_type, remaining_steps, restart_cost_s)
        if moves:  # GPUs each type holds for running jobs the walk has not reached yet
            held = current_type.tolist()
            running = current_type >= 0
            reserved = np.bincount(current_type[running], weights=num_gpus[running],
                                   minlength=num_types).astype(np.int64).tolist()
    sizes = num_gpus[order]
    smallest_after = np.minimum.accumulate(sizes[::-1])[::-1]  # smallest job from each position on
    taken_rows: list[int] = []
    taken_types: list[int] = []
    most = max(remaining)
    start, chunk = 0, 256
    while start < len(order) and smallest_after[start] <= most:
        # rank the next chunk of jobs only: the walk usually ends long before the last job
        stop = min(start + chunk, len(order))
        fits = np.flatnonzero(sizes[start:stop] <= most) + start  # larger jobs never fit: room only shrinks
        if reserved is not None:  # a running job that can never fit gives up what it holds
            for row in order[start:stop][sizes[start:stop] > most].tolist():
                if held[row] >= 0:
                    reserved[held[row]] -= int(num_gpus[row])
        rows = order[fits]
        row_score = score.take(rows, axis=0)  # np.take: rows gathered several times faster than score[rows]
        ranked = np.argsort(-row_score, axis=1, kind="stable")
        ranked[np.take_along_axis(row_score, ranked, axis=1) == -np.inf] = num_types
        # a job too large for what is left finds no type with room; it is skipped the same way
        for row, size, types in zip(rows.tolist(), sizes[fits].tolist(), ranked.tolist()):
            here = held[row]
            if here >= 0:  # only where some job may move
                reserved[here] -= size
                faster = moves.get(row)
                if faster is not None and _move(row, size, faster, remaining, reserved, taken_rows, taken_types):
                    continue
            for gpu_type in types:
                if remaining[gpu_type] >= size:
                    remaining[gpu_type] -= size
                    taken_rows.append(row)
                    taken_types.append(gpu_type)
                    break
        most = max(remaining)
        start, chunk = stop, chunk * 2
    share[taken_rows, taken_types] = 1.0
    return share


def _move(row: int, size: int, faster: list[int], remaining: list[int], reserved: list[int],
          taken_rows: list[int], taken_types: list[int]) -> bool:
    """Move a running job to the first of its faster types with room that no job still to come holds."""
    for gpu_type in faster:
        if gpu_type >= 0 and remaining[gpu_type] - reserved[gpu_type] >= size:
            remaining[gpu_type] -= size
            taken_rows.append(row)
            taken_types.append(gpu_type)
            return True
    return False


def faster_types(
    steps_per_s: np.ndarray, current_type: np.ndarray, remaining_steps: np.ndarray, restart_cost_s: float
) -> dict[int, list[int]]:
    """{row: types, fastest first} on which each running job would finish more than
    ``restart_cost_s`` sooner than where it runs now (-1 in place of a type that would not);
    only rows that have one."""
    if not math.isfinite(restart_cost_s):
        return {}
    rows = np.flatnonzero(current_type >= 0)
    if not len(rows):
        return {}
    rates = steps_per_s.take(rows, axis=0)
    here = rates[np.arange(len(rows)), current_type[rows]]
    left = np.maximum(remaining_steps[rows], 0.0)
    finish_here = np.divide(left, here, out=np.full(len(rows), np.inf), where=here > 0)
    finish_there = np.divide(left[:, None], rates, out=np.full(rates.shape, np.inf), where=rates > 0)
    with np.errstate(invalid="ignore"):  # inf - inf where a job runs on neither
        pays = (finish_here[:, None] - finish_there > restart_cost_s) & (here > 0)[:, None]
    movers = np.flatnonzero(row_any(pays))
    if not len(movers):
        return {}
    fastest_first = np.argsort(-rates.take(movers, axis=0), axis=1, kind="stable")  # ties: the lower type first
    worth_it = np.take_along_axis(pays.take(movers, axis=0), fastest_first, axis=1)
    return dict(zip(rows[movers].tolist(), np.where(worth_it, fastest_first, -1).tolist()))
