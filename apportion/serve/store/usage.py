"""Accounting of a state file's jobs, as ``apportion history`` and ``GET /history`` show it.

Each job's GPU-hours by type come from the ``attempts`` table: each attempt holds its slots from
its start until its exit was settled (a live attempt: until now), so it counts slots × that time
on its slots' type. Its wait is its first start less its submission; its run time, the time its
attempts held slots. Filters choose jobs by user, queue, status and a time window; totals come
per user, GPU type or queue. Pure: columns in (``StateStore.accounting_columns``, read through
the store's read connections; ``untrusted_state.read_accounting`` for a file given to
``apportion history --state-dir``), arrays over the jobs chosen, the same answer for the server
and for a state file read directly. It opens no connection of its own.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

import numpy as np

from apportion.core.errors import InputError
from apportion.core.rows import row_sum
from apportion.serve.store.jobs import ACTIVE, STATUSES, TERMINAL

STATE_WORDS = {**{s: (s,) for s in STATUSES}, "finished": TERMINAL, "active": ACTIVE, "all": STATUSES}
GROUPINGS = ("user", "type", "queue")
TIME_FORMS = ("an age such as 90s, 30m, 2h, 3d or 1w (that long ago), a date 2026-11-27, a local time "
              "2026-11-27T10:00 or 2026-11-27T10:00:30, or Unix seconds")
MAX_FILTER = 4096  # characters of one filter's text in a request (comma-separated users, a time, ...)
NO_TYPE = "-"  # the group of jobs that never ran, in totals by type
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DATES = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Filters:
    """Which jobs: of these users and queues (empty: any), in these statuses, and whose time in
    the system (submitted until finished, or now) overlaps [since, until)."""

    users: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    states: tuple[str, ...] = TERMINAL
    since: float | None = None
    until: float | None = None


def parse_when(text: str, now: float, field: str, source: str = "request") -> float:
    """A moment as Unix seconds from one of ``TIME_FORMS`` (dates in local time); InputError naming
    ``field`` and the forms accepted otherwise."""
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age:
        return now - float(age.group(1)) * _UNITS[age.group(2)]
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and np.isfinite(number) and number >= 0:
        return number
    for form in _DATES:
        try:
            return datetime.strptime(text, form).timestamp()
        except (ValueError, OverflowError, OSError):
            continue
    raise InputError(source, f"{_clip(text)!r} is not a time: give {TIME_FORMS}", field=field)


def parse_filters(*, user: str | None = None, queue: str | None = None, state: str | None = None,
                  since: str | None = None, until: str | None = None, now: float | None = None,
                  source: str = "request") -> Filters:
    """Filters from their text: comma-separated users, queues and states (a status, ``finished``,
    ``active`` or ``all``; default: finished), ``since`` and ``until`` in ``TIME_FORMS``.
    InputError naming the field of anything wrong."""
    now = time.time() if now is None else now
    states: list[str] = []
    for word in _words(state) or ["finished"]:
        if word not in STATE_WORDS:
            raise InputError(source, f"{_clip(word)!r} is not a state: give one or more of "
                                     f"{', '.join(STATE_WORDS)}, comma-separated", field="state")
        states.extend(s for s in STATE_WORDS[word] if s not in states)
    start = parse_when(since, now, "since", source) if since else None
    end = parse_when(until, now, "until", source) if until else None
    if start is not None and end is not None and end <= start:
        raise InputError(source, f"must come after since ({_clip(since)}): nothing lies between them", field="until")
    return Filters(tuple(_words(user)), tuple(_words(queue)), tuple(states), start, end)


def parse_grouping(by: str | None, source: str = "request") -> str | None:
    """``user``, ``type`` or ``queue`` (None: no totals per group); InputError naming ``by`` otherwise."""
    if by is None or by == "":
        return None
    if by not in GROUPINGS:
        raise InputError(source, f"{_clip(by)!r} cannot group jobs: give one of {', '.join(GROUPINGS)}", field="by")
    return by


@dataclass(frozen=True)
class Usage:
    """The jobs chosen, as arrays over them (by id), and their GPU-seconds by type."""

    columns: dict[str, np.ndarray]  # the jobs table's accounting columns, chosen rows only
    gpu_types: tuple[str, ...]  # the types any chosen job ran on, sorted
    gpu_s: np.ndarray  # [jobs, types]: slots × seconds held
    attempts_on: np.ndarray  # [jobs, types]: attempts started on each type
    wait_s: np.ndarray  # first start − submission; NaN for a job never started
    run_s: np.ndarray  # seconds its attempts held slots

    def __len__(self) -> int:
        return len(self.columns["id"])


def usage(jobs: dict[str, tuple], attempts: dict[str, tuple], filters: Filters, now: float) -> Usage:
    """The accounting of the jobs ``filters`` chooses, from the state file's columns
    (``StateStore.accounting_columns``); ``now`` ends live attempts and active jobs."""
    n = len(jobs["id"])
    cols = {name: np.asarray(values, dtype=object) if n else np.empty(0, dtype=object)
            for name, values in jobs.items()}
    ids = cols["id"].astype(np.int64)
    submitted = cols["submitted"].astype(float)
    finished = _floats(cols["finished"])
    ended_or_now = np.where(np.isnan(finished), now, finished)
    chosen = np.isin(cols["status"].astype(str), filters.states)
    if filters.users:
        chosen &= np.isin(cols["user"].astype(str), filters.users)
    if filters.queues:
        chosen &= np.isin(cols["queue"].astype(str), filters.queues)
    if filters.since is not None:
        chosen &= ended_or_now >= filters.since
    if filters.until is not None:
        chosen &= submitted < filters.until

    job_ids = np.asarray(attempts["job_id"], dtype=np.int64)
    row = np.searchsorted(ids, job_ids)  # ids ascend: each attempt's job row
    row = np.minimum(row, max(n - 1, 0))
    known = (ids[row] == job_ids) if n else np.zeros(len(job_ids), dtype=bool)
    known &= chosen[row] if n else known
    row = row[known]
    a_type = np.asarray(attempts["gpu_type"], dtype=object)[known]
    a_type = np.where(a_type == None, "?", a_type).astype(str)  # noqa: E711 (elementwise)
    slot_lists = np.asarray(attempts["slots"], dtype=object)[known].astype(str)
    a_slots = np.where(slot_lists == "", 0, np.char.count(slot_lists, ",") + 1)
    a_started = np.asarray(attempts["started"], dtype=float)[known]
    a_ended = _floats(np.asarray(attempts["ended"], dtype=object)[known])
    a_ended = np.where(np.isnan(a_ended), ended_or_now[row], a_ended)  # live, or never settled: until now or its end
    held = np.maximum(0.0, a_ended - a_started)

    keep = np.flatnonzero(chosen)
    where = np.full(n, -1)
    where[keep] = np.arange(len(keep))
    names, type_of = np.unique(a_type, return_inverse=True)
    gpu_types = tuple(names.tolist())
    gpu_s = np.zeros((len(keep), len(gpu_types)))
    attempts_on = np.zeros((len(keep), len(gpu_types)), dtype=np.int64)
    np.add.at(gpu_s, (where[row], type_of), held * a_slots)
    np.add.at(attempts_on, (where[row], type_of), 1)
    run_s = np.zeros(len(keep))
    np.add.at(run_s, where[row], held)
    picked = {name: values[keep] for name, values in cols.items()}
    wait_s = _floats(picked["started"]) - picked["submitted"].astype(float)
    return Usage(picked, gpu_types, gpu_s, attempts_on, wait_s, run_s)


def rows(table: Usage, private: Callable[[str], bool], limit: int | None = None) -> list[dict]:
    """One dict a job, the latest ``limit`` (None: all); its failure's log line in its reason only
    where ``private(user)`` (its owner and admins, as ``GET /jobs`` shows it)."""
    part = slice(0 if not limit else max(0, len(table) - limit), len(table))
    c = {name: values[part].tolist() for name, values in table.columns.items()}
    hours = np.round(table.gpu_s[part] / 3600, 6).tolist()
    ran = (table.attempts_on[part] > 0).tolist()
    total = np.round(row_sum(table.gpu_s[part]) / 3600, 6).tolist()
    waits = np.round(table.wait_s[part], 3)
    wait = np.where(np.isnan(waits), None, waits).tolist()
    run = np.round(table.run_s[part], 3).tolist()
    types = table.gpu_types
    shown = []
    for i, (user, reason, reason_log) in enumerate(zip(c["user"], c["reason"], c["reason_log"])):
        by_type = {t: h for t, h, on in zip(types, hours[i], ran[i]) if on}
        shown.append({
            "id": str(c["id"][i]), "name": c["name"][i], "user": user, "queue": c["queue"][i],
            "status": c["status"][i], "exit_code": c["exit_code"][i],
            "reason": reason + (f": {reason_log}" if reason_log and private(user) else ""),
            "gpu_types": list(by_type), "gpu_hours": by_type, "gpu_hours_total": total[i],
            "wait_s": wait[i], "run_s": run[i], "attempts": c["attempt"][i],
            "preemptions": c["preemptions"][i], "retries": c["retries"][i],
            "submitted": c["submitted"][i], "started": c["started"][i], "finished": c["finished"][i],
        })
    return shown


def totals(table: Usage, mask: np.ndarray | None = None, gpu_s: np.ndarray | None = None) -> dict:
    """Jobs, GPU-hours (in all and by type), mean wait (over the jobs that started), mean run time,
    preemptions and failures of the jobs in ``mask`` (default: all); ``gpu_s``: the GPU-seconds
    to count for them, [jobs, types] (default: all theirs)."""
    mask = np.ones(len(table), dtype=bool) if mask is None else mask
    gpu_s = table.gpu_s if gpu_s is None else gpu_s
    by_type = gpu_s[mask].sum(axis=0) if len(table.gpu_types) else np.zeros(0)
    waits = table.wait_s[mask]
    waits = waits[~np.isnan(waits)]
    count = int(mask.sum())
    return {
        "jobs": count,
        "gpu_hours": round(float(by_type.sum()) / 3600, 6),
        "gpu_hours_by_type": {t: round(float(h) / 3600, 6) for t, h in zip(table.gpu_types, by_type) if h > 0},
        "mean_wait_s": round(float(waits.mean()), 3) if len(waits) else None,
        "mean_run_s": round(float(table.run_s[mask].mean()), 3) if count else None,
        "preemptions": int(table.columns["preemptions"][mask].astype(np.int64).sum()),
        "failures": int((table.columns["status"][mask] == "failed").sum()),
    }


def groups(table: Usage, by: str) -> list[dict]:
    """:func:`totals` per user, queue or GPU type (by name; a job that ran on two types counts in
    both, with its GPU-hours on each; ``NO_TYPE``: jobs that never ran)."""
    if by == "type":
        found = []
        for k, gpu_type in enumerate(table.gpu_types):
            only = np.zeros_like(table.gpu_s)
            only[:, k] = table.gpu_s[:, k]
            found.append({"type": gpu_type, **totals(table, table.attempts_on[:, k] > 0, only)})
        never = table.attempts_on.sum(axis=1) == 0 if len(table.gpu_types) else np.ones(len(table), dtype=bool)
        if never.any():
            found.append({"type": NO_TYPE, **totals(table, never)})
        return found
    keys = table.columns[by].astype(str)
    names, which = np.unique(keys, return_inverse=True)
    return [{by: str(name), **totals(table, which == g)} for g, name in enumerate(names)]


def report(table: Usage, private: Callable[[str], bool], by: str | None = None, limit: int | None = None) -> dict:
    """What ``GET /history`` answers: the latest ``limit`` jobs (None: all), how many matched, the
    totals over all of them and, with ``by``, the totals per group."""
    answer = {"jobs": rows(table, private, limit), "matched": len(table), "total": totals(table)}
    if by is not None:
        answer["by"] = by
        answer["groups"] = groups(table, by)
    return answer


def _floats(values) -> np.ndarray:
    """A column that may hold None as floats, None as NaN."""
    values = np.asarray(values, dtype=object)
    known = values != None  # noqa: E711 (elementwise)
    floats = np.full(len(values), np.nan)
    floats[known] = values[known].astype(float)
    return floats


def _words(text: str | None) -> list[str]:
    return [w.strip() for w in (text or "").split(",") if w.strip()]


def _clip(text: str, most: int = 60) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."
