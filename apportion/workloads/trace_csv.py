"""Read a Philly-style job trace (CSV, plain or gzip) into a JobTable.

A trace says how long a job ran, not what it was: rows without a ``kind`` get one drawn at
random, and rows without ``steps`` get ``duration_s × steps/s`` on the reference GPU type
(see ``apportion.workloads.conversion`` and docs/workloads.md). A row may instead name a
``model``, ``global_batch`` and ``layout``; :func:`read_workload_with_models` gives each such job
a kind whose speeds come from the perf model (``apportion.workloads.model_jobs``).
"""

from __future__ import annotations

import csv
import gc
import io
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.limits import MAX_DURATION_S, MAX_GPUS, MAX_STEPS, MAX_SUBMIT_TIME_S, describe_seconds
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.conversion import check_reference_type, draw_kinds, steps_for_durations
from apportion.workloads.cpu_speed_column import curves_of_column
from apportion.workloads.dependencies import after_of_column
from apportion.workloads.model_jobs import MODEL_COLUMNS, model_jobs_of_columns, model_kind_names, with_model_kinds
from apportion.workloads.philly_source import SOURCE_COLUMNS, SOURCE_NAMES, from_philly_source
from apportion.workloads.trace_formats import CommonRows, check_format, format_of_header
from apportion.workloads.text_file import read_text

REQUIRED_COLUMNS = ("job_id", "submit_time_s", "duration_s", "num_gpus")
OPTIONAL_COLUMNS = ("gpu_type", "user", "queue", "status", "kind", "steps", "priority", "deadline_s", "budget_usd",
                    "name", "after", "cpus", "memory_gib", "cpu_speed", "estimated_duration_s", *MODEL_COLUMNS)
NODE_RESOURCE_COLUMNS = ("cpus", "memory_gib")  # what a job needs beside its GPUs, over all of them
# any of these in the header makes every row an elastic job (apportion.workloads.elastic_trace)
ELASTIC_COLUMNS = ("min_gpus", "max_gpus", "batch_size", "target_examples")
ELASTIC_REQUIRED_COLUMNS = ("job_id", "submit_time_s", "kind", "num_gpus")


def read_workload_csv(
    path: str | Path,
    *,
    throughputs: ThroughputTable,
    reference_gpu_type: str = "v100",
    seed: int = 0,
    max_jobs: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    trace_format: str | None = None,
) -> JobTable:
    """Jobs of the trace at ``path``, sorted by submit time, kinds indexing ``throughputs.kinds``.

    Rows without ``kind`` get one drawn with ``numpy.random.default_rng(seed)`` (one draw per
    row of the file, in file order, so a job keeps its kind whatever window is cut), uniformly
    among the kinds with a finite positive steps/s on one reference GPU. Rows without ``steps``
    get ``duration_s × steps/s(kind, reference type, num_gpus)``, the rate at ``num_gpus`` from
    ``throughputs.at_scales``; where that is unknown, the one-GPU rate × ``num_gpus``. Rows with
    both ``kind`` and ``steps`` are taken as they are. ``deadline_s`` (optional) is how many
    seconds after its submission a job should finish (for ``min-cost --slo`` and a rented cluster's
    provisioning); ``budget_usd`` (optional) the dollars it may spend on rented instances; ``cpus`` and
    ``memory_gib`` (optional, empty = none) the CPU cores and GiB of memory it needs beside its GPUs,
    over all of them; ``cpu_speed`` (optional) its speed at a few CPU core counts per GPU
    (``workloads/cpu_speed_column.py``). ``after`` (optional) lists the ids of the jobs a job must see
    completed before it starts (``workloads/dependencies.py``). ``estimated_duration_s`` (optional, empty =
    none) is the job's own estimate of its ``duration_s`` (wall seconds at its GPU count: a user's guess, a
    time limit, an external estimator's output), turned into steps as the duration is; the duration
    predictor takes it as its most specific information (``core/durations.py``). ``start_s``/``end_s`` keep jobs submitted in
    [start_s, end_s) and shift them so the first kept job is at 0; then ``max_jobs`` keeps the
    first N by submit time; a dependency on a job cut out is dropped. A public trace (Helios, Alibaba
    PAI 2020 or 2023, Philly's job log or extract) is read as it ships, told by its content or named
    by ``trace_format`` (``read_trace_rows``). Bad input raises InputError naming the file, line and column.
    """
    source = str(path)
    _check_settings(source, throughputs, reference_gpu_type, max_jobs, start_s, end_s)
    columns, lines, renamed = _read_columns(source, trace_format)
    with _named_as_in_the_file(renamed):
        return _jobs(source, columns, lines, throughputs, throughputs, reference_gpu_type, seed, max_jobs, start_s,
                     end_s)


