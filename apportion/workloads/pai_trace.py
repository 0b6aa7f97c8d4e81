"""Alibaba PAI's 2020 GPU trace (``pai_job_table.csv`` with ``pai_task_table.csv``) read as it ships.

Neither file has a header row (alibaba/clusterdata, cluster-trace-gpu-v2020, gives the columns in
``*.header`` files): the job table is ``job_name,inst_id,user,status,start_time,end_time`` and the
task table ``job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type``.
Either may be named; the other is looked for beside it (``job`` <-> ``task`` in the file name). The
task table is needed (GPUs are there); the job table adds users and submit times.

A job is a ``job_name``: its GPUs are the sum over its tasks of ``inst_num × plan_gpu / 100``, rounded
up to whole GPUs (apportion gives whole GPUs; a job asking 0.5 holds one); its ``gpu_type`` is that of
its task asking the most GPUs (``MISC`` = older generations); its submit time is the job table's
``start_time`` (the submission), else its first task's start; its duration from its first task's start
to its last task's end; ``cpus`` is ``Σ inst_num × plan_cpu / 100``, ``memory_gib`` ``Σ inst_num × plan_mem``.
Jobs with no GPU, and jobs whose tasks never started or never ended, are left out, counted.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np

from apportion.core.errors import InputError
from apportion.workloads.text_file import read_text
from apportion.workloads.trace_formats import CommonRows, common_rows, numbers_of, refuse_where, without_gc

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
                "plan_gpu", "gpu_type")
STATUSES = {"Terminated": "completed", "Failed": "failed", "Running": "running", "Waiting": "waiting"}


def read_pai_tables(source: str, records: list[list[str]]) -> CommonRows:
    """The GPU jobs of the PAI trace whose job or task table is ``source`` (already split into ``records``)."""
    with without_gc():
        return _read(source, records)


def _read(source: str, records: list[list[str]]) -> CommonRows:
    width = next((len(r) for r in records if r), 0)
    if width == len(TASK_COLUMNS):
        task_source, task_records = source, records
        job_source = _beside(source, "task", "job")
        job_records = _records(job_source) if job_source and Path(job_source).exists() else None
    elif width == len(JOB_COLUMNS):
        job_source, job_records = source, records
        task_source = _beside(source, "job", "task")
        if task_source is None or not Path(task_source).exists():
            expected = task_source or "pai_task_table.csv beside it"
            raise InputError(source, f"a PAI job table needs its task table (GPUs are there): no {expected}")
        task_records = _records(task_source)
    else:
        raise InputError(source, f"has {width} fields: a PAI job table has {len(JOB_COLUMNS)}, a task table "
                                 f"{len(TASK_COLUMNS)}", line=1)
    tasks, task_lines = _columns(task_source, task_records, TASK_COLUMNS)
    jobs = _columns(job_source, job_records, JOB_COLUMNS) if job_records is not None else None
    return _jobs(task_source, tasks, task_lines, job_source, jobs)


def _beside(source: str, this: str, other: str) -> str | None:
    """The sibling table's path: the last ``this`` in the file name swapped for ``other``."""
    path = Path(source)
    matches = list(re.finditer(this, path.name))
    if not matches:
        return None
    at = matches[-1]
    return str(path.with_name(path.name[:at.start()] + other + path.name[at.end():]))


def _records(source: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(read_text(source), newline="")))


def _columns(source: str, records: list[list[str]], names: tuple[str, ...]) -> tuple[dict[str, np.ndarray],
                                                                                     np.ndarray]:
    """Named columns of a headerless table (blank lines dropped) and each row's line in its file."""
    widths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
    kept = np.flatnonzero(widths > 0)  # csv yields [] for a blank line
    if len(kept) == 0:
        raise InputError(source, "no rows")
    wrong = np.flatnonzero(widths[kept] != len(names))
    if len(wrong):
        row = int(kept[wrong[0]])
        raise InputError(source, f"has {widths[row]} fields, a PAI {'task' if len(names) == 10 else 'job'} "
                                 f"table has {len(names)} ({','.join(names)})", line=row + 1)
    rows = records if len(kept) == len(records) else [records[i] for i in kept.tolist()]
    values = list(zip(*rows))
    return {name: np.array(values[k], dtype=object) for k, name in enumerate(names)}, kept + 1


