"""A sweep's results: a table of means with their 95% intervals, its cells as CSV and JSON, and a
plot of each metric against the load, one line a policy, the interval as error bars.

Rows are ``apportion.sweep``'s plain dicts: a cell's coordinates and metrics
(``run_grid``), or a group's means (``summarize``: ``{metric: {mean, ci95, low, high, n}}``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure
from rich.markup import escape
from rich.table import Table

from apportion.report.tables import MISSING, format_duration

CELLS_CSV = "sweep-cells.csv"
SUMMARY_JSON = "sweep.json"
PLOT_PNG = "sweep.png"
LABELS = {"avg_jct_s": "avg JCT", "p99_jct_s": "p99 JCT", "makespan_s": "makespan", "avg_queueing_s": "avg queueing",
          "utilization": "utilization", "completed": "completed", "preemptions": "preemptions",
          "data_stall": "data stall", "privacy_granted": "claims granted"}
PERCENT = ("utilization", "data_stall")  # fractions, shown as percentages
PLOTTED = ("avg_jct_s", "p99_jct_s", "utilization")  # a panel each when the sweep has them
HOUR_S = 3600.0


def _value(metric: str, value: float | None) -> str:
    if value is None:
        return MISSING
    if metric.endswith("_s"):
        return format_duration(value)
    if metric in PERCENT:
        return f"{value * 100:.1f}%"
    return f"{value:,.1f}"


def _interval(metric: str, estimate: dict) -> str:
    """``2.1 h ± 12 min``; the mean alone when there is no interval."""
    mean = _value(metric, estimate["mean"])
    if estimate["ci95"] is None:
        return mean
    half = format_duration(estimate["ci95"]) if metric.endswith("_s") else (
        f"{estimate['ci95'] * 100:.1f}%" if metric in PERCENT else f"{estimate['ci95']:,.1f}")
    return f"{mean} ± {half}"


TABLE_TITLE = "mean over the seeds ± 95% confidence interval"


def sweep_rows(summary: Sequence[dict], metrics: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The table's header and its rows as text: policy (cluster, when several), load, seeds, then each
    metric's mean ± the half-width of its 95% interval."""
    clusters = len({s["cluster"] for s in summary}) > 1
    header = ["policy", *(["cluster"] if clusters else []), "jobs/h", "seeds", *(LABELS.get(m, m) for m in metrics)]
    rows = [[s["policy"], *([s["cluster"]] if clusters else []), f"{s['rate_per_hour']:g}", str(s["seeds"]),
             *(_interval(m, s[m]) for m in metrics)] for s in summary]
    return header, rows


def sweep_table(summary: Sequence[dict], metrics: Sequence[str]) -> Table:
    """One row per policy, cluster and load: each metric's mean ± the half-width of its 95% interval."""
    header, rows = sweep_rows(summary, metrics)
    table = Table(title=TABLE_TITLE, title_justify="left")
    for i, name in enumerate(header):
        if i == 0:
            table.add_column(name, style="bold")
        else:
            table.add_column(name, justify="left" if name == "cluster" else "right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def sweep_html(summary: Sequence[dict], metrics: Sequence[str]) -> str:
    """The same table as HTML (a notebook shows it inline)."""
    header, rows = sweep_rows(summary, metrics)
    cells = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return (f"<table><caption>{html.escape(TABLE_TITLE)}</caption><thead><tr>{cells}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def sweep_figure(summary: Sequence[dict], metrics: Sequence[str] = PLOTTED) -> Figure:
    """A panel per metric: its mean against the load (jobs/h), a line per policy (and cluster), 95% error bars."""
    shown = [m for m in metrics if any(s.get(m, {}).get("mean") is not None for s in summary)] or list(metrics)[:1]
    fig = Figure(figsize=(5.0 * len(shown), 4.2), dpi=120, layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    lines: dict[tuple[str, str], list[dict]] = {}
    for s in summary:
        lines.setdefault((s["policy"], s["cluster"]), []).append(s)
    several_clusters = len({c for _, c in lines}) > 1
    seeds = sorted({s["seeds"] for s in summary})
    fig.suptitle(f"{len({p for p, _ in lines})} policies, {'/'.join(map(str, seeds))} seeds a point, "
                 "95% confidence intervals", fontsize=11)
    loads = sorted({s["rate_per_hour"] for s in summary})
    dodge = 0.012 * (loads[-1] - loads[0] if len(loads) > 1 else 1.0)  # side by side, so error bars never hide
    for ax, metric in zip(axes, shown):
        scale, unit = (HOUR_S, " (hours)") if metric.endswith("_s") else (0.01, " (%)") if metric == "utilization" \
            else (1.0, "")
        for i, ((policy, cluster), points) in enumerate(lines.items()):
            points = sorted((p for p in points if p[metric]["mean"] is not None), key=lambda p: p["rate_per_hour"])
            if not points:
                continue
            x = [p["rate_per_hour"] + (i - (len(lines) - 1) / 2) * dodge for p in points]
            y = [p[metric]["mean"] / scale for p in points]
            err = [0.0 if p[metric]["ci95"] is None else p[metric]["ci95"] / scale for p in points]
            label = f"{policy} on {cluster}" if several_clusters else policy
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=label)
        ax.set(xlabel="load (jobs per hour)", ylabel=LABELS.get(metric, metric) + unit)
        ax.set_title(LABELS.get(metric, metric), fontsize=11)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=9)
    return fig


def write_sweep(rows: Sequence[dict], summary: Sequence[dict], grid: dict, out_dir: Path) -> list[Path]:
    """sweep.json (the grid, every cell, the means and intervals), sweep-cells.csv and sweep.png."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {"grid": grid, "summary": list(summary), "cells": list(rows)}
    json_path = out_dir / SUMMARY_JSON
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    columns = list(dict.fromkeys(c for row in rows for c in row))  # every row's, in their first order
    csv_path = out_dir / CELLS_CSV
    with csv_path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(",".join(columns) + "\n")
        for row in rows:
            handle.write(",".join(_csv(row.get(c)) for c in columns) + "\n")
    png_path = out_dir / PLOT_PNG
    figure = sweep_figure(summary)
    figure.savefig(png_path, dpi=figure.dpi)
    return [json_path, csv_path, png_path]


def _csv(value: object) -> str:
    text = "" if value is None else repr(value) if isinstance(value, float) else str(value)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text
