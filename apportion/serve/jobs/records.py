"""The state file's rows as typed, read-only records: what ``StateStore`` returns.

A ``JobRecord`` is a row of the ``jobs`` table with its JSON columns parsed once (``spec``,
``service_by_type``, ``shared_by_type``, ``move_to``, ``elastic``, ``batch_log``) and its
slots split; a change goes back through ``StateStore.update_job(job_id, **fields)``, whose
field names are checked against ``JOB_COLUMNS`` at once. Whether a job has an attempt alive
is ``attempt_live``, as the executor said: never worked out from a process id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Mapping

from apportion.serve.jobs.job_array import composed_spec


@dataclass(frozen=True, slots=True)
class Move:
    """Where a round moved a live attempt: the slots (comma-separated), type and partner it restarts with."""

    slots: str
    gpu_type: str
    partner: int | None

    def to_json(self) -> str:
        return json.dumps({"slots": self.slots, "gpu_type": self.gpu_type, "partner": self.partner})


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job: its spec as submitted, where it stands, its current attempt and its accounting."""

    # the job as submitted
    id: int
    name: str
    user: str
    queue: str
    priority: float
    kind: str
    gpus: int
    gpu_types: str  # allowed types, comma-separated; '' = any (``allowed`` below, split)
    total_steps: int
    spec: dict  # the job file's fields, as submitted (JSON)
    submitted: float
    elastic: dict | None  # an elastic job's limits (the spec's ``elastic``); None for a fixed size
    after: str  # ids of the jobs it must see completed before it starts, comma-separated; '' = none
    array_id: int | None  # a job array's task: the array's id; None otherwise
    array_index: int | None  # and its index in the array
    # where it stands
    status: str
    reason: str
    reason_log: str  # the log's last line behind a failure: its owner and admins only
    steps_done: int
    attempt: int  # attempts started so far = the current attempt's number
    retries: int
    preemptions: int
    hangs: int
    notify_pending: bool  # its notify URL is still to be told that it ended
    started: float | None
    finished: float | None
    exit_code: int | None
    last_lines: str
    # its current attempt: alive, or the slots it will start on
    attempt_live: bool  # an attempt of the job is alive (started or adopted, and not yet settled)
    pid: int | None  # that attempt's process where the executor has one (informative only)
    proc_start: int | None
    slots: str  # comma-separated (``slot_list`` below, split)
    gpu_type: str | None
    partner: int | None  # the job sharing its slot (space sharing); None alone
    lease_end: float | None
    stop: str | None  # None, 'preempt', 'cancel', 'hung' or 'time_limit': the live attempt must go
    stop_at: float | None
    term_at: float | None
    move_to: Move | None  # a round moved the live attempt: where it restarts
    attempt_started: float | None
    contact_at: float | None  # the attempt's first lease call
    heard_at: float | None  # its last lease call or progress report
    data_stall: float | None  # the latest report's share of step time spent waiting for data; None: never said
    fetch_stall: float | None  # and of it fetching, where the job knows it
    preprocess_stall: float | None  # and pre-processing
    batch_size: int | None  # an elastic job's batch for its next attempt, as its round chose
    batch_log: tuple[tuple[int, int, int], ...]  # a target in examples: (first step, examples before, batch) an attempt
    # accounting
    run_s: float
    service_gpu_s: float
    service_by_type: dict  # {gpu_type: seconds held alone}
    shared_by_type: dict  # {"PARTNER_ID:gpu_type": seconds held together}
    accounted_at: float | None  # service counted up to here for the live attempt
    # derived
    slot_list: tuple[str, ...]
    allowed: tuple[str, ...] | None  # the types it may run on; None: any


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a job, with the times the replay measures overheads from."""

    job_id: int
    attempt: int
    gpu_type: str | None
    slots: str
    partner: int | None
    started: float
    first_lease: float | None
    first_step: int | None
    lease_told: float | None
    stop_told: float | None
    stop_step: int | None
    stop_lease_end: float | None
    done: float | None
    ended: float | None
    end_step: int | None
    how: str | None  # completed, preempted, moved, crashed, failed, cancelled, unplaced; None while it runs


@dataclass(frozen=True, slots=True)
class CredentialHash:
    """How a user's credential is stored: hex salt and digest under ``kdf``."""

    salt: str
    digest: str
    kdf: str


@dataclass(frozen=True, slots=True)
class UserRecord:
    """Someone who may call the API; ``hash`` only where the store was asked for it."""

    id: int
    name: str
    admin: bool
    created: float
    revoked: float | None  # when its credential was revoked; None while it works
    hash: CredentialHash | None = None


@dataclass(frozen=True, slots=True)
class DurationRecord:
    """A finished job's GPU time, what the duration predictor learns from."""

    job_id: int
    user: str
    name: str
    queue: str
    gpus: int
    submitted: float
    finished: float
    gpu_s: float
    estimated_gpu_s: float | None = None  # its job file's estimate × its GPUs, in the same unit; None: none


