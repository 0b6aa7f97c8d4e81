"""Which public trace a file is, told by its content, and what the readers of those traces share.

Each public trace has a reader of its own (``helios_trace``, ``pai_trace``, ``alibaba_gpu_2023``,
``philly_job_log``, ``philly_source``); each turns its file into the common schema's columns
(strings, as ``trace_csv`` reads them), rows sorted by submit time, with the file line of each
row and what it left out (CPU-only jobs, jobs that never ran) counted by reason.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from apportion.core.errors import InputError
from apportion.core.limits import MAX_GPUS

# the name --trace-format takes -> what it is
FORMATS = {
    "apportion": "apportion's own CSV (job_id, submit_time_s, duration_s, num_gpus, ...)",
    "philly": "the Philly trace's job-level extract (timestamp, duration, num_gpus, gpu_time, cluster)",
    "philly-log": "the Philly trace's raw cluster_job_log (JSON, jobs with their attempts)",
    "helios": "SenseTime's Helios cluster_log.csv (job_id, user, vc, gpu_num, ..., submit_time, duration)",
    "pai": "Alibaba PAI 2020: pai_job_table.csv with pai_task_table.csv beside it (no header rows)",
    "alibaba-2023": "Alibaba's 2023 GPU trace, openb_pod_list*.csv (name, cpu_milli, ..., gpu_milli, ...)",
}


@dataclass
class CommonRows:
    """A public trace in the common schema: string columns, each row's line in its file, the file's
    own name of each column read under another, and how many jobs were left out, by reason."""

    columns: dict[str, np.ndarray]
    lines: np.ndarray
    renamed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trace_format: str = "apportion"  # which of FORMATS the file was read as


def check_format(name: str | None, source: str) -> None:
    """Refuse a trace format that is not one of FORMATS."""
    if name is not None and name not in FORMATS:
        raise InputError(source, f"unknown trace format '{name}' (known: {', '.join(FORMATS)})")


def format_of_header(header: list[str]) -> str:
    """The format a CSV file's first row says it is (the PAI tables have no header: their first row is data)."""
    from apportion.workloads.philly_source import is_philly_source

    names = set(header)
    if {"gpu_num", "submit_time", "duration", "vc"} <= names:
        return "helios"
    if {"num_gpu", "gpu_milli", "creation_time"} <= names:
        return "alibaba-2023"
    if is_philly_source(header):
        return "philly"
    if len(header) in (6, 10) and header[3] in PAI_STATUSES and "job_id" not in names:
        return "pai"
    return "apportion"


PAI_STATUSES = ("Terminated", "Failed", "Running", "Waiting")


def seconds_of_times(text: np.ndarray, lines: np.ndarray, source: str, field: str,
                     example: str = "2020-06-09 18:41:01") -> np.ndarray:
    """Wall-clock times like ``2020-06-09 18:41:01`` as float seconds since 1970; an unreadable one
    is an InputError naming its line and field."""
    try:
        times = text.astype("datetime64[s]")
    except ValueError:
        times = None
    if times is None or np.isnat(times).any():
        for row, value in enumerate(text.tolist()):
            try:
                if not np.isnat(np.datetime64(value, "s")):
                    continue
            except ValueError:
                pass
            raise InputError(source, f"{value!r} is not a time like {example}", line=int(lines[row]), field=field)
    return times.astype(np.int64).astype(np.float64)


def numbers_of(text: np.ndarray, lines: np.ndarray, source: str, field: str, empty: float = np.nan) -> np.ndarray:
    """Float values of a column of strings (``empty`` where blank); an unreadable one names its line and field."""
    blank = text == ""
    out = np.full(len(text), empty, dtype=np.float64)
    try:
        out[~blank] = text[~blank].astype(np.float64)
    except ValueError:
        for row in np.flatnonzero(~blank).tolist():
            try:
                float(text[row])
            except ValueError:
                raise InputError(source, f"'{text[row]}' is not a number", line=int(lines[row]),
                                 field=field) from None
    bad = np.flatnonzero(~blank & ~np.isfinite(out))
    if len(bad):
        raise InputError(source, f"'{text[bad[0]]}' is not a finite number", line=int(lines[bad[0]]), field=field)
    return out


def common_rows(source: str, kept: np.ndarray, lines: np.ndarray, job_id: np.ndarray, submit_s: np.ndarray,
                duration_s: np.ndarray, num_gpus: np.ndarray, skipped: dict[str, int], renamed: dict[str, str],
                **strings: np.ndarray) -> CommonRows:
    """The kept rows (a boolean mask) in the common schema, sorted by submit time (ties in file order),
    submit times counted from the earliest kept job. ``strings`` are further columns, as strings or numbers."""
    rows = np.flatnonzero(kept)
    if len(rows) == 0:
        left = "; ".join(f"{count} {why}" for why, count in skipped.items() if count) or "no rows"
        raise InputError(source, f"no GPU jobs to read ({left})")
    too_many = np.flatnonzero(~(num_gpus[rows] <= MAX_GPUS))
    if len(too_many):
        row = rows[too_many[0]]
        raise InputError(source, f"{num_gpus[row]:g} GPUs is more than {MAX_GPUS:,}", line=int(lines[row]),
                         field=renamed.get("num_gpus", "num_gpus"))
    order = rows[np.argsort(submit_s[rows], kind="stable")]
    submit = submit_s[order] - submit_s[order].min()
    columns = {
        "job_id": job_id[order].astype(str).astype(object),
        "submit_time_s": _text(submit),
        "duration_s": _text(duration_s[order]),
        "num_gpus": num_gpus[order].astype(np.int64).astype(str).astype(object),
    }
    for name, values in strings.items():
        values = values[order]
        columns[name] = _text(values) if values.dtype.kind == "f" else values.astype(str).astype(object)
    return CommonRows(columns, lines[order], renamed, {why: n for why, n in skipped.items() if n})


def _text(values: np.ndarray) -> np.ndarray:
    """Numbers as the strings the CSV reader parses back exactly (shortest round-trip digits; empty for NaN)."""
    out = values.astype(np.float64).astype(str).astype(object)  # numpy's shortest round-trip digits
    out[np.isnan(values)] = ""
    return out


def refuse_where(bad: np.ndarray, text: np.ndarray, lines: np.ndarray, source: str, field: str, message: str) -> None:
    """InputError at the first row where ``bad``, naming its line and field (``{value}``: its text)."""
    rows = np.flatnonzero(bad)
    if len(rows):
        raise InputError(source, message.replace("{value}", str(text[rows[0]])), line=int(lines[rows[0]]),
                         field=field)


@contextmanager
def without_gc() -> Iterator[None]:
    """The cyclic collector off while millions of small rows are built (it would walk each new
    list again and again: most of the time a large file takes), and back as it was after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
