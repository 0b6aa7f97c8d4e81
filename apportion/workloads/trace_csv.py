"""Read a Philly-style job trace (CSV, plain or gzip) into a JobTable.

A trace says how long a job ran, not what it was: rows without a ``kind`` get one drawn at
random, and rows without ``steps`` get ``duration_s × steps/s`` on the reference GPU type
(see ``apportion.workloads.conversion`` and docs/workloads.md).
"""

from __future__ import annotations

import csv
import gc
import gzip
import io
import zlib
from pathlib import Path

import numpy as np

from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.limits import MAX_DURATION_S, MAX_GPUS, MAX_STEPS, MAX_SUBMIT_TIME_S, describe_seconds
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.conversion import check_reference_type, draw_kinds, steps_for_durations

REQUIRED_COLUMNS = ("job_id", "submit_time_s", "duration_s", "num_gpus")
OPTIONAL_COLUMNS = ("gpu_type", "user", "queue", "status", "kind", "steps", "priority", "deadline_s", "name")


def read_workload_csv(
    path: str | Path,
    *,
    throughputs: ThroughputTable,
    reference_gpu_type: str = "v100",
    seed: int = 0,
    max_jobs: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> JobTable:
    """Jobs of the trace at ``path``, sorted by submit time, kinds indexing ``throughputs.kinds``.

    Rows without ``kind`` get one drawn with ``numpy.random.default_rng(seed)`` (one draw per
    row of the file, in file order, so a job keeps its kind whatever window is cut), uniformly
    among the kinds with a finite positive steps/s on one reference GPU. Rows without ``steps``
    get ``duration_s × steps/s(kind, reference type, num_gpus)``, the rate at ``num_gpus`` from
    ``throughputs.at_scales``; where that is unknown, the one-GPU rate × ``num_gpus``. Rows with
    both ``kind`` and ``steps`` are taken as they are. ``deadline_s`` (optional) is how many
    seconds after its submission a job should finish (for ``min-cost --slo``). ``start_s``/``end_s`` keep jobs submitted
    in [start_s, end_s) and shift them so the first kept job is at 0; then ``max_jobs`` keeps
    the first N by submit time. Bad input raises InputError naming the file, line and column.
    """
    source = str(path)
    check_reference_type(throughputs, reference_gpu_type, source)
    if max_jobs is not None and max_jobs < 1:
        raise InputError(source, f"max_jobs must be at least 1, got {max_jobs}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise InputError(source, f"empty time window: end {end_s} s is not after start {start_s} s")

    columns, lines = _read_columns(source)
    table = _parse_columns(columns, lines, throughputs, source)
    n = len(lines)

    kind = table["kind"]
    missing_kind = kind < 0
    if missing_kind.any():
        drawn = draw_kinds(throughputs, reference_gpu_type, table["num_gpus"], np.random.default_rng(seed), source)
        kind[missing_kind] = drawn[missing_kind]

    submit = table["submit_time_s"]
    rows = np.argsort(submit, kind="stable")
    in_window = np.ones(n, dtype=bool)
    if start_s is not None:
        in_window &= submit[rows] >= start_s
    if end_s is not None:
        in_window &= submit[rows] < end_s
    rows = rows[in_window][:max_jobs]
    if len(rows) == 0:
        raise InputError(source, f"no jobs submitted in the window [{start_s}, {end_s}) s")
    shift = submit[rows[0]] if (start_s is not None or end_s is not None) else 0.0

    steps = table["steps"][rows]
    convert = np.isnan(steps)
    if convert.any():
        steps[convert] = steps_for_durations(
            throughputs,
            reference_gpu_type,
            kind[rows][convert],
            table["num_gpus"][rows][convert],
            table["duration_s"][rows][convert],
            source,
        )
        bad = np.flatnonzero(~(np.isfinite(steps) & (steps > 0)))
        if len(bad):
            row = rows[bad[0]]
            name = throughputs.kinds[kind[row]]
            raise InputError(
                source,
                f"kind '{name}' has no throughput on '{reference_gpu_type}', so its duration cannot "
                "become steps; give a 'steps' value or pick another reference GPU type",
                line=int(lines[row]),
                field="kind",
            )
        bad = np.flatnonzero(steps > MAX_STEPS)
        if len(bad):
            row = rows[bad[0]]
            raise InputError(
                source,
                f"{table['duration_s'][row]:g} s on '{reference_gpu_type}' is {steps[bad[0]]:.3g} steps, more than "
                f"{MAX_STEPS:,} (2**53); give a 'steps' value or a shorter duration",
                line=int(lines[row]),
                field="duration_s",
            )

    kind_names = np.asarray(throughputs.kinds, dtype=object)[kind[rows]]
    return JobTable.build(
        job_id=table["job_id"][rows],
        submit_time_s=submit[rows] - shift,
        kind_names=kind_names,
        num_gpus=table["num_gpus"][rows],
        total_steps=steps,
        priority=table["priority"][rows],
        user=table["user"][rows],
        queue=table["queue"][rows],
        kinds=throughputs.kinds,
        deadline_after_submit_s=table["deadline_s"][rows],
        name=table["name"][rows] if "name" in table else None,
    )


def _read_columns(source: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Header name -> column of strings (blank lines dropped), and each row's 1-based file line."""
    try:
        raw = Path(source).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "no such file") from None
    except OSError as err:
        raise InputError(source, f"cannot read: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(source, f"not a readable gzip file ({err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(source, f"not UTF-8 text (byte {err.start})") from None

    gc_was_on = gc.isenabled()
    gc.disable()  # the collector would walk every new row list; ~30% of the parse time
    try:
        records = list(csv.reader(io.StringIO(text, newline="")))
    finally:
        if gc_was_on:
            gc.enable()
    expected = ", ".join(REQUIRED_COLUMNS)
    if not records or not any(records[0]):
        raise InputError(source, f"empty file; expected a header row with {expected}", line=1)
    header = [name.strip() for name in records[0]]
    for name in header:
        if header.count(name) > 1:
            raise InputError(source, "column appears twice in the header", line=1, field=name)
    for name in REQUIRED_COLUMNS:
        if name not in header:
            raise InputError(
                source, f"missing required column (header has: {', '.join(header)})", line=1, field=name
            )

    body = records[1:]
    widths = np.fromiter(map(len, body), dtype=np.int64, count=len(body))
    kept = np.flatnonzero(widths > 0)  # csv yields [] for a blank line
    if len(kept) == 0:
        raise InputError(source, "no jobs: the file has a header but no rows")
    lines = kept + 2  # one record per line; the header is line 1
    wrong = np.flatnonzero(widths[kept] != len(header))
    if len(wrong):
        row = kept[wrong[0]]
        raise InputError(
            source, f"has {widths[row]} fields, the header has {len(header)}", line=int(row + 2)
        )
    if len(kept) < len(body):
        body = [body[i] for i in kept.tolist()]
    values = list(zip(*body))
    return {name: np.array(values[i], dtype=object) for i, name in enumerate(header)}, lines


def _parse_columns(
    columns: dict[str, np.ndarray], lines: np.ndarray, throughputs: ThroughputTable, source: str
) -> dict[str, np.ndarray]:
    """Typed, validated columns; ``kind`` is -1 and ``steps`` NaN where the file leaves them empty."""
    n = len(lines)

    def fail(bad: np.ndarray, field: str, message: str) -> None:
        rows = np.flatnonzero(bad)
        if len(rows):
            value = columns[field][rows[0]]
            raise InputError(source, message.replace("{value}", value), line=int(lines[rows[0]]), field=field)

    def numbers(field: str, optional: bool = False) -> np.ndarray:
        text = columns[field]
        present = text != "" if optional else np.ones(n, dtype=bool)
        out = np.full(n, np.nan)
        try:
            out[present] = text[present].astype(np.float64)
        except ValueError:  # error path only: find the first row float() rejects
            fail(present & ~_parses_as_float(text), field, "'{value}' is not a number")
            raise
        fail(present & ~np.isfinite(out), field, "'{value}' is not a finite number")
        return out

    job_id = columns["job_id"]
    fail(job_id == "", "job_id", "empty job id")
    if len(set(job_id.tolist())) < n:
        _, first = np.unique(job_id.astype(str), return_index=True)
        repeated = np.ones(n, dtype=bool)
        repeated[first] = False
        fail(repeated, "job_id", "job id '{value}' appears on an earlier line too")

    submit = numbers("submit_time_s")
    fail((submit < 0) | (submit > MAX_SUBMIT_TIME_S), "submit_time_s",
         f"must be from 0 to {describe_seconds(MAX_SUBMIT_TIME_S)}, got '{{value}}'")
    duration = numbers("duration_s")
    fail((duration <= 0) | (duration > MAX_DURATION_S), "duration_s",
         f"must be > 0 and at most {describe_seconds(MAX_DURATION_S)}, got '{{value}}'")
    gpus = numbers("num_gpus")
    fail((gpus < 1) | (gpus > MAX_GPUS) | (gpus != np.round(gpus)), "num_gpus",
         f"must be a whole number from 1 to {MAX_GPUS:,} (2**20), got '{{value}}'")

    steps = np.full(n, np.nan)
    if "steps" in columns:
        steps = numbers("steps", optional=True)
        fail((steps <= 0) | (steps > MAX_STEPS), "steps", f"must be > 0 and at most {MAX_STEPS:,} (2**53), got '{{value}}'")
    deadline = np.full(n, np.nan)
    if "deadline_s" in columns:
        deadline = numbers("deadline_s", optional=True)
        fail((deadline <= 0) | (deadline > MAX_DURATION_S), "deadline_s",
             f"must be > 0 and at most {describe_seconds(MAX_DURATION_S)} after submission, got '{{value}}'")
    priority = np.ones(n)
    if "priority" in columns:
        given = numbers("priority", optional=True)
        fail(given <= 0, "priority", "must be > 0, got '{value}'")
        priority = np.where(np.isnan(given), 1.0, given)

    kind = np.full(n, -1, dtype=np.int64)
    if "kind" in columns:
        names, inverse = np.unique(columns["kind"].astype(str), return_inverse=True)
        index = {k: i for i, k in enumerate(throughputs.kinds)}
        codes = np.array([index.get(str(k), -2) if k != "" else -1 for k in names], dtype=np.int64)
        kind = codes[inverse.reshape(-1)] if len(names) else kind
        fail(kind == -2, "kind", "unknown job kind '{value}' (known: " + ", ".join(throughputs.kinds) + ")")

    def strings(field: str) -> np.ndarray:
        return columns[field] if field in columns else np.full(n, "", dtype=object)

    return {
        "job_id": job_id,
        "submit_time_s": submit,
        "duration_s": duration,
        "num_gpus": gpus.astype(np.int64),
        "steps": steps,
        "priority": priority,
        "deadline_s": deadline,
        "kind": kind,
        "user": strings("user"),
        "queue": strings("queue"),
        **({"name": columns["name"]} if "name" in columns else {}),
    }


def _parses_as_float(text: np.ndarray) -> np.ndarray:
    """Which strings ``float()`` accepts; only run on the error path, to find the bad row."""
    def ok(value: str) -> bool:
        try:
            float(value)
        except ValueError:
            return False
        return True

    return np.fromiter(map(ok, text.tolist()), dtype=bool, count=len(text))
