"""The server's dashboard: a page at ``/`` and the JSON it polls (its routes: ``routes.py``).

The page (``assets/dashboard.*``, plain JavaScript; its charts drawn by the plotly.js that the
``plotly`` package bundles, served from here, so it needs no network) shows the slots of each
GPU type with the jobs on them, the jobs with their status, reason and progress, a job's
progress over time, events and log, the cluster's use over time (``history.py``), and the
privacy blocks' budgets when the server has any.

Reading needs no credential from this machine (a loopback address): whoever is logged in here
sees what runs where, as ``ps`` and ``nvidia-smi`` would show them. From elsewhere, on a server
with credentials, it needs one, as the API does. A job's log is shown only to its owner and admins, as ``GET /jobs/ID/logs``.
Changing anything (cancel) goes through the API itself, with the credential the person gives
the page. A reverse proxy on this machine must set X-Forwarded-For, or every reader it passes
on would look local.
"""

from __future__ import annotations

import gzip
import json
import threading
from functools import lru_cache
from importlib import resources
from typing import Optional

from fastapi import Header
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, Response

from apportion.serve.accounts.auth import Identity
from apportion.serve.base.bounds import MAX_JOB_ID, clip
from apportion.serve.http.callers import Served
from apportion.serve.views.history import History
from apportion.serve.jobs.records import JobRecord
from apportion.serve.scheduler.scheduler import NotFound, Scheduler
from apportion.serve.store.state import ACTIVE

FINISHED_SHOWN = 50  # the dashboard lists this many of the jobs that ended last
WAITING_SHOWN = 100  # and the first this many waiting jobs (every running one): counts say how many more
EVENTS_SHOWN = 200  # events of one job, the latest
LOG_LINES = 40  # lines of a job's log
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
# the page runs only its own scripts; plotly.js sets inline styles; nobody may frame it (the cancel button)
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def page(at: Served) -> HTMLResponse:
    return HTMLResponse(_asset("dashboard.html"), headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


def asset(at: Served, name: str) -> Response:
    if name not in ASSETS:
        raise NotFound(f"no asset {name[:60]!r}")
    return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})


def plotly_js(at: Served, accept_encoding: Optional[str] = Header(default=None)) -> Response:
    headers = {"Cache-Control": "max-age=86400", "Vary": "Accept-Encoding"}
    if "gzip" in (accept_encoding or ""):
        return Response(_plotly_gzip(), media_type="text/javascript", headers={**headers, "Content-Encoding": "gzip"})
    return Response(_plotly(), media_type="text/javascript", headers=headers)


def state(at: Served, who: Identity | None) -> dict | Response:
    if who is None:  # a reader on this machine without a credential: the view of this round, made once
        return at.anonymous.view()
    return state_view(at.scheduler, at.history, who, at.authenticator.required)


def job(at: Served, job_id: str, who: Identity | None) -> dict:
    return job_view(at.scheduler, at.history, at.scheduler.row(_job_id(job_id)), who)