def read_workload_with_models(
    path: str | Path,
    *,
    throughputs: ThroughputTable,
    reference_gpu_type: str = "v100",
    seed: int = 0,
    max_jobs: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    trace_format: str | None = None,
) -> tuple[JobTable, ThroughputTable]:
    """As :func:`read_workload_csv`, and a row that names a ``model`` (with ``global_batch`` and
    ``layout``) instead of a ``kind`` gets a kind of its own, added to the throughputs with its
    steps/s on every GPU type from the perf model. Returns the jobs and the table they index.
    Rows with neither draw among ``throughputs``' own kinds."""
    source = str(path)
    _check_settings(source, throughputs, reference_gpu_type, max_jobs, start_s, end_s)
    columns, lines, renamed = _read_columns(source, trace_format)
    with _named_as_in_the_file(renamed):
        extended = with_model_kinds(throughputs, model_jobs_of_columns(columns, lines, source))
        own = len(throughputs.kinds)
        drawable = ThroughputTable(extended.kinds[:own], extended.gpu_types, extended.scales,
                                   extended.steps_per_s[:own])
        jobs = _jobs(source, columns, lines, extended, drawable, reference_gpu_type, seed, max_jobs, start_s, end_s)
    return jobs, extended


@contextmanager
def _named_as_in_the_file(renamed: dict[str, str]) -> Iterator[None]:
    """An error about a column read under another name names the file's own column."""
    try:
        yield
    except InputError as err:
        if err.field not in renamed:
            raise
        raise InputError(err.source, err.message, line=err.line, field=renamed[err.field]) from None


def _check_settings(source: str, throughputs: ThroughputTable, reference_gpu_type: str, max_jobs: int | None,
                    start_s: float | None, end_s: float | None) -> None:
    check_reference_type(throughputs, reference_gpu_type, source)
    if max_jobs is not None and max_jobs < 1:
        raise InputError(source, f"max_jobs must be at least 1, got {max_jobs}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise InputError(source, f"empty time window: end {end_s} s is not after start {start_s} s")


def _jobs(source: str, columns: dict[str, np.ndarray], lines: np.ndarray, throughputs: ThroughputTable,
          drawable: ThroughputTable, reference_gpu_type: str, seed: int, max_jobs: int | None,
          start_s: float | None, end_s: float | None) -> JobTable:
    table = _parse_columns(columns, lines, throughputs, source)
    n = len(lines)
    elastic = table.get("elastic")

    kind = table["kind"] if elastic is None else elastic["kind"]
    missing_kind = kind < 0
    if missing_kind.any() and elastic is None:
        drawn = draw_kinds(drawable, reference_gpu_type, table["num_gpus"], np.random.default_rng(seed), source)
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
    if elastic is not None:
        from apportion.workloads.elastic_trace import elastic_table

        return elastic_table(elastic, rows, table["job_id"][rows], submit[rows] - shift, table["priority"][rows],
                             table["user"][rows], table["queue"][rows])

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

    estimated_steps = None
    if "estimated_duration_s" in table:
        estimated = table["estimated_duration_s"][rows]
        given = np.flatnonzero(~np.isnan(estimated))
        estimated_steps = np.full(len(rows), np.nan)
        # converted as the duration is (its steps at the reference type), so an exact estimate is exact
        estimated_steps[given] = steps_for_durations(throughputs, reference_gpu_type, kind[rows][given],
                                                     table["num_gpus"][rows][given], estimated[given], source)

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
        budget_usd=table["budget_usd"][rows] if "budget_usd" in table else None,
        name=table["name"][rows] if "name" in table else None,
        after=table["after"].take(rows) if "after" in table else None,
        cpu_curves=table["cpu_curves"].take(rows) if table.get("cpu_curves") is not None else None,
        estimated_steps=estimated_steps,
        **{column: table[column][rows] for column in NODE_RESOURCE_COLUMNS if column in table},
    )


def read_trace_rows(path: str | Path, trace_format: str | None = None) -> CommonRows:
    """The rows of a trace file in the common schema, whichever public trace it is (told by its
    content, or named by ``trace_format``: one of ``trace_formats.FORMATS``), as strings, with each
    row's line in its file and the jobs left out; the values are checked when parsed."""
    source = str(path)
    check_format(trace_format, source)
    text = read_text(source)
    if trace_format == "philly-log" or (trace_format is None and text.lstrip()[:1] in ("[", "{")):
        from apportion.workloads.philly_job_log import read_philly_job_log

        rows = read_philly_job_log(source, text)
        rows.trace_format = "philly-log"
        return rows

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
    kind = trace_format or format_of_header(header)
    if kind == "pai":
        from apportion.workloads.pai_trace import read_pai_tables

        rows = read_pai_tables(source, records)
        rows.trace_format = "pai"
        return rows
    for name in header:
        if header.count(name) > 1:
            raise InputError(source, "column appears twice in the header", line=1, field=name)
    elastic = kind == "apportion" and any(name in header for name in ELASTIC_COLUMNS)
    for name in ELASTIC_REQUIRED_COLUMNS if elastic else (REQUIRED_COLUMNS if kind == "apportion" else ()):
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
    columns = {name: np.array(values[i], dtype=object) for i, name in enumerate(header)}
    if kind == "philly":
        for name in SOURCE_COLUMNS:
            if name not in columns:
                raise InputError(source, "missing required column of the Philly extract", line=1, field=name)
        converted, order = from_philly_source(columns, lines, source)
        return CommonRows(converted, order, SOURCE_NAMES, trace_format=kind)
    if kind == "helios":
        from apportion.workloads.helios_trace import from_helios

        rows = from_helios(columns, lines, source)
    elif kind == "alibaba-2023":
        from apportion.workloads.alibaba_gpu_2023 import from_pod_list

        rows = from_pod_list(columns, lines, source)
    else:
        return CommonRows(columns, lines)
    rows.trace_format = kind
    return rows