def _jobs(task_source: str, tasks: dict[str, np.ndarray], lines: np.ndarray, job_source: str | None,
          jobs: tuple[dict[str, np.ndarray], np.ndarray] | None) -> CommonRows:
    def number(name: str, empty: float = np.nan) -> np.ndarray:
        return numbers_of(tasks[name], lines, task_source, name, empty=empty)

    inst = number("inst_num", empty=1.0)
    plan_gpu = number("plan_gpu", empty=0.0)
    refuse_where(inst < 0, tasks["inst_num"], lines, task_source, "inst_num", "must be >= 0, got '{value}'")
    refuse_where(plan_gpu < 0, tasks["plan_gpu"], lines, task_source, "plan_gpu", "must be >= 0, got '{value}'")
    start, end = number("start_time"), number("end_time")
    cpus = inst * number("plan_cpu", empty=0.0) / 100
    memory = inst * number("plan_mem", empty=0.0)
    task_gpus = inst * plan_gpu / 100

    names, job_of = np.unique(tasks["job_name"].astype(str), return_inverse=True)
    n = len(names)
    gpus = np.bincount(job_of, weights=task_gpus, minlength=n)
    first = np.full(n, np.inf)
    np.minimum.at(first, job_of, np.where(np.isnan(start), np.inf, start))
    last = np.full(n, -np.inf)
    np.maximum.at(last, job_of, np.where(np.isnan(end), -np.inf, end))
    unstarted = np.zeros(n, dtype=bool)
    np.logical_or.at(unstarted, job_of, np.isnan(start) | np.isnan(end))
    # each job's first line and its largest task (by GPUs, first in the file on a tie)
    by_share = np.lexsort((np.arange(len(job_of)), -task_gpus, job_of))
    biggest = by_share[np.r_[0, np.flatnonzero(np.diff(job_of[by_share])) + 1]]
    job_line = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(job_line, job_of, lines)
    refuse_where(~unstarted & (last < first), tasks["end_time"][biggest], job_line, task_source, "end_time",
                 "'{value}' is before the job's first task started")

    submit = np.where(np.isfinite(first), first, np.nan)
    user = np.full(n, "", dtype=object)
    status = np.array([STATUSES.get(s, s.lower()) for s in tasks["status"][biggest].tolist()], dtype=object)
    if jobs is not None:
        columns, job_lines = jobs
        at = np.searchsorted(names, columns["job_name"].astype(str))
        known = (at < n) & (names[np.minimum(at, n - 1)] == columns["job_name"].astype(str))
        submitted = numbers_of(columns["start_time"], job_lines, job_source, "start_time")
        submit[at[known]] = np.where(np.isnan(submitted[known]), submit[at[known]], submitted[known])
        user[at[known]] = columns["user"][known]
        status[at[known]] = [STATUSES.get(s, s.lower()) for s in columns["status"][known].tolist()]
    no_gpu = gpus <= 0
    never_ran = ~no_gpu & (unstarted | ~(last > first) | np.isnan(submit))
    kept = ~no_gpu & ~never_ran
    rows = common_rows(task_source, kept, job_line, names, submit, last - first, np.ceil(gpus - 1e-9),
                       {"jobs asking no GPU": int(no_gpu.sum()),
                        "jobs whose tasks never started or never ended": int(never_ran.sum())},
                       {"num_gpus": "plan_gpu", "duration_s": "end_time", "submit_time_s": "start_time"},
                       gpu_type=tasks["gpu_type"][biggest], user=user, status=status,
                       cpus=np.bincount(job_of, weights=cpus, minlength=n),
                       memory_gib=np.bincount(job_of, weights=memory, minlength=n))
    fractional = kept & (np.abs(gpus - np.round(gpus)) > 1e-9)
    if fractional.any():
        rows.notes.append(f"{int(fractional.sum())} jobs asked for part of a GPU (plan_gpu not a multiple of 100); "
                          "each is read as its GPUs rounded up to whole ones")
    if jobs is None:
        rows.notes.append("no pai_job_table beside the task table: no users, and each job's submit time is its "
                          "first task's start")
    return rows
