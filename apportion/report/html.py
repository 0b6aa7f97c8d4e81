"""report.html: one self-contained page of a replay or a comparison, with interactive charts.

The charts are drawn by plotly.js, which the page carries itself (the copy bundled with the
``plotly`` package, compressed with gzip, unpacked by the browser's DecompressionStream), so the
file opens offline and can be sent as it is. The figures are built here as plotly.js JSON;
long series are reduced first to what a chart can show (see ``series.py``), and a Gantt chart
of a very large run shows every k-th job. The summary table is plain HTML.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import math
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from apportion.report.rented import rented_section
from apportion.report.series import cdf_points, end_s, step_means
from apportion.report.tables import policy_name, summary_rows, unschedulable_lines
from apportion.sim.result import JobStatus, SimResult

REPORT_HTML = "report.html"
CDF_POINTS = 1000  # a JCT CDF is drawn through at most this many quantiles
TIMELINE_BINS = 1000  # utilization and queue are averaged into at most this many time bins
GANTT_MAX_JOBS = 10_000  # a Gantt chart of more jobs shows every k-th job, at most this many
GANTT_HOVER_SEGMENTS = 5_000  # up to this many segments, each says whose it is on hover
GANTT_MARKS_SHOWN = 5_000  # more preemptions (or moves) than this hide behind their legend entry
RESOLUTION = 1e-5  # times are rounded to this fraction of the run's span
TYPE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
POLICY_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                 "#ccb974", "#64b5cd")
HOUR_S = 3600.0
DAY_S = 86400.0


def write_report(results: Sequence[SimResult], path: Path) -> Path:
    """Write report.html for one replay (or several, side by side) to ``path``."""
    path = Path(path)
    path.write_text(report_page(results), encoding="utf-8")
    return path


def report_page(results: Sequence[SimResult]) -> str:
    """The whole page as text: summary table, JCT CDF, utilization by GPU type, queue, Gantt charts."""
    results = list(results)
    document = report_figures(results)
    template = _asset("report.html")
    parts = {
        "TITLE": html.escape(_title(results)),
        "SUMMARY": "Policies compared" if len(results) > 1 else "Summary",
        "SUBTITLE": html.escape(_subtitle(results)),
        "TABLE": summary_html(results),
        "UNSCHEDULABLE": _unschedulable_html(results),
        "NOTES": html.escape(document.pop("notes")),
        "GANTT_CHOICE": _gantt_choice(results),
        "PRIVACY": _privacy_section(document["figures"]),
        "RENTED": rented_section(results),
        "CSS": _asset("report.css"),
        "JS": _asset("report.js"),
        "PLOTLY": _plotly_packed(),
        "DATA": _pack(json.dumps(document, separators=(",", ":"), allow_nan=False)),
    }
    return re.sub(r"<!--([A-Z_]+)-->", lambda match: parts[match.group(1)], template)  # one pass: no value is rescanned


def report_figures(results: Sequence[SimResult]) -> dict:
    """The page's charts as plotly.js figures (``{"data": [...], "layout": {...}}``): ``figures``
    (cdf, utilization, queue), ``gantt`` (one per replay, with its policy and a note on what it
    leaves out) and ``notes`` (how the rest was reduced)."""
    results = list(results)
    span_s = max((end_s(r) for r in results), default=0.0)
    scale, unit = (DAY_S, "days") if span_s >= 2 * DAY_S else (HOUR_S, "hours")
    places = max(0, math.ceil(-math.log10(max(span_s / scale, 1e-9) * RESOLUTION)))
    types = list(dict.fromkeys(t for r in results for t in r.cluster.gpu_types))
    colors = {t: TYPE_COLORS[i % len(TYPE_COLORS)] for i, t in enumerate(types)}
    axis = {"title": {"text": f"time ({unit})"}, "rangemode": "tozero"}
    gantts = []
    for r in results:
        figure, note = gantt_figure(r, scale, unit, places, colors)
        gantts.append({"policy": r.policy, "figure": figure, "note": note})
    figures = {
        "cdf": _cdf_figure(results),
        "utilization": _utilization_figure(results, scale, places, colors, axis),
        "queue": _queue_figure(results, scale, places, axis),
    }
    if any(r.privacy is not None for r in results):
        figures["privacy"] = _privacy_figure(results, scale, places, axis)
    return {
        "figures": figures,
        "gantt": gantts,
        "notes": f"Utilization and queue are averaged into at most {TIMELINE_BINS:,} time bins; "
                 f"JCT CDFs go through at most {CDF_POINTS:,} quantiles.",
    }


def gantt_figure(result: SimResult, scale: float, unit: str, places: int,
                 colors: dict[str, str]) -> tuple[dict | None, str]:
    """GPU holdings per job, one row a job in order of submission, and a note saying what was left
    out (None without holdings). Compact: ``bars`` (per GPU type: start, end and row of each
    segment) and ``marks`` (preemptions, moves: time and row), which report.js turns into
    plotly.js line traces (WebGL where the browser has it: SVG draws 100,000 segments slowly)."""
    holdings = result.holdings
    if holdings is None:
        return None, "This replay was run without record_holdings: no holdings were recorded."
    jobs, gpu_types = result.jobs, result.cluster.gpu_types
    every = max(1, math.ceil(len(jobs) / GANTT_MAX_JOBS))
    note = "" if every == 1 else f"It shows every {every}th job ({math.ceil(len(jobs) / every):,} of {len(jobs):,})."
    shown = holdings.job % every == 0
    rows = math.ceil(len(jobs) / every)
    height = int(min(900, max(260, 90 + 14 * rows)))
    plot_px = max(height - 90, 1)
    hover = int(np.count_nonzero(shown)) <= GANTT_HOVER_SEGMENTS
    bars = []
    for t, name in enumerate(gpu_types):
        mine = shown & (holdings.gpu_type == t)
        job = holdings.job[mine]
        bar = {"name": name, "color": colors[name], "width": float(np.clip(plot_px / max(rows, 1) * 0.8, 1.0, 14.0)),
               "start": _numbers(holdings.start_s[mine] / scale, places),
               "end": _numbers(holdings.end_s[mine] / scale, places), "row": (job // every).tolist(),
               "hover": f"row %{{y}} on {name}: %{{x}} {unit}<extra></extra>"}
        if hover:
            bar["text"] = [f"{html.escape(str(jid))} on {name} ×{g}"
                           for jid, g in zip(jobs.job_id[job].tolist(), jobs.num_gpus[job].tolist())]
            bar["hover"] = f"%{{text}}: %{{x}} {unit}<extra></extra>"
        bars.append(bar)
    marks = []
    for what, job, when, color in (("preemption", holdings.preempted_job, holdings.preempted_s, "#1d2330"),
                                   ("move", holdings.moved_job, holdings.moved_s, "#8a8f99")):
        keep = job % every == 0
        count = int(np.count_nonzero(keep))
        marks.append({"name": f"{what}s", "color": color, "time": _numbers(when[keep] / scale, places),
                      "row": (job[keep] // every).tolist(), "shown": count <= GANTT_MARKS_SHOWN,
                      "half": max(0.45, rows / plot_px),  # a short vertical stroke, at least 2 px tall
                      "hover": f"{what} at %{{x}} {unit}<extra></extra>"})
        if count > GANTT_MARKS_SHOWN:
            note = f"{note} Its {count:,} {what}s are hidden until their legend entry is clicked.".strip()
    yaxis: dict = {"title": {"text": "job (in order of submission)" + (f", every {every}th" if every > 1 else "")},
                   "autorange": "reversed", "zeroline": False}
    if rows <= 40:
        yaxis.update(tickmode="array", tickvals=list(range(rows)),
                     ticktext=[html.escape(str(j)) for j in jobs.job_id[::every].tolist()])
    layout = {
        "height": height, "hovermode": "closest", "margin": {"l": 80, "r": 20, "t": 30, "b": 50},
        "xaxis": {"title": {"text": f"time ({unit})"}, "rangemode": "tozero"}, "yaxis": yaxis,
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"},
    }
    return {"bars": bars, "marks": marks, "layout": layout}, note


def summary_html(results: Sequence[SimResult]) -> str:
    """The summary table (one column a policy, the best of several marked) as an HTML table."""
    summaries = [r.summary for r in results]
    head = "".join(f"<th>{html.escape(policy_name(s, i))}</th>" for i, s in enumerate(summaries))
    lines = [f'<table class="summary"><thead><tr><th>metric</th>{head}</tr></thead><tbody>']
    for label, cells, best in summary_rows(summaries):
        row = "".join(f'<td class="best">{html.escape(c)}</td>' if top else f"<td>{html.escape(c)}</td>"
                      for c, top in zip(cells, best))
        lines.append(f"<tr><th>{html.escape(label)}</th>{row}</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _cdf_figure(results: Sequence[SimResult]) -> dict:
    data = []
    for i, r in enumerate(results):
        jct_h = r.jct_s[r.status == JobStatus.COMPLETED] / HOUR_S
        x, fraction = cdf_points(jct_h[jct_h > 0], CDF_POINTS)
        data.append({
            "type": "scatter", "mode": "lines", "name": r.policy, "line": {"shape": "hv", "width": 2,
                                                                          "color": POLICY_COLORS[i % len(POLICY_COLORS)]},
            "x": _numbers(x, 4, significant=True), "y": _numbers(fraction * 100.0, 3),
            "hovertemplate": f"{r.policy}: %{{y:.1f}}% of completed jobs within %{{x:.3g}} h<extra></extra>",
        })
    layout = {
        "height": 380, "hovermode": "closest", "margin": {"l": 60, "r": 20, "t": 20, "b": 50},
        "xaxis": {"title": {"text": "job completion time (hours, log scale)"}, "type": "log"},
        "yaxis": {"title": {"text": "completed jobs (%)"}, "range": [0, 101]},
        "legend": {"x": 0.99, "xanchor": "right", "y": 0.02, "yanchor": "bottom"},
    }
    return {"data": data, "layout": layout}


def _utilization_figure(results: Sequence[SimResult], scale: float, places: int, colors: dict[str, str],
                        axis: dict) -> dict:
    """Utilization (%) of each GPU type over time, one panel a replay stacked on a shared time axis."""
    data, layout = [], {"hovermode": "x unified", "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
                        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"}, "annotations": []}
    panels = len(results)
    gap = 0.08 if panels > 1 else 0.0
    height = (1.0 - gap * (panels - 1)) / max(panels, 1)
    seen: set[str] = set()
    for i, r in enumerate(results):
        suffix = "" if i == 0 else str(i + 1)
        times = r.timeline[:, 0]
        capacity = r.cluster.capacity.astype(np.float64)
        if r.rented is not None:  # a rented cluster's GPUs are those it held: what it held against its peak
            names = ["rented GPUs (% of the peak)"]
            busy = (r.timeline[:, 1] / max(float(r.timeline[:, 1].max(initial=0.0)), 1.0) * 100.0)[:, None]
        elif r.holdings is not None and len(r.holdings.busy_by_type) == len(times):
            names = list(r.cluster.gpu_types)
            busy = r.holdings.busy_by_type / np.maximum(capacity, 1.0)[None, :] * 100.0
        else:  # no per-type record: the whole cluster
            names = ["all GPUs"]
            busy = (r.timeline[:, 1] / max(r.cluster.num_gpus, 1) * 100.0)[:, None]
        edges, means = step_means(times, busy, end_s(r), TIMELINE_BINS)
        for t, name in enumerate(names):
            data.append({
                "type": "scatter", "mode": "lines", "name": name, "legendgroup": name,
                "showlegend": name not in seen, "line": {"shape": "hv", "width": 1.5, "color": colors.get(name, "#333")},
                "x": _numbers(edges / scale, places), "y": _numbers(_stairs(means[:, t] if len(means) else means), 2),
                "xaxis": "x", "yaxis": f"y{suffix}",
                "hovertemplate": f"{r.policy}, {name}: %{{y:.1f}}%<extra></extra>",
            })
            seen.add(name)
        top = 1.0 - i * (height + gap)
        layout[f"yaxis{suffix}"] = {"domain": [max(0.0, top - height), top], "range": [0, 105],
                                    "title": {"text": "busy (%)"}}
        if panels > 1:
            layout["annotations"].append({"text": f"<b>{html.escape(r.policy)}</b>", "showarrow": False,
                                          "xref": "paper", "yref": "paper", "x": 1, "xanchor": "right", "y": top,
                                          "yanchor": "bottom", "font": {"size": 12}})
    layout["xaxis"] = {**axis, "anchor": f"y{'' if panels <= 1 else panels}"}
    layout["height"] = 120 + 220 * panels
    return {"data": data, "layout": layout}


def _queue_figure(results: Sequence[SimResult], scale: float, places: int, axis: dict) -> dict:
    """Jobs waiting (solid) and running (dotted) over time, one colour a replay."""
    data = []
    for i, r in enumerate(results):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        edges, counts = step_means(r.timeline[:, 0], r.timeline[:, 2:4], end_s(r), TIMELINE_BINS)
        x = _numbers(edges / scale, places)
        for column, what, dash in ((1, "queued", "solid"), (0, "running", "dot")):
            values = counts[:, column] if len(counts) else counts
            data.append({
                "type": "scatter", "mode": "lines", "name": f"{r.policy}: {what}" if len(results) > 1 else what,
                "line": {"shape": "hv", "width": 1.5, "color": color, "dash": dash},
                "x": x, "y": _numbers(_stairs(values), 2),
                "hovertemplate": f"{r.policy}, {what}: %{{y:.1f}} jobs<extra></extra>",
            })
    layout = {"height": 340, "hovermode": "x unified", "margin": {"l": 60, "r": 20, "t": 20, "b": 50},
              "xaxis": axis, "yaxis": {"title": {"text": "jobs"}, "rangemode": "tozero"},
              "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"}}
    return {"data": data, "layout": layout}


PRIVACY_BLOCKS_SHOWN = 12  # blocks drawn per replay; the rest are in no chart


def _privacy_figure(results: Sequence[SimResult], scale: float, places: int, axis: dict) -> dict:
    """Each block's budget consumed over time, in % of its whole budget (the first blocks of each replay)."""
    data = []
    for i, r in enumerate(results):
        if r.privacy is None:
            continue
        history = r.privacy.history
        x = _numbers(np.append(history.time_s, end_s(r)) / scale, places)
        for b, name in enumerate(r.privacy.block_names[:PRIVACY_BLOCKS_SHOWN].tolist()):
            label = f"{r.policy}: {name}" if len(results) > 1 else str(name)
            data.append({
                "type": "scatter", "mode": "lines", "name": label,
                "line": {"shape": "hv", "width": 1.5, "dash": ("solid", "dot", "dash")[i % 3]},
                "x": x, "y": _numbers(_stairs(history.consumed[:, b] * 100.0), 2),
                "hovertemplate": f"{label}: %{{y:.1f}}% consumed<extra></extra>",
            })
    layout = {"height": 340, "hovermode": "x unified", "margin": {"l": 60, "r": 20, "t": 20, "b": 50},
              "xaxis": axis, "yaxis": {"title": {"text": "budget consumed (%)"}, "range": [0, 100]},
              "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"}}
    return {"data": data, "layout": layout}


