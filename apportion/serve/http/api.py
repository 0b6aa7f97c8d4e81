"""The HTTP API of ``apportion serve`` (docs/serve-contract.md), over a Scheduler.

Every call's caller is an :class:`~apportion.serve.accounts.auth.Identity`, from its bearer credential
(auth.py). Users list jobs and see the server; a job's owner or an admin cancels it and reads
its logs; an attempt's own credential renews that attempt's lease and reports its progress.
A server with no credentials configured (loopback only) takes the ``user`` a request names.
Where each request goes, and who may make it: ``routes.py``; what each does: ``handlers.py``.
"""

from __future__ import annotations

import inspect
import math

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from apportion.core.errors import InputError
from apportion.core.version import VERSION
from apportion.serve.accounts.auth import Authenticator, NotAllowed, TooManyFailures
from apportion.serve.accounts.budgets import OverQuota, TooFast
from apportion.serve.base.bounds import MAX_BODY, clip
from apportion.serve.base.space import NoSpace
from apportion.serve.http.api_docs import add_api_docs
from apportion.serve.http.callers import Served
from apportion.serve.http.dashboard import AnonymousState
from apportion.serve.http.edge import LimitBody, LimitFailures, method_not_allowed
from apportion.serve.http.routes import add_routes
from apportion.serve.scheduler.scheduler import Conflict, Forbidden, NotFound, Scheduler
from apportion.serve.views.history import History
from apportion.serve.views.job_list import JobList
from apportion.serve.views.metrics import add_metrics

# FastAPI 0.142+ asks OpenTelemetry for its providers on every request; the server's figures are its
# own /metrics, so FastAPI's spans, metrics and logs are off where it has them
_NO_TELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}
                 if "telemetry" in inspect.signature(FastAPI).parameters else {})
# a refusal the scheduler or the accounts raise, and the status it answers (with {"detail": its text})
REFUSALS = {NotAllowed: 403, NotFound: 404, Forbidden: 403, Conflict: 409}


def create_app(scheduler: Scheduler, token: str | None = None, history: History | None = None,
               max_body: int = MAX_BODY, authenticator: Authenticator | None = None) -> FastAPI:
    """The API over ``scheduler``; ``token``: the server's admin token (auth.py), if any;
    ``history``: what the dashboard draws over time (dashboard.py; empty if not given);
    ``max_body``: the most bytes of a request body read (edge.py); ``authenticator``: who checks
    credentials and counts wrong ones (by default one over ``scheduler``'s state file and ``token``)."""
    # the credentials are the state file's (the one thing the app takes of the scheduler's store, once)
    authenticator = authenticator or Authenticator(scheduler.store, token)
    history = history if history is not None else History()
    app = FastAPI(title="apportion", version=VERSION, docs_url=None, redoc_url=None,  # /docs: api_docs.py
                  **_NO_TELEMETRY)
    app.add_middleware(LimitBody, most=max_body)
    app.add_middleware(LimitFailures, authenticator=authenticator)  # outermost: before anything else
    add_error_answers(app)
    scrape = add_metrics(app, scheduler)  # the middleware timing every request; GET /metrics
    served = Served(scheduler, authenticator, history, JobList(scheduler), scrape, AnonymousState(scheduler, history))
    app.state.served = served  # for the rules of who may call (callers.py)
    add_routes(app, served)
    add_api_docs(app)  # last: it describes the routes above
    return app


def add_error_answers(app: FastAPI) -> None:
    """What each refusal answers: its status, ``{"detail": one line}`` and what more it names."""
    for refusal, code in REFUSALS.items():
        app.add_exception_handler(refusal, _refused(code))

    @app.exception_handler(TooManyFailures)
    def _too_many(request, exc: TooManyFailures):
        return JSONResponse(status_code=429, content={"detail": str(exc)},
                            headers={"Retry-After": str(exc.retry_after), "WWW-Authenticate": "Bearer"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 405:  # Allow: every method the path serves, not only the first route's
            return method_not_allowed(request.app.routes, request.scope)
        return await http_exception_handler(request, exc)

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


def _refused(code: int):
    def answer(request, exc):
        return JSONResponse(status_code=code, content={"detail": str(exc)})
    return answer


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
