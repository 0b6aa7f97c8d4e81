"""The HTTP API of ``apportion serve`` (docs/serve-contract.md), over a Scheduler.

Every call's caller is an :class:`~apportion.serve.accounts.auth.Identity`, from its bearer credential
(auth.py). Users list jobs and see the server; a job's owner or an admin cancels it and reads
its logs; an attempt's own credential renews that attempt's lease and reports its progress.
A server with no credentials configured (loopback only) takes the ``user`` a request names.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Optional

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from apportion.core.version import VERSION
from apportion.core.errors import InputError
from apportion.serve.http import bodies
from apportion.serve.store import usage
from apportion.serve.http.api_docs import add_api_docs
from apportion.serve.accounts.auth import Authenticator, Identity, NotAllowed, TooManyFailures, Unauthorized
from apportion.serve.accounts.budgets import OverQuota, TooFast
from apportion.serve.base.bounds import MAX_ATTEMPT, MAX_BODY, MAX_JOB_ID, MAX_LOG_OFFSET, MAX_NAME, clip
from apportion.serve.http.dashboard import add_dashboard
from apportion.serve.http.edge import LimitBody, LimitFailures, method_not_allowed
from apportion.serve.views.history import History
from apportion.serve.views.job_list import NEXT_PAGE, JobFilter, JobList, parse_statuses
from apportion.serve.views.metrics import add_metrics
from apportion.serve.jobs.records import JobRecord
from apportion.serve.accounts.runas import NoAccount
from apportion.serve.scheduler.scheduler import Conflict, Forbidden, NotFound, Scheduler
from apportion.serve.base.space import NoSpace
from apportion.serve.store.state import TERMINAL

LOG_CHUNK = 256 * 1024
# FastAPI 0.142+ asks OpenTelemetry for its providers on every request; the server's figures are its
# own /metrics, so FastAPI's spans, metrics and logs are off where it has them
_NO_TELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}
                 if "telemetry" in inspect.signature(FastAPI).parameters else {})
IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                   "schema": {"type": "string", "pattern": bodies.IDEMPOTENCY_KEY_PATTERN},
                   "description": "Send a submit again with the same key: the job stored the first time answers."}


def create_app(scheduler: Scheduler, token: str | None = None, history: History | None = None,
               max_body: int = MAX_BODY, authenticator: Authenticator | None = None) -> FastAPI:
    """The API over ``scheduler``; ``token``: the server's admin token (auth.py), if any;
    ``history``: what the dashboard draws over time (dashboard.py; empty if not given);
    ``max_body``: the most bytes of a request body read (edge.py); ``authenticator``: who checks
    credentials and counts wrong ones (by default one over ``scheduler``'s state file and ``token``)."""
    authenticator = authenticator or Authenticator(scheduler.store, token)
    history = history if history is not None else History()

    def identify(request: Request, authorization: str | None) -> Identity:
        """The caller with this ``Authorization`` header; HTTP 401 when it cannot be let in."""
        try:
            return authenticator.identify(authorization, request.client.host if request.client else None)
        except Unauthorized as exc:
            raise HTTPException(status_code=401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}) from None

    def caller(request: Request, authorization: Optional[str] = Header(default=None)) -> Identity:
        return identify(request, authorization)

    def user_caller(request: Request, authorization: Optional[str] = Header(default=None)) -> Identity:
        """A person's (or the admin token's) credential: an attempt's may not list, submit, cancel or read."""
        who = identify(request, authorization)
        who.require_user()
        return who

    app = FastAPI(title="apportion", version=VERSION, docs_url=None, redoc_url=None,  # /docs: api_docs.py
                  **_NO_TELEMETRY)
    app.add_middleware(LimitBody, most=max_body)
    app.add_middleware(LimitFailures, authenticator=authenticator)  # outermost: before anything else

    @app.exception_handler(TooManyFailures)
    def _too_many(request, exc: TooManyFailures):
        return JSONResponse(status_code=429, content={"detail": str(exc)},
                            headers={"Retry-After": str(exc.retry_after), "WWW-Authenticate": "Bearer"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 405:  # Allow: every method the path serves, not only the first route's
            return method_not_allowed(app.routes, request.scope)
        return await http_exception_handler(request, exc)

    @app.exception_handler(NotAllowed)
    def _not_allowed(request, exc):
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.exception_handler(NotFound)
    def _not_found(request, exc):
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(Forbidden)
    def _forbidden(request, exc):
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.exception_handler(Conflict)
    def _conflict(request, exc):
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(OverQuota)
    def _over_quota(request, exc: OverQuota):  # budgets.py: what the user holds, and the limit it names
        return JSONResponse(status_code=409, content={"detail": str(exc), "budget": exc.key, "held": exc.held,
                                                      "limit": exc.limit})

    @app.exception_handler(TooFast)
    def _too_fast(request, exc: TooFast):
        return JSONResponse(status_code=429, content={"detail": str(exc), "budget": "submit_rate"},
                            headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})

    @app.exception_handler(NoSpace)
    def _no_space(request, exc: NoSpace):
        return JSONResponse(status_code=507, content={"detail": str(exc), "state_dir": exc.state_dir})

    @app.exception_handler(InputError)
    def _bad_input(request, exc: InputError):
        return _input_error(exc)

    @app.exception_handler(RequestValidationError)
    def _unreadable(request, exc: RequestValidationError):
        return _input_error(_validation_error(exc))

    @app.post("/jobs", openapi_extra={"parameters": [IDEMPOTENCY_KEY]})
    async def submit(request: Request) -> JSONResponse:
        # one thread for the credential and the store, the body parsed once here: a submit is the
        # call that comes by the thousand
        body = bodies.json_body(await request.body(), request.headers.get("content-type"))
        return JSONResponse(await run_in_threadpool(submitted, request, body))

    def submitted(request: Request, body: object) -> dict:
        who = user_caller(request, request.headers.get("authorization"))
        key = bodies.idempotency_key(request.headers.get("idempotency-key"))
        body = bodies.mapping(body)
        user = who.acting_as(bodies.submitter(body) if body.get("user") is not None else None)
        if user is None:
            raise InputError("request", "is required: who submits the job", field="user")
        try:
            scheduler.config.run_as.account(user)  # a user with no OS account to run as is refused now
        except NoAccount as exc:
            raise NotAllowed(str(exc)) from None
        job_id, existing = scheduler.submit_once({**body, "user": user}, user, key, sees_all=who.admin or who.open)
        answer = {"id": str(job_id), "user": user, **({"existing": True} if existing else {})}
        if body.get("array") is not None:  # an array: its id, and its tasks' ids follow it
            answer["tasks"] = scheduler.store.array_size(job_id)
        return answer

    listing = JobList(scheduler)

    @app.get("/jobs")
    def jobs(status: Optional[str] = Query(default=None, max_length=MAX_NAME),
             user: Optional[str] = Query(default=None, max_length=MAX_NAME),
             limit: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID),
             ended_after: Optional[float] = Query(default=None, allow_inf_nan=False),
             after_id: Optional[int] = Query(default=None, ge=0, le=MAX_JOB_ID),
             array: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID),
             who: Identity = Depends(user_caller)) -> Response:
        """A page of jobs by id (at most ``PAGE_MAX``, or ``limit``): those of these ``status``es
        (comma-separated), of this ``user``, of job ``array``, that ended after ``ended_after`` (Unix
        time; active jobs always), with ids above ``after_id``. When more may follow, the
        ``X-Next-After-Id`` header names the ``after_id`` of the next page."""
        try:
            statuses = parse_statuses(status)
        except ValueError as exc:
            raise InputError("request", str(exc), field="status") from None
        chosen = JobFilter(statuses, user, ended_after, limit, after_id, array)
        text, following = listing.page(chosen, scheduler.clock(), who.may_see)
        headers = {NEXT_PAGE: str(following)} if following is not None else None
        return Response(text, media_type="application/json", headers=headers)

    @app.get("/jobs/{job_id}")
    def job(job_id: str, who: Identity = Depends(user_caller)) -> dict:
        return _shown(scheduler, scheduler.row(_id(job_id)), who)

    @app.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str, body: Any = Body(default=None), who: Identity = Depends(user_caller)) -> dict:
        named = bodies.cancel({} if body is None else body)
        if who.open:  # no credentials: the user the request names
            count = scheduler.cancel(_id(job_id), named)
        else:
            who.acting_as(named)  # a user naming someone else is refused, not ignored
            count = scheduler.cancel(_id(job_id), who.user, admin=who.admin)
        found = scheduler.store.owner(_id(job_id))  # an array's id is held by no job: its tasks were cancelled
        return {"cancelled": count, **({"array": True} if found is not None and found[1] else {})}

    @app.post("/jobs/{job_id}/lease")
    def lease(job_id: str, body: Any = Body(...), who: Identity = Depends(caller)) -> dict:
        attempt, steps_done = bodies.lease(body)
        skipped = bodies.skipped_checkpoints(body)  # the checkpoints its restore passed over, and why
        who.require_attempt(_id(job_id), attempt)
        return scheduler.lease(_id(job_id), attempt, steps_done, skipped)

    @app.post("/jobs/{job_id}/progress")
    def progress(job_id: str, body: Any = Body(...), who: Identity = Depends(caller)) -> dict:
        attempt, steps_done, steps_per_s = bodies.progress(body)
        measured = bodies.step_report(body)  # an elastic job's noise scale and how its step was made
        stall = bodies.data_stall(body)  # the share of its step time spent waiting for data
        who.require_attempt(_id(job_id), attempt)
        note = scheduler.progress(_id(job_id), attempt, steps_done, steps_per_s, stall=stall, **measured)
        history.report(_id(job_id), scheduler.clock(), steps_done, steps_per_s)  # the dashboard's throughput chart
        return {"note": note} if note else {}

    @app.get("/jobs/{job_id}/logs")
    def logs(job_id: str, attempt: Optional[int] = Query(default=None, ge=0, le=MAX_ATTEMPT),
             offset: int = Query(default=0, ge=0, le=MAX_LOG_OFFSET),
             limit: int = Query(default=LOG_CHUNK, ge=1, le=LOG_CHUNK), who: Identity = Depends(user_caller)) -> dict:
        found = scheduler.store.owner(_id(job_id))  # whose it is from its key first: a refusal reads nothing more
        if found is not None and not found[1] and not who.may_see(found[0]):
            raise NotAllowed(f"job {_id(job_id)} belongs to {found[0]!r}: only they or an admin may read its logs")
        row = scheduler.row(_id(job_id))
        latest = row.attempt
        number = latest if attempt is None else attempt
        if latest == 0 and attempt is None:
            return {"text": "", "offset": 0, "done": row.status in TERMINAL, "attempt": 0, "attempts": 0,
                    "status": row.status}
        if not 1 <= number <= latest:
            raise NotFound(f"job {row.id} has no attempt {number} (attempts: {latest})")
        path = scheduler.executor.log_path(row.id, number)
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

    @app.get("/history")
    def accounting(user: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   queue: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   state: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   since: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   until: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   by: Optional[str] = Query(default=None, max_length=usage.MAX_FILTER),
                   limit: Optional[int] = Query(default=None, ge=1, le=MAX_JOB_ID),
                   who: Identity = Depends(user_caller)) -> JSONResponse:
        now = scheduler.clock()
        filters = usage.parse_filters(user=user, queue=queue, state=state, since=since, until=until, now=now)
        grouping = usage.parse_grouping(by)
        table = usage.usage(*scheduler.store.accounting_columns(), filters, now)
        return JSONResponse(usage.report(table, who.may_see, grouping, limit))

    @app.get("/status")
    def status(who: Identity = Depends(user_caller)) -> dict:
        # each user's budgets against their limits: a user sees their own, an admin every user's
        budgets = scheduler.requests.budgets.shown(who.user, sees_all=who.admin or who.open)
        return {**scheduler.status(), "budgets": budgets}

    @app.post("/blocks")
    def add_blocks(body: Any = Body(...), who: Identity = Depends(user_caller)) -> dict:
        """Add privacy blocks (admins): ``{"blocks": [{"name", "epsilon", "delta"[, "rdp_orders"]}, ...]}``."""
        who.require_admin("adding privacy blocks")
        added = bodies.blocks(body)
        scheduler.add_blocks(added)
        return {"added": [block.name for block in added]}

    @app.get("/blocks")
    def blocks(who: Identity = Depends(user_caller)) -> dict:
        """The privacy blocks and their budgets: unlocked, granted (to jobs not started yet), consumed, left."""
        return scheduler.blocks()

    add_dashboard(app, scheduler, authenticator, history)
    add_metrics(app, scheduler, user_caller)  # GET /metrics: who may read /status may scrape it
    add_api_docs(app)  # last: it describes the routes above
    return app


