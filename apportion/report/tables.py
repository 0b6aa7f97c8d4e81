"""Rich tables of replay summaries, side by side, with durations a person can read at a glance,
and the lines that name the jobs a replay could never run."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from rich.markup import escape
from rich.table import Table

from apportion.sim.result import JobStatus, SimResult

MISSING = "—"


def format_duration(seconds: float | None) -> str:
    """Seconds as '850 ms', '42 s', '3.5 min', '2.1 h' or '4.2 d'; None or NaN as '—'."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return MISSING
    value = float(seconds)
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value == 0:
        return "0 s"
    if value < 1:
        return f"{sign}{value * 1000:.3g} ms"
    if value < 10:
        return f"{sign}{value:.1f} s"
    if value < 59.5:
        return f"{sign}{value:.0f} s"
    if value < 59.95 * 60:  # from here on '60.0 min' would show: use hours
        return f"{sign}{value / 60:.1f} min"
    if value < 23.95 * 3600:
        return f"{sign}{value / 3600:.1f} h"
    return f"{sign}{value / 86400:.1f} d"


def _count(value: object) -> str:
    return MISSING if value is None else f"{int(value):,}"


def _dollars(value: object) -> str:
    return MISSING if value is None else f"${float(value):,.2f}"


def _percent(value: object) -> str:
    return MISSING if value is None else f"{float(value) * 100:.1f}%"


# (row label, summary key, formatter, which way is better: -1 lower, +1 higher, 0 neither)
_ROWS: tuple[tuple[str, str, Callable[[object], str], int], ...] = (
    ("jobs", "jobs", _count, 0),
    ("completed", "completed", _count, +1),
    ("unschedulable", "unschedulable", _count, 0),
    ("avg JCT", "avg_jct_s", format_duration, -1),
    ("p50 JCT", "p50_jct_s", format_duration, -1),
    ("p99 JCT", "p99_jct_s", format_duration, -1),
    ("makespan", "makespan_s", format_duration, -1),
    ("avg queueing", "avg_queueing_s", format_duration, -1),
    ("utilization", "utilization", _percent, +1),
    ("preemptions", "preemptions", _count, -1),
    ("shared GPU-h", "shared_gpu_hours", lambda v: MISSING if v is None else f"{float(v):,.1f}", 0),
    ("dollars", "dollars", _dollars, -1),
    ("on-demand dollars", "dollars_on_demand", _dollars, -1),
    ("spot dollars", "dollars_spot", _dollars, 0),
    ("egress dollars", "dollars_egress", _dollars, -1),
    ("spot preemptions", "spot_preemptions", _count, -1),
    ("deadlines met", "deadlines_met", _count, +1),
    ("deadlines missed", "deadlines_missed", _count, -1),
    ("out of budget", "out_of_budget", _count, -1),
    ("privacy claims granted", "privacy_granted", _count, +1),
    ("privacy claims rejected", "privacy_rejected", _count, -1),
    ("privacy claims waiting", "privacy_waiting", _count, 0),
    ("mean delay to grant", "privacy_mean_delay_s", format_duration, -1),
    ("sim wall time", "sim_wall_s", format_duration, 0),
)
# shown only when some run reports it
_OPTIONAL = {"shared_gpu_hours", "privacy_granted", "privacy_rejected", "privacy_waiting", "privacy_mean_delay_s",
             "dollars", "dollars_on_demand", "dollars_spot", "dollars_egress", "spot_preemptions", "deadlines_met",
             "out_of_budget"}
_SHOWN_WITH = {"deadlines_missed": "deadlines_met"}  # shown only when some run reports the other key


def summary_rows(summaries: Sequence[dict]) -> list[tuple[str, list[str], list[bool]]]:
    """One (label, cells, best) per metric over ``summaries``: each cell as text, and whether it is
    the best of several (lowest or highest, whichever is better; none where all tie)."""
    rows = []
    for label, key, fmt, better in _ROWS:
        values = [s.get(key) for s in summaries]
        if key in _OPTIONAL and all(v is None for v in values):
            continue
        if key in _SHOWN_WITH and all(s.get(_SHOWN_WITH[key]) is None for s in summaries):
            continue
        best = _best(values, better) if len(summaries) > 1 else None
        rows.append((label, [fmt(v) for v in values], [v is not None and v == best for v in values]))
    return rows


def summary_table(summaries: Sequence[dict], title: str | None = None) -> Table:
    """One column per summary (headed by its policy), one row per metric; the best of several in bold."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric", style="bold")
    for i, summary in enumerate(summaries):
        table.add_column(escape(policy_name(summary, i)), justify="right")
    for label, cells, best in summary_rows(summaries):
        table.add_row(label, *(f"[bold green]{cell}[/]" if top else cell for cell, top in zip(cells, best)))
    return table


def policy_name(summary: dict, index: int) -> str:
    """The policy a summary is of, or ``run N`` when it does not say."""
    return str(summary.get("policy", f"run {index + 1}"))


def _best(values: list, better: int) -> object:
    """The best of the known values (lowest or highest), or None when there is no order or no tie-break."""
    known = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not better or len(set(known)) < 2:
        return None
    return min(known) if better < 0 else max(known)


def unschedulable_lines(result: SimResult, limit: int = 5) -> list[str]:
    """Plain-text lines naming the first ``limit`` jobs that can never run, each with its reason,
    then "… and N more"; no lines when every job could run. Print them under the summary table."""
    rows = np.flatnonzero(result.status == JobStatus.UNSCHEDULABLE)
    if len(rows) == 0:
        return []
    reasons = result.reasons
    noun = "job" if len(rows) == 1 else "jobs"
    lines = [f"{len(rows):,} unschedulable {noun} under {result.policy}:"]
    for row in rows[:limit].tolist():
        lines.append(f"  {result.jobs.job_id[row]}: {reasons[row] or 'it can never run here'}")
    if len(rows) > limit:
        lines.append(f"  … and {len(rows) - limit:,} more (with --out, jobs.csv names them all, in column unschedulable_reason)")
    return lines