def _privacy_section(figures: dict) -> str:
    if "privacy" not in figures:
        return ""
    return ('<section>\n    <h2>Privacy budget per block</h2>\n    <p class="note">The share of each block\'s budget '
            f'consumed by granted claims (the first {PRIVACY_BLOCKS_SHOWN} blocks of each replay; under Rényi '
            'accounting, at the order with the most left).</p>\n    <div id="privacy" class="plot"></div>\n  </section>')


def _stairs(values: np.ndarray) -> np.ndarray:
    """A stair's values on its edges for ``line.shape = "hv"``: the last value repeated at the end."""
    return np.append(values, values[-1:]) if len(values) else values


def _numbers(values: np.ndarray, places: int, significant: bool = False) -> list:
    """Rounded to ``places`` decimals (or significant digits), NaN as null: compact JSON numbers."""
    values = np.asarray(values, dtype=np.float64)
    if significant:
        with np.errstate(divide="ignore", invalid="ignore"):
            magnitude = np.floor(np.log10(np.abs(values)))
        factor = 10.0 ** (places - 1 - np.nan_to_num(magnitude, nan=0.0, neginf=0.0, posinf=0.0))
        values = np.round(values * factor) / factor
    else:
        values = np.round(values, places)
    out = values.tolist()
    if places == 0 and not significant:
        out = [int(v) if v == v else None for v in out]
    elif not np.isfinite(values).all():
        out = [v if v == v and abs(v) != math.inf else None for v in out]
    return out