def _read_columns(source: str, trace_format: str | None = None) -> tuple[dict[str, np.ndarray], np.ndarray,
                                                                          dict[str, str]]:
    """Header name -> column of strings (blank lines dropped), each row's 1-based file line, and the
    file's own name of each column read under another (a public trace: trace_formats.py)."""
    rows = read_trace_rows(source, trace_format)
    return rows.columns, rows.lines, rows.renamed


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
    if any(name in columns for name in ELASTIC_COLUMNS):  # an elastic trace: its own columns, no duration
        if "after" in columns:
            raise InputError(source, "elastic jobs cannot wait for others (yet): leave the column out", line=1,
                             field="after")
        from apportion.workloads.elastic_trace import elastic_jobs_from_columns

        if "estimated_duration_s" in columns:
            raise InputError(source, "elastic jobs take no duration estimate (yet): leave the column out", line=1,
                             field="estimated_duration_s")
        for name in (*NODE_RESOURCE_COLUMNS, "cpu_speed"):
            if name in columns:
                raise InputError(source, "elastic jobs cannot ask for CPU cores or memory, nor depend on them (yet): "
                                         "leave the column out",
                                 line=1, field=name)

        priority = np.ones(n)
        if "priority" in columns:
            given = numbers("priority", optional=True)
            fail(given <= 0, "priority", "must be > 0, got '{value}'")
            priority = np.where(np.isnan(given), 1.0, given)
        return {
            "job_id": job_id, "submit_time_s": submit, "priority": priority,
            "user": columns.get("user", np.full(n, "", dtype=object)),
            "queue": columns.get("queue", np.full(n, "", dtype=object)),
            "elastic": elastic_jobs_from_columns(columns, lines, source, numbers=numbers),
        }
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
    budget = np.full(n, np.nan)
    if "budget_usd" in columns:
        budget = numbers("budget_usd", optional=True)
        fail(budget <= 0, "budget_usd", "must be > 0 dollars, got '{value}'")
    priority = np.ones(n)
    if "priority" in columns:
        given = numbers("priority", optional=True)
        fail(given <= 0, "priority", "must be > 0, got '{value}'")
        priority = np.where(np.isnan(given), 1.0, given)
    estimates = {}
    if "estimated_duration_s" in columns:
        estimated = numbers("estimated_duration_s", optional=True)
        fail((estimated <= 0) | (estimated > MAX_DURATION_S), "estimated_duration_s",
             f"must be > 0 and at most {describe_seconds(MAX_DURATION_S)} (empty: no estimate), got '{{value}}'")
        estimates["estimated_duration_s"] = estimated

    resources = {}
    for name in NODE_RESOURCE_COLUMNS:
        if name in columns:
            asked = numbers(name, optional=True)
            fail(asked < 0, name, "must be a number >= 0, got '{value}'")
            resources[name] = np.nan_to_num(asked, nan=0.0)

    kind = np.full(n, -1, dtype=np.int64)
    if "kind" in columns:
        names, inverse = np.unique(columns["kind"].astype(str), return_inverse=True)
        index = {k: i for i, k in enumerate(throughputs.kinds)}
        codes = np.array([index.get(str(k), -2) if k != "" else -1 for k in names], dtype=np.int64)
        kind = codes[inverse.reshape(-1)] if len(names) else kind
        fail(kind == -2, "kind", "unknown job kind '{value}' (known: " + ", ".join(throughputs.kinds) + ")")
    if "model" in columns:
        model_jobs_of_columns(columns, lines, source)  # a bad model, batch or layout named before its kind
        names = model_kind_names(columns)
        index = {k: i for i, k in enumerate(throughputs.kinds)}
        named = names != ""
        codes = np.array([index.get(name, -2) for name in names[named].tolist()], dtype=np.int64)
        model_kind = np.full(n, -1, dtype=np.int64)
        model_kind[named] = codes
        fail(model_kind == -2, "model", "model '{value}' has no throughputs: read the trace with "
                                        "read_workload_with_models, which predicts them")
        kind = np.where(named, model_kind, kind)

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
        "budget_usd": budget,
        "kind": kind,
        "user": strings("user"),
        "queue": strings("queue"),
        **({"name": columns["name"]} if "name" in columns else {}),
        **({"after": after_of_column(columns["after"], job_id, lines, source)} if "after" in columns else {}),
        **({"cpu_curves": curves_of_column(columns["cpu_speed"], lines, source)} if "cpu_speed" in columns else {}),
        **resources,
        **estimates,
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
