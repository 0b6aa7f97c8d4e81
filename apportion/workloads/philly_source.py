"""The Philly trace as its public copy ships it: ``timestamp,duration,num_gpus,gpu_time,cluster``.

The job-level extract of the Microsoft Philly trace in the Pollux artifact
(``simulator/traces/philly.csv`` on the ``osdi21-artifact`` branch of petuum/adaptdl; CC BY 4.0,
Microsoft Research) has wall-clock submit times, no job ids and rows out of order. Read as it is,
it becomes the common schema: ``submit_time_s`` from the earliest timestamp, rows in a stable
sort by it, ids ``philly-000001``… in that order, ``queue`` from ``cluster`` (the virtual
cluster), ``gpu_time`` dropped. The result is row for row the trace the project's benchmarks use.
"""

from __future__ import annotations

import numpy as np

from apportion.core.errors import InputError

SOURCE_COLUMNS = ("timestamp", "duration", "num_gpus")
SOURCE_NAMES = {"submit_time_s": "timestamp", "duration_s": "duration", "queue": "cluster"}  # read as -> in the file


def is_philly_source(header: list[str]) -> bool:
    """Whether a CSV header is the public copy's (wall-clock timestamps, no job ids)."""
    return all(name in header for name in SOURCE_COLUMNS) and "submit_time_s" not in header and "job_id" not in header


def from_philly_source(columns: dict[str, np.ndarray], lines: np.ndarray,
                       source: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The common schema's columns, sorted by submit time, and each row's line in the file."""
    stamps = columns["timestamp"]
    try:
        times = stamps.astype("datetime64[s]")
    except ValueError:
        times = None
    if times is None or np.isnat(times).any():
        for row, text in enumerate(stamps):
            try:
                if not np.isnat(np.datetime64(text, "s")):
                    continue
            except ValueError:
                pass
            raise InputError(source, f"{text!r} is not a time like 2017-10-09 07:01:55", line=int(lines[row]),
                             field="timestamp")
    seconds = (times - times.min()).astype(np.int64)
    order = np.argsort(seconds, kind="stable")
    converted = {name: values[order] for name, values in columns.items()
                 if name not in ("timestamp", "duration", "gpu_time", "cluster")}
    converted["job_id"] = np.array([f"philly-{i:06d}" for i in range(1, len(order) + 1)], dtype=object)
    converted["submit_time_s"] = seconds[order].astype(str).astype(object)
    converted["duration_s"] = columns["duration"][order]
    if "cluster" in columns and "queue" not in columns:
        converted["queue"] = columns["cluster"][order]
    return converted, lines[order]
