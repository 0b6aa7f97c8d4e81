"""The jobs ``GET /jobs`` lists, built from columns: the same fields as one job's
(``Scheduler.job_info``), without a record per job.

A list is sent a page at a time (at most ``PAGE_MAX`` jobs, by id; the next page starts after the
last id of a full one), so one call costs the same whoever asks and however many jobs there are.
One query reads only the columns shown, for the jobs asked for (by status, user, array, how many);
each job's spec is parsed once per server, a spec never changing once stored; the estimated
finishes of all the jobs listed are predicted at once, their speeds looked up once per shape.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from apportion.core.durations import gpu_seconds, remaining_gpu_s
from apportion.serve.estimates.durations import estimated_seconds
from apportion.serve.estimates.elastic_batch import examples_info
from apportion.serve.store.state import ACTIVE, STATUSES, parsed_spec

PAGE_MAX = 5_000  # jobs in one page of GET /jobs: a few MB of JSON, a few hundred ms to build at most
NEXT_PAGE = "X-Next-After-Id"  # the header that says where the next page of a list starts
TEXTS_KEPT = 60_000  # jobs' JSON texts kept between lists (the older half goes when there are more)

SHOWN_COLUMNS = ("id", "name", "user", "queue", "priority", "kind", "status", "reason", "reason_log", "gpus",
                 "gpu_types", "slots", "gpu_type", "submitted", "started", "finished", "run_s", "accounted_at",
                 "attempt_live", "steps_done", "total_steps", "preemptions", "attempt", "retries", "hangs",
                 "exit_code", "lease_end", "last_lines", "elastic", "array_id", "array_index", "data_stall",
                 "fetch_stall", "preprocess_stall")
_AT = {name: k for k, name in enumerate(SHOWN_COLUMNS)}
_USER, _LIVE, _ACCOUNTED_AT, _RUN_S, _ELASTIC, _ARRAY_ID = (
    _AT[name] for name in ("user", "attempt_live", "accounted_at", "run_s", "elastic", "array_id"))


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a list shows: these statuses (None: all), this user's (None: everyone's), jobs that
    ended after ``ended_after`` (None: whenever; active jobs always), the first ``limit`` by id."""

    statuses: tuple[str, ...] | None = None
    user: str | None = None
    ended_after: float | None = None
    limit: int | None = None
    after_id: int | None = None  # the page that starts after this job id (None: the first)
    array_id: int | None = None  # only the tasks of this job array

    @property
    def page_size(self) -> int:
        """How many jobs one page holds: ``limit``, at most PAGE_MAX."""
        return min(self.limit or PAGE_MAX, PAGE_MAX)

    def where(self) -> tuple[str, list]:
        """The SQL condition and its parameters."""
        terms, params = [], []
        if self.after_id is not None:
            terms.append("id > ?")
            params.append(self.after_id)
        if self.array_id is not None:
            terms.append("array_id = ?")
            params.append(self.array_id)
        if self.statuses is not None:
            terms.append(f"status IN ({','.join('?' * len(self.statuses))})")
            params += list(self.statuses)
        if self.user is not None:
            terms.append("user = ?")
            params.append(self.user)
        if self.ended_after is not None:
            terms.append("(finished IS NULL OR finished > ? OR status IN ('queued', 'running', 'preempted'))")
            params.append(self.ended_after)
        return " AND ".join(terms), params


def parse_statuses(text: str | None) -> tuple[str, ...] | None:
    """``running,queued`` → the statuses named; ValueError naming one that is none."""
    if text is None:
        return None
    named = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for status in named:
        if status not in STATUSES:
            raise ValueError(f"'{status[:40]}' is not a status (statuses: {', '.join(STATUSES)})")
    return named


_NO_SPEC = (None, None, None, [], None, None)