def _title(results: Sequence[SimResult]) -> str:
    names = [r.policy for r in results]
    who = " vs ".join(names) if len(names) <= 4 else f"{len(names)} policies"
    clusters = " / ".join(dict.fromkeys(r.cluster.describe() for r in results))
    jobs = " / ".join(dict.fromkeys(f"{len(r.jobs):,}" for r in results))
    return f"{who} on {clusters}: {jobs} jobs"


def _subtitle(results: Sequence[SimResult]) -> str:
    if not results:
        return ""
    summary = results[0].summary
    workloads = " / ".join(dict.fromkeys(str(r.summary.get("workload", "")) for r in results if r.summary.get("workload")))
    setting = f"rounds of {summary.get('round_s', 0):g} s, restart cost {summary.get('restart_cost_s', 0):g} s"
    return f"{workloads}; {setting}" if workloads else setting


def _unschedulable_html(results: Sequence[SimResult]) -> str:
    """The jobs each replay could never run, with why (as the terminal prints them)."""
    blocks = []
    for r in results:
        lines = unschedulable_lines(r)
        if lines:
            items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines[1:])
            blocks.append(f'<p class="note">{html.escape(lines[0])}</p><ul class="note">{items}</ul>')
    return "\n".join(blocks)


def _gantt_choice(results: Sequence[SimResult]) -> str:
    """A selector of whose Gantt chart to show, when there are several."""
    if len(results) <= 1:
        return ""
    options = "".join(f'<option value="{i}">{html.escape(r.policy)}</option>' for i, r in enumerate(results))
    return f'<label>policy <select id="gantt-policy">{options}</select></label>'


def _pack(text: str) -> str:
    """``text`` gzip-compressed, in base64: what the page unpacks (no character in it can end a script)."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


@lru_cache(maxsize=1)
def _plotly_packed() -> str:
    """plotly.js as the plotly package bundles it, packed once per process."""
    source = resources.files("plotly").joinpath("package_data", "plotly.min.js").read_text(encoding="utf-8")
    return _pack(source)


def _asset(name: str) -> str:
    return resources.files("apportion.report").joinpath("assets", name).read_text(encoding="utf-8")
