"""Matplotlib figures of replays (JCT CDFs, utilization and queue over time), built without pyplot.

Figures are ``matplotlib.figure.Figure`` objects rendered by Agg, so plotting works headless and
leaves no global state; long series are reduced to about a pixel's worth of points first.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from apportion.report.series import end_s, step_means
from apportion.report.tables import format_duration
from apportion.sim.result import JobStatus, SimResult

RUN_SIZE_IN = (11.0, 4.5)
COMPARISON_SIZE_IN = (16.0, 4.5)
DPI = 120
TIMELINE_BINS = 800  # a timeline with more steps than this is averaged into this many bins
CDF_POINTS = 2000  # a CDF over more jobs than this is drawn through this many quantiles
HOUR_S = 3600.0
DAY_S = 86400.0


def run_figure(result: SimResult) -> Figure:
    """Two panels: the JCT CDF of completed jobs, and utilization with queue length over time."""
    fig = Figure(figsize=RUN_SIZE_IN, dpi=DPI, layout="constrained")
    cdf_ax, time_ax = fig.subplots(1, 2, width_ratios=(1, 1.25))
    completed = int(np.sum(result.status == JobStatus.COMPLETED))
    fig.suptitle(
        f"{result.policy} on {result.cluster.describe()}: {len(result.jobs):,} jobs, {completed:,} completed",
        fontsize=12,
    )
    _plot_cdf(cdf_ax, _completed_jct_h(result), color="C0")
    _annotate_jct(cdf_ax, result.summary)
    _plot_utilization_and_queue(time_ax, result)
    return fig


def comparison_figure(results: Sequence[SimResult]) -> Figure:
    """Three panels over all policies: JCT CDFs, utilization over time, and average JCT bars."""
    fig = Figure(figsize=COMPARISON_SIZE_IN, dpi=DPI, layout="constrained")
    cdf_ax, util_ax, bar_ax = fig.subplots(1, 3, width_ratios=(1.1, 1.3, 0.8))
    names = [r.policy for r in results]
    who = " vs ".join(names) if len(names) <= 4 else f"{len(names)} policies"
    clusters = " / ".join(dict.fromkeys(r.cluster.describe() for r in results))
    jobs = " / ".join(dict.fromkeys(f"{len(r.jobs):,}" for r in results))
    fig.suptitle(f"{who} on {clusters}: {jobs} jobs", fontsize=12)
    span_s = max((end_s(r) for r in results), default=0.0)
    scale, unit = _time_unit(span_s)
    for i, r in enumerate(results):
        color = f"C{i % 10}"
        _plot_cdf(cdf_ax, _completed_jct_h(r), color=color, label=r.policy)
        edges, busy = _step_series(r, r.timeline[:, 1] / max(r.cluster.num_gpus, 1) * 100.0, bins=300)
        if len(busy):
            util_ax.stairs(busy, edges / scale, baseline=None, color=color, linewidth=1.3, label=r.policy)
    cdf_ax.legend(loc="lower right", fontsize=9)
    util_ax.set(xlabel=f"time ({unit})", ylabel="GPU utilization (%)", ylim=(0, 105), xlim=(0, None))
    util_ax.set_title("Utilization over time", fontsize=11)
    util_ax.grid(True, alpha=0.3)
    if results:
        util_ax.legend(loc="best", fontsize=9)
    _plot_avg_jct_bars(bar_ax, results)
    return fig


def _plot_cdf(ax: Axes, jct_h: np.ndarray, *, color: str, label: str | None = None) -> None:
    """Empirical CDF of JCTs (hours) on a log x axis, as a percentage of completed jobs."""
    ax.set_title("Job completion time", fontsize=11)
    ax.set(xlabel="JCT (hours, log scale)", ylabel="completed jobs (%)", ylim=(0, 101))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    if not len(jct_h):
        ax.text(0.5, 0.5, "no completed jobs", transform=ax.transAxes, ha="center", va="center", color="0.4")
        return
    values = np.sort(jct_h)
    fraction = np.arange(1, len(values) + 1) / len(values)
    values, fraction = np.append(values[0], values), np.append(0.0, fraction)  # rise from 0%
    if len(values) > CDF_POINTS:
        fraction = np.linspace(0.0, 1.0, CDF_POINTS)
        values = np.quantile(values, fraction)
    ax.plot(values, fraction * 100.0, drawstyle="steps-post", color=color, linewidth=1.6, label=label)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(_hours_tick))


def _annotate_jct(ax: Axes, summary: dict) -> None:
    """Mark the average and p99 JCT and state them in a corner box."""
    avg, p50, p99 = (summary.get(k) for k in ("avg_jct_s", "p50_jct_s", "p99_jct_s"))
    if avg is None:
        return
    for value, style, name in ((avg, "--", "avg"), (p99, ":", "p99")):
        if value and value > 0:
            ax.axvline(value / HOUR_S, color="0.35", linestyle=style, linewidth=1, label=f"{name} JCT")
    lines = [f"avg {format_duration(avg)}", f"p50 {format_duration(p50)}", f"p99 {format_duration(p99)}"]
    ax.legend(loc="lower right", fontsize=9)
    ax.text(
        0.03, 0.97, "\n".join(lines), transform=ax.transAxes, va="top", ha="left", fontsize=9,
        bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.8", "alpha": 0.9},
    )


def _plot_utilization_and_queue(ax: Axes, result: SimResult) -> None:
    """Utilization (%) on the left axis and queued jobs on a twin right axis, against time."""
    ax.set_title("Cluster load over time", fontsize=11)
    timeline = result.timeline
    if not len(timeline):
        ax.text(0.5, 0.5, "no scheduling decisions", transform=ax.transAxes, ha="center", va="center", color="0.4")
        ax.set(xlabel="time", ylabel="GPU utilization (%)")
        return
    scale, unit = _time_unit(end_s(result))
    edges, util = _step_series(result, timeline[:, 1] / max(result.cluster.num_gpus, 1) * 100.0)
    _, queued = _step_series(result, timeline[:, 3])
    x = edges / scale
    ax.stairs(util, x, fill=True, color="C0", alpha=0.18, linewidth=0)
    util_line = ax.stairs(util, x, baseline=None, color="C0", linewidth=1.2, label="utilization (%)")
    ax.set(xlabel=f"time ({unit})", ylabel="GPU utilization (%)", ylim=(0, 105), xlim=(x[0], x[-1]))
    ax.yaxis.label.set_color("C0")
    ax.grid(True, alpha=0.3)
    queue_ax = ax.twinx()
    queue_line = queue_ax.stairs(queued, x, baseline=None, color="C1", linewidth=1.2, label="queued jobs")
    queue_ax.set_ylabel("queued jobs", color="C1")
    queue_ax.set_ylim(0, max(float(np.max(queued)) * 1.1, 1.0))
    queue_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles=[util_line, queue_line], loc="upper right", fontsize=9, framealpha=0.9)


def _plot_avg_jct_bars(ax: Axes, results: Sequence[SimResult]) -> None:
    """One bar per policy: its average JCT in hours, labelled with the value."""
    names = [r.policy for r in results]
    avg_h = [(r.summary.get("avg_jct_s") or np.nan) / HOUR_S for r in results]
    bars = ax.bar(range(len(names)), np.nan_to_num(avg_h), color=[f"C{i % 10}" for i in range(len(names))])
    ax.bar_label(bars, labels=["—" if np.isnan(h) else f"{h:.2f} h" for h in avg_h], fontsize=9, padding=2)
    ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 3 else 0)
    ax.set(ylabel="average JCT (hours)")
    ax.set_title("Average JCT", fontsize=11)
    ax.margins(y=0.15)
    ax.grid(True, axis="y", alpha=0.3)


def _step_series(result: SimResult, values: np.ndarray, bins: int = TIMELINE_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Stair edges and values of a timeline column; time-weighted bin means when it has more than ``bins`` steps.

    Each timeline value holds from its decision until the next one; the last holds until the run ends.
    """
    return step_means(result.timeline[:, 0], values, end_s(result), bins)


def _completed_jct_h(result: SimResult) -> np.ndarray:
    jct = result.jct_s[result.status == JobStatus.COMPLETED] / HOUR_S
    return jct[jct > 0]


def _time_unit(span_s: float) -> tuple[float, str]:
    """Days for runs of two days or more, hours for shorter ones."""
    return (DAY_S, "days") if span_s >= 2 * DAY_S else (HOUR_S, "hours")


def _hours_tick(value: float, _pos: int) -> str:
    return f"{value:g}"