def _shown(scheduler: Scheduler, row: JobRecord, who: Identity, now: float | None = None) -> dict:
    """A job as ``who`` may see it: what comes from its log only for its owner and admins."""
    return scheduler.job_info(row, now, private=who.may_see(row.user))


def _id(text: str) -> int:
    """A job id from a path; NotFound for anything that cannot be one (the state file holds 63 bits)."""
    try:
        job_id = int(text) if len(text) <= 20 else -1
    except ValueError:
        job_id = -1
    if not 1 <= job_id <= MAX_JOB_ID:
        raise NotFound(f"no job {clip(text)}")
    return job_id


def _input_error(exc: InputError) -> JSONResponse:
    """A 400 naming the field: ``{"detail": one line, "field": name or null, "message": what is wrong}``."""
    return JSONResponse(status_code=400, content={"detail": str(exc), "field": exc.field, "message": exc.message})


def _validation_error(exc: RequestValidationError) -> InputError:
    """FastAPI's own check of a request (a body that is not JSON, a query parameter out of range)
    as one InputError naming the field."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return InputError("request", "the body is not valid JSON")
    where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    if first.get("type") == "missing" and not where:
        return InputError("request", "the body must be a JSON object")
    message = str(first.get("msg", "is not valid")).replace("Input should be", "must be")
    return InputError("request", message, field=clip(".".join(where)) if where else None)


def _decode(data: bytes) -> tuple[str, int]:
    """The text of ``data`` and how many bytes it used: a character cut at the end waits for the next read."""
    for cut in range(0, min(4, len(data) + 1)):
        try:
            return data[: len(data) - cut].decode("utf-8"), len(data) - cut
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace"), len(data)
