"""Long series reduced to what a chart can show: stairs averaged into bins, CDFs through quantiles.

Shared by the PNG plots and report.html, so that both draw the same curves.
"""

from __future__ import annotations

import numpy as np

from apportion.sim.result import SimResult


def end_s(result: SimResult) -> float:
    """When the replay's last job finished, or its last decision if later: where both reports' time axes end."""
    last_finish = float(np.nanmax(result.finish_s)) if np.isfinite(result.finish_s).any() else 0.0
    last_decision = float(result.timeline[-1, 0]) if len(result.timeline) else 0.0
    return max(last_finish, last_decision)


def step_means(times: np.ndarray, values: np.ndarray, end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Stair edges and values of a step function (``values[i]`` holds from ``times[i]`` to the next
    time, the last until ``end``); time-weighted means over ``bins`` equal bins when it has more steps.

    ``values`` may be [k] or [k, m] (m series on the same steps). An empty series gives one edge, no values.
    """
    times = np.asarray(times, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if not len(times):
        return np.zeros(1), values[:0]
    end = max(float(end), float(times[-1]) + 1e-9)
    edges = np.append(times, end)
    if len(times) <= bins:
        return edges, values
    column = (-1,) + (1,) * (values.ndim - 1)  # broadcasts a time axis over the series
    area = np.concatenate((np.zeros((1,) + values.shape[1:]),
                           np.cumsum(values * np.diff(edges).reshape(column), axis=0)))  # integral up to each edge
    bin_edges = np.linspace(edges[0], end, bins + 1)
    step = np.clip(np.searchsorted(edges, bin_edges, side="right") - 1, 0, len(times) - 1)
    area_at = area[step] + values[step] * (bin_edges - edges[step]).reshape(column)
    return bin_edges, np.diff(area_at, axis=0) / np.diff(bin_edges).reshape(column)


def cdf_points(values: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """An empirical CDF as (value, fraction) stairs rising from 0; at most ``points`` + 1 quantiles."""
    values = np.sort(np.asarray(values, dtype=np.float64))
    if not len(values):
        return values, values
    fraction = np.arange(1, len(values) + 1) / len(values)
    values, fraction = np.append(values[0], values), np.append(0.0, fraction)
    if len(values) > points + 1:
        fraction = np.linspace(0.0, 1.0, points + 1)
        values = np.quantile(values[1:], fraction)
    return values, fraction
