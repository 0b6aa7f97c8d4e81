"""How fast a job trains against the CPU cores beside each of its GPUs (a data-stall profile).

A job's input pipeline (fetching, decoding, augmenting) runs on the host's cores; with too few
of them the GPU waits for batches. Following Synergy (Mohan et al., OSDI'22), each job's
sensitivity is a curve: its speed measured (or profiled) at a few core counts per GPU. Between
two points the speed is interpolated linearly, beyond the last it stays flat, and below the
first it falls in proportion to the cores (no cores, no batches). A curve is read as its
running maximum: more cores never make a job slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class CoreCurves:
    """Each job's speed at a few counts of CPU cores per GPU: one row per job, one column per point."""

    points: np.ndarray  # [K] cores per GPU, ascending, more than 0
    speed: np.ndarray  # [n, K] speed at each point, in any unit (only its ratio to the job's best counts)

    def __post_init__(self) -> None:
        points = np.asarray(self.points, dtype=np.float64)
        speed = np.maximum.accumulate(np.atleast_2d(np.asarray(self.speed, dtype=np.float64)), axis=1)
        if points.ndim != 1 or not len(points) or not np.all(points > 0) or np.any(np.diff(points) <= 0):
            raise ValueError(f"core counts must be ascending and more than 0, got {points.tolist()}")
        if speed.shape[1] != len(points):
            raise ValueError(f"each curve needs a speed at each of {len(points)} core counts, got {speed.shape[1]}")
        if not np.all(np.isfinite(speed)) or np.any(speed[:, -1] <= 0) or np.any(speed < 0):
            raise ValueError("speeds must be finite, not negative, and more than 0 at the most cores")
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "speed", speed)

    def __len__(self) -> int:
        return len(self.speed)

    def take(self, rows: np.ndarray | slice) -> CoreCurves:
        """The curves of the jobs at ``rows``, on the same core counts."""
        return CoreCurves(self.points, self.speed[rows])

    @cached_property
    def saturation(self) -> np.ndarray:
        """[n] the fewest cores per GPU at which each job reaches its best speed (kept: a replay asks every round)."""
        first_best = np.argmax(self.speed >= self.speed[:, -1:] * (1 - 1e-12), axis=1)
        return self.points[first_best]


def relative_speed_each(curves: list[tuple[np.ndarray, np.ndarray]], cores_per_gpu: np.ndarray) -> np.ndarray:
    """[n] :func:`relative_speed` of n curves each on core counts of its own ((points, speeds) pairs, as a
    job file or a server's measurements give them), at ``cores_per_gpu`` [n]: all at once, the curves
    padded to the longest with their last speed (flat beyond their last point, as one is read)."""
    longest = max((len(points) for points, _ in curves), default=1)
    points = np.empty((len(curves), longest))
    speed = np.empty((len(curves), longest))
    for row, (p, v) in enumerate(curves):
        k = len(p)
        points[row, :k], points[row, k:] = p, p[-1] + np.arange(1, longest - k + 1)
        speed[row, :k], speed[row, k:] = np.maximum.accumulate(v), np.max(v)
    return _read_off(points, speed, np.maximum(np.asarray(cores_per_gpu, dtype=np.float64), 0.0))


def _read_off(points: np.ndarray, speed: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """[n] each row's speed at ``cores`` over its best: linear between its ``points`` ([K] shared by every
    row, or [n, K] a row's own), in proportion to the cores below the first, flat above the last."""
    rows = np.arange(len(cores))
    best = speed[:, -1]
    shared = points.ndim == 1
    first = points[0] if shared else points[:, 0]
    if speed.shape[1] == 1:
        return speed[:, 0] * np.minimum(cores / first, 1.0) / best
    count = np.searchsorted(points, cores, side="right") if shared else (points <= cores[:, None]).sum(axis=1)
    upper = np.clip(count, 1, speed.shape[1] - 1)
    lower = upper - 1
    x0, x1 = (points[lower], points[upper]) if shared else (points[rows, lower], points[rows, upper])
    y0, y1 = speed[rows, lower], speed[rows, upper]
    between = y0 + (y1 - y0) * (np.clip(cores, x0, x1) - x0) / (x1 - x0)
    return np.where(cores < first, speed[:, 0] * cores / first, between) / best


def relative_speed(curves: CoreCurves, jobs: np.ndarray, cores_per_gpu: np.ndarray) -> np.ndarray:
    """[m] the fraction of its best speed each of ``jobs`` trains at with ``cores_per_gpu`` [m]."""
    speed = curves.speed[np.asarray(jobs, dtype=np.int64)]
    return _read_off(curves.points, speed, np.maximum(np.asarray(cores_per_gpu, dtype=np.float64), 0.0))