class JobList:
    """Lists jobs as the API shows them, over one server's scheduler."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        # job id -> what its spec shows: (gpu_types, hung_after_s, time_limit, after, command, estimated_duration_s)
        self._specs: dict[int, tuple] = {}
        self._texts: dict[tuple, tuple[str, str]] = {}  # (row, private) -> its JSON text around the changing fields

    @property
    def views(self):
        """What it reads: the scheduler's read side (``Scheduler.views``), never its store."""
        return self.scheduler.views

    def page(self, chosen: JobFilter, now: float, may_see) -> tuple[str, int | None]:
        """(the JSON text of the page of jobs ``chosen`` picks, the id the next page starts after, None
        when this page is the last): each job by id as ``Scheduler.job_info`` shows it; ``may_see(user)``:
        whether the caller sees what comes from that user's jobs' logs. Each job's text but its running
        time and estimated finish is kept from one list to the next while its row has not changed."""
        where, params = chosen.where()
        size = chosen.page_size
        rows = self.views.job_columns(SHOWN_COLUMNS, where, params, size)
        following = rows[-1][0] if len(rows) == size else None
        return self._json(rows, now, may_see), following

    def jobs_json(self, chosen: JobFilter, now: float, may_see) -> str:
        """The first page's JSON text (``page``)."""
        return self.page(chosen, now, may_see)[0]

    def _json(self, rows: list[tuple], now: float, may_see) -> str:
        views = self.views
        specs = self._spec_fields(rows)
        estimates = self._estimates(rows, now, [spec[5] for spec in specs])
        texts = self._texts
        if len(texts) + len(rows) > TEXTS_KEPT:  # the older half goes
            texts = self._texts = dict(list(texts.items())[len(texts) // 2:])
        parts = []
        for row, spec, estimate in zip(rows, specs, estimates):
            private = may_see(row[_USER])
            key = (row, private)
            cached = texts.get(key)
            if cached is None:
                cached = texts[key] = self._fixed_text(row, spec, private)
            head, tail = cached
            live, accounted_at = row[_LIVE], row[_ACCOUNTED_AT]
            running = row[_RUN_S] + (max(0.0, now - accounted_at) if live and accounted_at else 0.0)
            nodes = views.nodes(row[0], live) if live else None  # where its ranks run (Ray)
            parts.append(f'{head}, "runtime_s": {_number(round(running, 3))}, '
                         f'"nodes": {"null" if nodes is None else json.dumps(nodes)}, '
                         f'{tail}{_estimate_text(estimate)}'
                         + (_examples_text(views.job(row[0])) if row[_ELASTIC] else "") + "}")
        return "[" + ",\n".join(parts) + "]"  # a job a line: a client may join pages without parsing them

    def _fixed_text(self, row: tuple, spec: tuple, private: bool) -> tuple[str, str]:
        """A job's JSON but its running time and estimates: the text before them, and after."""
        (job_id, name, user, queue, priority, kind, status, reason, reason_log, gpus, _, slots, _, submitted,
         started, finished, _, _, _, steps_done, total_steps, preemptions, attempt, retries,
         hangs, exit_code, lease_end, last_lines, _, array_id, array_index, data_stall, fetch_stall,
         preprocess_stall) = row
        gpu_types, hung_after_s, time_limit, after, command, estimated_duration_s = spec
        head = {
            "id": str(job_id), "name": name, "user": user, "queue": queue, "priority": priority, "kind": kind,
            "status": status, "reason": reason + (f": {reason_log}" if private and reason_log else ""),
            "gpus": gpus, "gpu_types": gpu_types, "alloc": slots, "submitted": submitted, "started": started,
            "finished": finished,
        }
        tail = {
            "steps_done": steps_done, "total_steps": total_steps, "preemptions": preemptions, "attempts": attempt,
            "retries": retries, "hangs": hangs,
            "hung_after_s": hung_after_s if hung_after_s is not None else self.scheduler.config.hung_after_s,
            "time_limit": time_limit, "estimated_duration_s": estimated_duration_s, "after": after,
            "array_id": None if array_id is None else str(array_id), "array_index": array_index,
            "exit_code": exit_code, "lease_end": lease_end,
            "data_stall": data_stall, "fetch_stall": fetch_stall, "preprocess_stall": preprocess_stall,
            "last_lines": last_lines if private else "", "command": command,
        }
        return json.dumps(head)[:-1], json.dumps(tail)[1:-1]

    def _spec_fields(self, rows: list[tuple]) -> list[tuple]:
        """What each job's spec shows, parsed the first time a job is listed; for an array's tasks,
        which all show their array's, once per array (kept under the key ``-array id``)."""
        keys = [-row[_ARRAY_ID] if row[_ARRAY_ID] is not None else row[0] for row in rows]
        missing: dict[int, int] = {}  # key -> a job to read it from
        for key, row in zip(keys, rows):
            if key not in self._specs and key not in missing:
                missing[key] = row[0]
        if missing:
            texts = self.views.specs_of(list(missing.values()))
            for key, job_id in missing.items():
                if job_id not in texts:
                    continue
                try:
                    spec = parsed_spec(texts[job_id])
                except ValueError:
                    spec = {}
                spec = spec if isinstance(spec, dict) else {}
                self._specs[key] = (spec.get("gpu_types"), spec.get("hung_after_s"), spec.get("time_limit"),
                                    [str(i) for i in spec.get("after") or ()], spec.get("command"),
                                    spec.get("estimated_duration_s"))
        return [self._specs.get(key, _NO_SPEC) for key in keys]

    def _estimates(self, rows: list[tuple], now: float, estimated_s: list) -> list[dict]:
        """Each job's estimated finish (``DurationHistory.estimate``'s fields), the active ones predicted
        together; when that raises, each job alone, as one job's page shows it (an unknown, for a job
        whose fields cannot be worked out)."""
        try:
            return _estimates_together(self.views.durations, rows, now, estimated_s)
        except Exception:
            return [_estimate_alone(self.scheduler, row[0], now) for row in rows]


def _estimate_alone(scheduler, job_id: int, now: float) -> dict:
    """One job's estimate fields as its own page shows them."""
    info = scheduler.job_info(scheduler.views.job(job_id), now)
    return {k: info[k] for k in ("estimated_finish", "predicted_remaining_s", "estimate_from") if k in info}


def _number(value) -> str:
    """A number (or None) as JSON writes it."""
    if value is None:
        return "null"
    return float.__repr__(value) if type(value) is float and math.isfinite(value) else json.dumps(value)


_STRINGS: dict[str | None, str] = {None: "null"}  # the few sources of an estimate, as JSON


def _estimate_text(estimate: dict) -> str:
    """``, "estimated_finish": ..., ...``: the estimate's fields as JSON members."""
    if estimate.keys() != _ESTIMATE_KEYS:
        return ", " + json.dumps(estimate)[1:-1] if estimate else ""
    source = estimate["estimate_from"]
    said = _STRINGS.get(source)
    if said is None:
        said = _STRINGS[source] = json.dumps(source)
    return (f', "estimated_finish": {_number(estimate["estimated_finish"])}, "predicted_remaining_s": '
            f'{_number(estimate["predicted_remaining_s"])}, "estimate_from": {said}')


def _examples_text(row) -> str:
    examples = _examples(row)
    return ", " + json.dumps(examples)[1:-1] if examples else ""


def _examples(row) -> dict:
    """``examples_info`` of one job; nothing when its stored fields cannot say (as ``job_info``)."""
    try:
        return examples_info(row)
    except Exception:
        return {}


_NONE = {"estimated_finish": None, "predicted_remaining_s": None, "estimate_from": None}
_ESTIMATE_KEYS = _NONE.keys()


def _estimates_together(durations, rows: list[tuple], now: float, estimated_s: list) -> list[dict]:
    """``DurationHistory.estimate`` for every row at once (``estimated_s``: each one's job file's
    ``estimated_duration_s``, None: none): the speeds once per (kind, GPUs, allowed types), one
    prediction for all the active jobs."""
    at = _AT
    gpu_types = durations.gpu_types
    out: list[dict] = [_NONE] * len(rows)
    shapes: dict[tuple, tuple[dict, float]] = {}
    picked = []  # (position, row, fastest, rate to finish at)
    for k, row in enumerate(rows):
        if row[at["status"]] not in ACTIVE:
            continue
        kind, gpus, allowed_text = row[at["kind"]], row[at["gpus"]], row[at["gpu_types"]]
        key = (kind, gpus, allowed_text)
        if key not in shapes:
            allowed = tuple(allowed_text.split(",")) if allowed_text else None
            rates = {t: durations.throughputs.rate(kind, t, gpus, allowed) for t in gpu_types}
            shapes[key] = (rates, max(rates.values(), default=0.0), max(rates, key=rates.get))
        rates, fastest, best = shapes[key]
        gpu_type = row[at["gpu_type"]]
        on = gpu_type if row[at["attempt_live"]] and gpu_type in rates else best
        if fastest <= 0 or rates[on] <= 0:
            continue
        steps_done, run_s = row[at["steps_done"]], row[at["run_s"]]
        own = steps_done / run_s if steps_done > 0 and run_s >= 1.0 else None
        if own is None and not durations.speed_known(kind, on, gpus):
            out[k] = dict(_NONE, estimate_from="speed not measured yet")
            continue
        picked.append((k, row, fastest, own if own is not None else rates[on]))
    if not picked:
        return out
    chosen = [row for _, row, _, _ in picked]
    groups = durations.group_ids([r[at["id"]] for r in chosen], [r[at["user"]] for r in chosen],
                                 [r[at["name"]] for r in chosen], [r[at["queue"]] for r in chosen],
                                 [r[at["gpus"]] for r in chosen], [r[at["submitted"]] for r in chosen])
    steps = np.array([r[at["steps_done"]] for r in chosen])
    gpus = np.array([r[at["gpus"]] for r in chosen])
    own = np.array([estimated_seconds(estimated_s[k]) for k, _, _, _ in picked]) * gpus  # NaN: none
    prediction = durations.predictor.predict(groups, own if np.isfinite(own).any() else None)
    fastest = np.array([f for _, _, f, _ in picked])
    left_gpu_s = remaining_gpu_s(prediction.gpu_s, prediction.log_sd, gpu_seconds(steps, gpus, fastest))
    left_steps = left_gpu_s / gpus * fastest
    for j, (k, row, _, rate) in enumerate(picked):
        declared = max(row[at["total_steps"]] - row[at["steps_done"]], 0)
        source = durations.predicted_from(int(prediction.level[j]), float(own[j]), groups[j:j + 1], row[at["user"]])
        left = left_steps[j]
        if left >= declared:
            left, source = declared, "job file: total_steps"
        seconds = left / rate
        out[k] = {"estimated_finish": float(round(now + seconds, 3)) if math.isfinite(seconds) else None,
                  "predicted_remaining_s": float(round(seconds, 3)), "estimate_from": source}
    return out
