"""What a trace holds, for ``apportion trace info``: jobs, span, arrivals over time, GPU counts,
durations, GPU types asked for, and the load it would put on a cluster. Plain data (dicts of
numbers and lists), computed with numpy over the whole file at once."""

from __future__ import annotations

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.errors import InputError
from apportion.core.limits import MAX_DURATION_S, MAX_GPUS, MAX_SUBMIT_TIME_S, describe_seconds
from apportion.workloads.trace_formats import CommonRows, numbers_of, refuse_where

GPU_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, None))
DURATION_BUCKETS = (("under 1 min", 0, 60), ("1-10 min", 60, 600), ("10 min-1 h", 600, 3600),
                    ("1-10 h", 3600, 36000), ("10-100 h", 36000, 360000), ("100 h or more", 360000, None))
HOUR, DAY, WEEK = 3600, 86400, 7 * 86400


def summarize(rows: CommonRows, source: str, cluster: Cluster | None = None) -> dict:
    """The summary of a trace's rows (as ``trace_csv.read_trace_rows`` gives them); ``cluster`` adds its load."""
    columns, lines = rows.columns, rows.lines

    def number(name: str) -> np.ndarray:
        field = rows.renamed.get(name, name)
        try:
            return numbers_of(columns[name], lines, source, name)
        except InputError as err:
            raise InputError(source, err.message, line=err.line, field=field) from None

    for name in ("submit_time_s", "duration_s", "num_gpus"):
        if name not in columns:
            raise InputError(source, "missing required column", line=1, field=name)
    submit, duration, gpus = number("submit_time_s"), number("duration_s"), number("num_gpus")
    for name, values, bad, what in (
            ("submit_time_s", submit, ~((submit >= 0) & (submit <= MAX_SUBMIT_TIME_S)),
             f"must be from 0 to {describe_seconds(MAX_SUBMIT_TIME_S)}"),
            ("duration_s", duration, ~((duration > 0) & (duration <= MAX_DURATION_S)),
             f"must be > 0 and at most {describe_seconds(MAX_DURATION_S)}"),
            ("num_gpus", gpus, ~((gpus >= 1) & (gpus <= MAX_GPUS)) | (gpus != np.floor(gpus)),
             f"must be a whole number from 1 to {MAX_GPUS:,}")):
        refuse_where(bad, columns[name], lines, source, rows.renamed.get(name, name), f"{what}, got '{{value}}'")

    start = float(submit.min())
    span = float(submit.max()) - start
    gpu_seconds = gpus * duration
    summary = {
        "file": source,
        "format": rows.trace_format,
        "jobs": len(submit),
        "left_out": dict(rows.skipped),
        "notes": list(rows.notes),
        "span_s": span,
        "last_end_s": float((submit + duration).max()) - start,
        "arrivals": _arrivals(submit - start, span),
        "gpus": {
            "total_gpu_hours": float(gpu_seconds.sum()) / HOUR,
            "mean": float(gpus.mean()),
            "max": int(gpus.max()),
            "histogram": [{"gpus": _gpu_label(low, high), "jobs": int(n), "gpu_hours": float(h)}
                          for (low, high), n, h in _gpu_buckets(gpus, gpu_seconds)],
        },
        "duration_s": {
            "median": float(np.median(duration)),
            "mean": float(duration.mean()),
            "p90": float(np.percentile(duration, 90)),
            "max": float(duration.max()),
            "histogram": [{"duration": label, "jobs": int(((duration >= low) & (duration < (high or np.inf))).sum())}
                          for label, low, high in DURATION_BUCKETS],
        },
        "gpu_types": _gpu_types(columns.get("gpu_type"), gpus, gpu_seconds),
    }
    if cluster is not None:
        summary["cluster"] = _load(cluster, gpus, gpu_seconds, span, summary["last_end_s"])
    return summary


def _arrivals(offsets: np.ndarray, span: float) -> dict:
    """Jobs submitted per bin (an hour, a day or a week, whichever gives at most ~200 bins) and the rates."""
    width = HOUR if span <= 8 * DAY else DAY if span <= 200 * DAY else WEEK
    counts = np.bincount((offsets // width).astype(np.int64))
    per_hour = counts * (HOUR / width)
    return {
        "bin_s": width,
        "per_bin": counts.tolist(),
        "mean_per_hour": float(len(offsets) / max(span / HOUR, 1.0)) if span > 0 else float(len(offsets)),
        "busiest_bin_per_hour": float(per_hour.max()),
        "quietest_bin_per_hour": float(per_hour.min()),
        "empty_bins": int((counts == 0).sum()),
    }


def _gpu_buckets(gpus: np.ndarray, gpu_seconds: np.ndarray):
    for low, high in GPU_BUCKETS:
        inside = (gpus >= low) & (gpus <= (high if high is not None else np.inf))
        if inside.any():
            yield (low, high), inside.sum(), gpu_seconds[inside].sum() / HOUR


def _gpu_label(low: int, high: int | None) -> str:
    return f"{low}+" if high is None else str(low) if low == high else f"{low}-{high}"


def _gpu_types(column: np.ndarray | None, gpus: np.ndarray, gpu_seconds: np.ndarray) -> list[dict]:
    """Jobs and GPU-hours by the GPU type each asked for or ran on ("" = not given), most jobs first."""
    if column is None:
        return [{"gpu_type": "", "jobs": len(gpus), "gpu_hours": float(gpu_seconds.sum()) / HOUR}]
    names, which = np.unique(column.astype(str), return_inverse=True)
    jobs = np.bincount(which, minlength=len(names))
    hours = np.bincount(which, weights=gpu_seconds, minlength=len(names)) / HOUR
    order = np.lexsort((names, -jobs))
    return [{"gpu_type": str(names[i]), "jobs": int(jobs[i]), "gpu_hours": float(hours[i])} for i in order]


def _load(cluster: Cluster, gpus: np.ndarray, gpu_seconds: np.ndarray, span: float, last_end: float) -> dict:
    """GPU-hours asked over GPU-hours the cluster has from the first submission to the last (to the
    last end where all arrive at once), and how many jobs ask for more GPUs than it has."""
    total = int(np.asarray(cluster.capacity).sum())
    window = span if span > 0 else last_end
    available = total * window / HOUR
    asked = float(gpu_seconds.sum()) / HOUR
    return {
        "gpus": total,
        "gpu_types": {t: int(c) for t, c in zip(cluster.gpu_types, np.asarray(cluster.capacity).tolist())},
        "window_s": window,
        "gpu_hours_available": available,
        "gpu_hours_asked": asked,
        "load": asked / available if available > 0 else None,
        "jobs_larger_than_cluster": int((gpus > total).sum()),
    }
