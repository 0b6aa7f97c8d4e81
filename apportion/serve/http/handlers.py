"""What each API route does (docs/serve-contract.md): plain functions, laid out by ``routes.py``.

Each takes first the server it answers from (``callers.Served``), then its path, query and body
parameters as FastAPI reads them, and ``who``, the caller its row of ``routes.py`` lets in. What a
handler reads of the scheduler goes through ``scheduler.views``, never its store or executor.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from fastapi import Body, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from apportion.core.errors import InputError
from apportion.serve.accounts.auth import Identity, NotAllowed
from apportion.serve.accounts.runas import NoAccount
from apportion.serve.base.bounds import MAX_ATTEMPT, MAX_JOB_ID, MAX_LOG_OFFSET, MAX_NAME, clip
from apportion.serve.http import bodies
from apportion.serve.http.callers import Served
from apportion.serve.scheduler.scheduler import NotFound
from apportion.serve.store import usage
from apportion.serve.store.state import TERMINAL
from apportion.serve.views.job_list import NEXT_PAGE, JobFilter, parse_statuses

LOG_CHUNK = 256 * 1024


async def submit(at: Served, request: Request, caller: Callable[[Request], Identity]) -> JSONResponse:
    # one thread for the credential and the store, the body parsed once here: a submit is the
    # call that comes by the thousand
    body = bodies.json_body(await request.body(), request.headers.get("content-type"))
    return JSONResponse(await run_in_threadpool(_submitted, at, request, body, caller))


def _submitted(at: Served, request: Request, body: object, caller: Callable[[Request], Identity]) -> dict:
    scheduler = at.scheduler
    who = caller(request)
    key = bodies.idempotency_key(request.headers.get("idempotency-key"))
    body = bodies.mapping(body)
    user = who.acting_as(bodies.submitter(body) if body.get("user") is not None else None)
    if user is None:
        raise InputError("request", "is required: who submits the job", field="user")
    try:
        scheduler.config.run_as.account(user)  # a user with no OS account to run as is refused now
    except NoAccount as exc:
        raise NotAllowed(str(exc)) from None
    stored = scheduler.submit_once({**body, "user": user}, user, key, sees_all=who.admin or who.open)
    answer = {"id": str(stored.job_id), "user": user, **({"existing": True} if stored.existing else {})}
    if stored.tasks is not None:  # an array: its id, and its tasks' ids follow it
        answer["tasks"] = stored.tasks
    return answer


def jobs(at: Served, who: Identity,
         status: Optional[str] = Query(default=None, max_length=MAX_NAME),
         user: Optional[str] = Query(default=None, max_length=MAX_NAME),
         limit: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID),
         ended_after: Optional[float] = Query(default=None, allow_inf_nan=False),
         after_id: Optional[int] = Query(default=None, ge=0, le=MAX_JOB_ID),
         array: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID)) -> Response:
    """A page of jobs by id (at most ``PAGE_MAX``, or ``limit``): those of these ``status``es
    (comma-separated), of this ``user``, of job ``array``, that ended after ``ended_after`` (Unix
    time; active jobs always), with ids above ``after_id``. When more may follow, the
    ``X-Next-After-Id`` header names the ``after_id`` of the next page."""
    try:
        statuses = parse_statuses(status)
    except ValueError as exc:
        raise InputError("request", str(exc), field="status") from None
    chosen = JobFilter(statuses, user, ended_after, limit, after_id, array)
    text, following = at.listing.page(chosen, at.scheduler.clock(), who.may_see)
    headers = {NEXT_PAGE: str(following)} if following is not None else None
    return Response(text, media_type="application/json", headers=headers)


def job(at: Served, job_id: str, who: Identity) -> dict:
    row = at.scheduler.row(job_id_of(job_id))
    return at.scheduler.job_info(row, None, private=who.may_see(row.user))  # its log's lines: its owner and admins


def cancel(at: Served, job_id: str, who: Identity, body: Any = Body(default=None)) -> dict:
    scheduler = at.scheduler
    named = bodies.cancel({} if body is None else body)
    if who.open:  # no credentials: the user the request names
        count = scheduler.cancel(job_id_of(job_id), named)
    else:
        who.acting_as(named)  # a user naming someone else is refused, not ignored
        count = scheduler.cancel(job_id_of(job_id), who.user, admin=who.admin)
    found = scheduler.views.owner(job_id_of(job_id))  # an array's id is held by no job: its tasks were cancelled
    return {"cancelled": count, **({"array": True} if found is not None and found[1] else {})}


def lease(at: Served, job_id: str, who: Identity, body: Any = Body(...)) -> dict:
    attempt, steps_done = bodies.lease(body)
    skipped = bodies.skipped_checkpoints(body)  # the checkpoints its restore passed over, and why
    who.require_attempt(job_id_of(job_id), attempt)
    return at.scheduler.lease(job_id_of(job_id), attempt, steps_done, skipped)


def progress(at: Served, job_id: str, who: Identity, body: Any = Body(...)) -> dict:
    scheduler = at.scheduler
    attempt, steps_done, steps_per_s = bodies.progress(body)
    measured = bodies.step_report(body)  # an elastic job's noise scale and how its step was made
    stall = bodies.data_stall(body)  # the share of its step time spent waiting for data
    who.require_attempt(job_id_of(job_id), attempt)
    note = scheduler.progress(job_id_of(job_id), attempt, steps_done, steps_per_s, stall=stall, **measured)
    at.history.report(job_id_of(job_id), scheduler.clock(), steps_done, steps_per_s)  # the dashboard's throughput chart
    return {"note": note} if note else {}


def logs(at: Served, job_id: str, who: Identity,
         attempt: Optional[int] = Query(default=None, ge=0, le=MAX_ATTEMPT),
         offset: int = Query(default=0, ge=0, le=MAX_LOG_OFFSET),
         limit: int = Query(default=LOG_CHUNK, ge=1, le=LOG_CHUNK)) -> dict:
    scheduler = at.scheduler
    found = scheduler.views.owner(job_id_of(job_id))  # whose it is from its key first: a refusal reads nothing more
    if found is not None and not found[1] and not who.may_see(found[0]):
        raise NotAllowed(f"job {job_id_of(job_id)} belongs to {found[0]!r}: only they or an admin may read its logs")
    row = scheduler.row(job_id_of(job_id))
    latest = row.attempt
    number = latest if attempt is None else attempt
    if latest == 0 and attempt is None:
        return {"text": "", "offset": 0, "done": row.status in TERMINAL, "attempt": 0, "attempts": 0,
                "status": row.status}
    if not 1 <= number <= latest:
        raise NotFound(f"job {row.id} has no attempt {number} (attempts: {latest})")
    path = scheduler.views.log_path(row.id, number)
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
    except FileNotFoundError:
        data = b""
    text, used = _decode(data)
    live = row.attempt_live and number == latest
    done = not live and len(data) < limit and used == len(data)
    return {"text": text, "offset": offset + used, "done": done, "attempt": number, "attempts": latest,
            "status": row.status}


def accounting(at: Served, who: Identity,
               user: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               queue: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               state: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               since: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               until: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               by: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
               limit: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID)) -> JSONResponse:
    now = at.scheduler.clock()
    filters = usage.parse_filters(user=user, queue=queue, state=state, since=since, until=until, now=now)
    grouping = usage.parse_grouping(by)
    table = usage.usage(*at.scheduler.views.accounting_columns(), filters, now)
    return JSONResponse(usage.report(table, who.may_see, grouping, limit))


def status(at: Served, who: Identity) -> dict:
    # each user's budgets against their limits: a user sees their own, an admin every user's
    budgets = at.scheduler.views.budgets.shown(who.user, sees_all=who.admin or who.open)
    return {**at.scheduler.status(), "budgets": budgets}


def metrics(at: Served) -> Response:
    return at.scrape()


def job_id_of(text: str) -> int:
    """A job id from a path; NotFound for anything that cannot be one (the state file holds 63 bits)."""
    try:
        job_id = int(text) if len(text) <= 20 else -1
    except ValueError:
        job_id = -1
    if not 1 <= job_id <= MAX_JOB_ID:
        raise NotFound(f"no job {clip(text)}")
    return job_id


def _decode(data: bytes) -> tuple[str, int]:
    """The text of ``data`` and how many bytes it used: a character cut at the end waits for the next read."""
    for cut in range(0, min(4, len(data) + 1)):
        try:
            return data[: len(data) - cut].decode("utf-8"), len(data) - cut
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace"), len(data)
