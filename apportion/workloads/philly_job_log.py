"""The Philly trace's raw ``cluster_job_log`` (msr-fiddle/philly-traces) read as it ships: a JSON list of jobs.

Each job is ``{"status", "vc", "jobid", "attempts": [{"start_time", "end_time", "detail": [{"ip", "gpus"}]}],
"submitted_time", "user"}``. ``jobid`` is ``job_id``, ``submitted_time`` counts from the earliest job
kept, ``vc`` is ``queue``, ``status`` (Pass, Killed, Failed) becomes completed, killed, failed. A job's
``num_gpus`` is the most GPUs any of its attempts held (the GPUs listed in its ``detail``), its
``duration_s`` the time its attempts ran, summed (the gaps between attempts are waiting, which a
simulation recomputes). Jobs with no attempt that both started and ended (never scheduled, still
running when the log was taken, or a lost log entry) and jobs that held no GPU are left out, counted.
"""

from __future__ import annotations

import json

import numpy as np

from apportion.core.errors import InputError
from apportion.workloads.trace_formats import CommonRows, common_rows, seconds_of_times, without_gc

STATUSES = {"Pass": "completed", "Killed": "killed", "Failed": "failed"}
RENAMED = {"job_id": "jobid", "submit_time_s": "submitted_time", "duration_s": "attempts", "num_gpus": "attempts",
           "queue": "vc"}


def read_philly_job_log(source: str, text: str) -> CommonRows:
    """The jobs of a ``cluster_job_log`` in the common schema; each job's line is where its entry starts."""
    with without_gc():
        return _read(source, text)


def _read(source: str, text: str) -> CommonRows:
    entries, starts = _entries(source, text)
    ids, submitted, gpus, ran, users, queues, statuses = [], [], [], [], [], [], []
    left_out = {"jobs with no attempt that started and ended": 0, "jobs that held no GPU": 0}
    for i, job in enumerate(entries):
        line = int(starts[i])
        if not isinstance(job, dict):
            raise InputError(source, f"job {i + 1} is not an object", line=line)
        attempts = job.get("attempts") or []
        if not isinstance(attempts, list):
            raise InputError(source, "must be a list", line=line, field="attempts")
        most, seconds, complete = 0, 0.0, False
        for attempt in attempts:
            if not isinstance(attempt, dict):
                raise InputError(source, "each attempt must be an object", line=line, field="attempts")
            detail = attempt.get("detail")
            held = sum(len(node["gpus"]) for node in (detail if isinstance(detail, list) else [])
                       if isinstance(node, dict) and isinstance(node.get("gpus"), list))
            most = max(most, held)
            begin, end = attempt.get("start_time"), attempt.get("end_time")
            if _is_time(begin) and _is_time(end):
                span = _seconds(source, line, "start_time", begin, end)
                seconds += span
                complete = True
        if not complete:
            left_out["jobs with no attempt that started and ended"] += 1
            continue
        if most == 0:
            left_out["jobs that held no GPU"] += 1
            continue
        ids.append(str(job.get("jobid") or f"philly-job-{i + 1}"))
        submitted.append(str(job.get("submitted_time") or ""))
        gpus.append(most)
        ran.append(seconds)
        users.append(str(job.get("user") or ""))
        queues.append(str(job.get("vc") or ""))
        statuses.append(STATUSES.get(str(job.get("status")), str(job.get("status") or "").lower()))
        starts[len(ids) - 1] = line
    lines = starts[:len(ids)]
    submit = seconds_of_times(np.array(submitted, dtype=object), lines, source, "submitted_time",
                              example="2017-10-07 01:11:39")
    return common_rows(source, np.ones(len(ids), dtype=bool), lines, np.array(ids, dtype=object), submit,
                       np.array(ran), np.array(gpus), left_out, RENAMED, user=np.array(users, dtype=object),
                       queue=np.array(queues, dtype=object), status=np.array(statuses, dtype=object))


def _is_time(value: object) -> bool:
    return isinstance(value, str) and value not in ("", "None")


def _seconds(source: str, line: int, field: str, begin: str, end: str) -> float:
    """Seconds from ``begin`` to ``end``; InputError naming the job's line where either is unreadable or reversed."""
    try:
        span = (np.datetime64(end, "s") - np.datetime64(begin, "s")).astype(np.int64)
    except ValueError:
        raise InputError(source, f"'{begin}' to '{end}' is not a pair of times like 2017-10-07 01:11:39",
                         line=line, field=field) from None
    if span < 0:
        raise InputError(source, f"an attempt ends ('{end}') before it starts ('{begin}')", line=line,
                         field="end_time")
    return float(span)


def _entries(source: str, text: str) -> tuple[list, np.ndarray]:
    """The top-level entries of a JSON list, decoded one by one, and the line each starts on."""
    decoder = json.JSONDecoder()
    entries, lines = [], []
    line, seen = 1, 0

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    at = skip(0)
    if not text.startswith("[", at):
        raise InputError(source, "a Philly cluster_job_log is a JSON list of jobs", line=1)
    at = skip(at + 1)
    try:
        while not text.startswith("]", at):
            line += text.count("\n", seen, at)
            seen = at
            lines.append(line)
            entry, at = decoder.raw_decode(text, at)
            entries.append(entry)
            at = skip(at)
            if text.startswith(",", at):
                at = skip(at + 1)
            elif not text.startswith("]", at):
                raise json.JSONDecodeError("expected ',' or ']' after a job", text, at)
    except json.JSONDecodeError as err:
        raise InputError(source, f"not JSON: {err.msg}", line=err.lineno) from None
    except RecursionError:
        raise InputError(source, "not JSON a job log has: nested too deeply", line=line) from None
    return entries, np.array(lines, dtype=np.int64)