class AnonymousState:
    """The dashboard's state as a reader without a credential sees it (on a server with credentials),
    made at most once per round: however many poll it, it costs one view a round."""

    def __init__(self, scheduler: Scheduler, history: History) -> None:
        self.scheduler, self.history = scheduler, history
        self._made: tuple[int, bytes] | None = None  # (the round it was made in, the view as JSON)
        self._lock = threading.Lock()  # pollers that come together wait for one view, not each make their own

    def view(self) -> Response:
        """The view as JSON, encoded once a round too."""
        with self._lock:
            round_now = self.scheduler.round
            if self._made is None or self._made[0] != round_now:
                view = jsonable_encoder(state_view(self.scheduler, self.history, None, True))
                text = json.dumps(view, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
                self._made = (round_now, text)
            return Response(self._made[1], media_type="application/json")


def state_view(scheduler: Scheduler, history: History, who: Identity | None, credentials: bool) -> dict:
    """The server, its slots with the jobs on them, the current jobs (a bounded list: every running
    one, the first WAITING_SHOWN waiting, the FINISHED_SHOWN that ended last, counts for the others)
    and the cluster over time."""
    now = scheduler.clock()
    status = scheduler.status()
    rows = scheduler.views.current_jobs(FINISHED_SHOWN, WAITING_SHOWN)
    on_slot: dict[str, list[str]] = {}
    for r in rows:
        if r.attempt_live:
            for slot in r.slot_list:
                on_slot.setdefault(slot, []).append(str(r.id))
    counts = status["counts"]
    return {
        "now": now,
        "server": {k: status[k] for k in ("server", "policy", "round", "round_s", "next_round_in_s", "counts",
                                          "hangs", "round_ms", "out_of_space")},
        "viewer": _viewer(who, credentials),
        "gpu_types": [{"name": t, "slots": scheduler.capacity[t],
                       "busy": sum(1 for s in scheduler.slots if s.gpu_type == t and on_slot.get(s.id))}
                      for t in scheduler.gpu_types],
        # each slot's jobs, and whether its node is gone (offline) or where it runs (node), as `status` says
        "slots": [{"id": s["id"], "gpu_type": s["gpu_type"], "jobs": on_slot.get(s["id"], []),
                   "offline": s.get("offline", False), "node": s.get("node")} for s in status["slots"]],
        "jobs": [_job(scheduler, r, now, who) for r in rows],
        "finished_not_shown": max(0, sum(counts[s] for s in ("completed", "failed", "cancelled"))
                                  - sum(r.status not in ACTIVE for r in rows)),
        "waiting_not_shown": max(0, sum(counts[s] for s in ("queued", "preempted"))
                                 - sum(r.status in ("queued", "preempted") for r in rows)),
        "history": history.cluster(scheduler.gpu_types),
        **scheduler.views.resource_dashboard(),  # each optional resource's part (the privacy blocks' budgets)
    }


def job_view(scheduler: Scheduler, history: History, row: JobRecord, who: Identity | None) -> dict:
    """One job in full: its fields, events, progress reports over time and (for its owner) its log."""
    events = scheduler.views.events(row.id, EVENTS_SHOWN)
    if who is not None and who.may_see(row.user):
        text = scheduler.views.log_tail(row.id, row.attempt, LOG_LINES) if row.attempt else ""
        log = {"shown": True, "attempt": row.attempt, "text": text or row.last_lines or ""}
    else:
        log = {"shown": False, "attempt": row.attempt, "text": "",
               "why": f"only {row.user} or an admin may read this job's log: give your credential"}
    return {
        "job": _job(scheduler, row, scheduler.clock(), who),
        "events": [{"time": e.time, "event": e.event, "detail": e.detail} for e in events],
        "progress": history.job(row.id),
        "log": log,
    }


def sample(scheduler: Scheduler, history: History, now: float | None = None) -> None:
    """Record one sample of the cluster: jobs waiting and running, busy slots of each type."""
    now = scheduler.clock() if now is None else now
    views = scheduler.views
    counts = views.counts()
    held = {slot for (slots,) in views.job_columns(("slots",), "attempt_live") for slot in slots.split(",")}
    busy: dict[str, int] = {}
    for slot in held:
        gpu_type = views.gpu_type_of(slot)
        if gpu_type is not None:
            busy[gpu_type] = busy.get(gpu_type, 0) + 1
    history.sample(now, counts["queued"] + counts["preempted"], counts["running"], busy)


def keep_sampling(scheduler: Scheduler, history: History, stop: threading.Event, every_s: float) -> None:
    """Sample every ``every_s`` until ``stop`` is set (the server's sampling thread)."""
    while not stop.is_set():
        try:
            sample(scheduler, history)
        except Exception as err:  # a failed sample is a gap in a chart, never a stopped server
            scheduler.log(f"dashboard sample failed: {type(err).__name__}: {err}")
        stop.wait(every_s)


def sample_every_s(round_s: float) -> float:
    """How often to sample: a few times a round, at least every 5 s, at most every 0.5 s."""
    return min(5.0, max(0.5, round_s / 4))


def _job(scheduler: Scheduler, row: JobRecord, now: float, who: Identity | None) -> dict:
    # the failure's last log line in its reason for its owner and admins; the log itself is in the job's detail
    info = scheduler.job_info(row, now, private=who is not None and who.may_see(row.user))
    info.pop("last_lines", None)
    info.pop("command", None)
    info.update(slots=row.slot_list if row.attempt_live else [], gpu_type=row.gpu_type,
                partner=str(row.partner) if row.partner else None, stopping=row.stop,
                # an anonymous reader may try (the API asks for the credential); a known user, on their own jobs
                may_cancel=row.status in ACTIVE and (who is None or who.may_see(row.user)))
    return info


def _viewer(who: Identity | None, credentials: bool) -> dict:
    if who is None:
        return {"credentials": credentials, "user": None, "admin": False, "anonymous": True}
    return {"credentials": credentials, "user": who.user, "admin": who.admin, "anonymous": False}


def _job_id(text: str) -> int:
    """A job id from a path; NotFound for anything that cannot be one."""
    number = int(text) if text.isascii() and text.isdigit() and len(text) <= 19 else 0  # "²" is a digit to isdigit
    if not 1 <= number <= MAX_JOB_ID:
        raise NotFound(f"no job {clip(text)}")
    return number


def _asset(name: str) -> str:
    return resources.files("apportion.serve.http").joinpath("assets", name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _plotly() -> bytes:
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


@lru_cache(maxsize=1)
def _plotly_gzip() -> bytes:
    return gzip.compress(_plotly(), compresslevel=6, mtime=0)