@dataclass(frozen=True, slots=True)
class EventRecord:
    id: int
    time: float
    job_id: int | None
    event: str
    detail: str


@dataclass(frozen=True, slots=True)
class ElasticStepRecord:
    """An elastic job's measured step at one size."""

    job_id: int
    gpu_type: str
    gpus: int
    nodes: int
    local_batch: float
    step_s: float
    sync_s: float
    samples: int
    updated: float


DERIVED = ("slot_list", "allowed")
JOB_COLUMNS = frozenset(f.name for f in fields(JobRecord)) - set(DERIVED)
# what a column an older state file lacks reads as (opened read-only, it is not migrated)
_JOB_DEFAULTS = {"partner": None, "shared_by_type": "{}", "move_to": "", "elastic": "", "batch_size": None,
                 "batch_log": "", "heard_at": None, "hangs": 0, "reason_log": "",
                 "after": "", "notify_pending": 0, "array_id": None, "array_index": None,
                 "data_stall": None, "fetch_stall": None, "preprocess_stall": None}


def job_record(row: Mapping[str, Any], array_spec: dict | None = None) -> JobRecord:
    """A ``jobs`` row (sqlite3.Row or dict of its columns) as a record; ``array_spec``: the parsed spec
    of the array the row is a task of, where the array's spec is stored once and the row keeps only
    its own part (``job_array.task_row_spec``): the record's spec is the two put together."""
    have = row.keys()
    value = {name: row[name] if name in have else _JOB_DEFAULTS.get(name) for name in JOB_COLUMNS}
    if "attempt_live" not in have:  # written before it was recorded: a process id meant an attempt alive
        value["attempt_live"] = row["pid"] is not None
    value["attempt_live"] = bool(value["attempt_live"])
    value["notify_pending"] = bool(value["notify_pending"])
    value["spec"] = json.loads(value["spec"])
    if array_spec is not None:
        value["spec"] = composed_spec(array_spec, value["spec"], value["array_index"])
        value["gpu_types"] = ",".join(value["spec"].get("gpu_types") or ())  # kept once, with the array's spec
    value["service_by_type"] = json.loads(value["service_by_type"] or "{}")
    value["shared_by_type"] = json.loads(value["shared_by_type"] or "{}")
    move = json.loads(value["move_to"]) if value["move_to"] else None
    value["move_to"] = Move(move["slots"], move["gpu_type"], move["partner"]) if move else None
    value["elastic"] = json.loads(value["elastic"]) if value["elastic"] else None
    value["batch_log"] = tuple(tuple(int(v) for v in segment) for segment in json.loads(value["batch_log"] or "[]"))
    value["slot_list"] = tuple(s for s in value["slots"].split(",") if s)
    value["allowed"] = tuple(value["gpu_types"].split(",")) if value["gpu_types"] else None
    return JobRecord(**value)


_JSON_TEXT = ("move_to", "elastic", "batch_log", "service_by_type", "shared_by_type")


def job_column_value(name: str, value: Any) -> Any:
    """What ``update_job`` stores for field ``name``: JSON columns as text; ValueError naming a field
    that is no stored column of a job."""
    _check_field(name)
    if name in _JSON_TEXT and isinstance(value, str):  # already the column's text
        return value
    if name in ("spec", "service_by_type", "shared_by_type"):
        return json.dumps(value)
    if name == "move_to":
        return value.to_json() if isinstance(value, Move) else (value or "")
    if name == "elastic":
        return json.dumps(value, sort_keys=True) if value else ""
    if name == "batch_log":
        return json.dumps([list(segment) for segment in value]) if value else ""
    if name == "attempt_live":
        return int(bool(value))
    return value


def job_column_rows(names: tuple[str, ...], rows: list[tuple]) -> list[tuple]:
    """``rows`` of values of the fields ``names`` (each row ending in its job id) as ``update_job``
    stores them: only the columns stored differently from their values are converted."""
    for name in names:
        _check_field(name)
    converted = [k for k, name in enumerate(names) if name in _CONVERTED]
    if not converted:
        return rows
    converted_rows = []
    for row in rows:
        row = list(row)
        for k in converted:
            row[k] = job_column_value(names[k], row[k])
        converted_rows.append(tuple(row))
    return converted_rows


_CONVERTED = ("spec", "service_by_type", "shared_by_type", "move_to", "elastic", "batch_log", "attempt_live")


def _check_field(name: str) -> None:
    """ValueError naming a field that is no stored column of a job."""
    if name not in JOB_COLUMNS:
        raise ValueError(f"update_job: {name!r} is not a field of a job (fields: {', '.join(sorted(JOB_COLUMNS))})")


def record(cls, row: Mapping[str, Any]):
    """A row of a table whose columns are ``cls``'s fields, as a ``cls``."""
    return cls(**{name: row[name] for name in row.keys()})
