"""Who held which GPUs when, in a replay: what a Gantt chart of the run draws.

Recorded only when asked for (``simulate(..., record_holdings=True)``), through the
simulator's decision hook, so a replay that does not ask pays nothing. The recorder keeps
one open segment per running job and closes it when the job stops, changes GPU type or
finishes; its work per decision is a few numpy operations over the running jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster


@dataclass(frozen=True)
class Holdings:
    """Holding segments (a job on GPUs of one type without a break), preemptions and moves,
    and the busy GPUs of each type at each decision. Jobs are JobTable rows."""

    job: np.ndarray  # [s] the job holding
    gpu_type: np.ndarray  # [s] index into the cluster's gpu_types
    start_s: np.ndarray  # [s]
    end_s: np.ndarray  # [s]
    preempted_job: np.ndarray  # [p] a job that lost its GPUs ...
    preempted_s: np.ndarray  # [p] ... at this time
    moved_job: np.ndarray  # [m] a job restarted on other GPUs (or with another partner) ...
    moved_s: np.ndarray  # [m] ... at this time
    busy_by_type: np.ndarray  # [k, T] busy GPUs of each type at each decision (the rows of SimResult.timeline)


class HoldingsRecorder:
    """Called with every decision of one replay (``Simulator.on_decision``); ``holdings()`` at the end."""

    def __init__(self, cluster: Cluster, num_jobs: int) -> None:
        self.type_of_gpu = np.asarray(cluster.gpu_type, dtype=np.int64)
        self.num_types = len(cluster.gpu_types)
        self.open_type = np.full(num_jobs, -1, dtype=np.int64)  # type of each job's open segment, -1 none
        self.open_start = np.zeros(num_jobs)
        self.open_rows = np.zeros(0, dtype=np.int64)
        self.scratch = np.full(num_jobs, -1, dtype=np.int64)  # each running job's type this decision, else -1
        self._closed: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = []  # rows, types, starts, end
        self._preempted: list[tuple[np.ndarray, float]] = []
        self._moved: list[tuple[np.ndarray, float]] = []
        self._busy: list[np.ndarray] = []

    def __call__(self, now: float, active: np.ndarray, decision) -> None:
        running = decision.chosen_type >= 0
        rows = active[running]
        types = decision.chosen_type[running].astype(np.int64)
        self.scratch[rows] = types
        new_type = self.scratch[self.open_rows]
        self.scratch[rows] = -1
        ends = new_type != self.open_type[self.open_rows]
        if ends.any():
            closing = self.open_rows[ends]
            self._closed.append((closing, self.open_type[closing].copy(), self.open_start[closing].copy(), now))
            self.open_type[closing] = -1
        starts = self.open_type[rows] != types
        self.open_type[rows[starts]] = types[starts]
        self.open_start[rows[starts]] = now
        self.open_rows = rows
        if decision.preempted.any():
            self._preempted.append((active[decision.preempted], now))
        moved = decision.moved
        if moved.any():
            self._moved.append((active[moved], now))
        self._busy.append(np.bincount(self.type_of_gpu[decision.owner >= 0], minlength=self.num_types))

    def holdings(self, finish_s: np.ndarray, end_s: float) -> Holdings:
        """The segments so far, by job and start, the open ones closed at ``end_s``; none lasts
        past its job's finish (a job that finished between decisions was closed at the next one)."""
        closed = list(self._closed)
        if len(self.open_rows):
            rows = self.open_rows
            closed.append((rows, self.open_type[rows], self.open_start[rows], end_s))
        job = _cat([c[0] for c in closed], np.int64)
        gpu_type = _cat([c[1] for c in closed], np.int64)
        start = _cat([c[2] for c in closed], np.float64)
        end = _cat([np.full(len(c[0]), c[3]) for c in closed], np.float64)
        finish = np.asarray(finish_s, dtype=np.float64)[job]
        end = np.where(np.isfinite(finish), np.minimum(end, finish), end)
        order = np.lexsort((start, job))
        return Holdings(
            job=job[order], gpu_type=gpu_type[order], start_s=start[order], end_s=end[order],
            preempted_job=_cat([p[0] for p in self._preempted], np.int64),
            preempted_s=_cat([np.full(len(p[0]), p[1]) for p in self._preempted], np.float64),
            moved_job=_cat([m[0] for m in self._moved], np.int64),
            moved_s=_cat([np.full(len(m[0]), m[1]) for m in self._moved], np.float64),
            busy_by_type=np.array(self._busy, dtype=np.int64).reshape(-1, self.num_types),
        )


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
