"""Where a request goes: one table of the server's routes, each its method, path, handler and who may
call it (``callers.py``), and the app's routes laid out by walking it.

A handler is a plain function (``handlers.py``, ``dashboard.py``, ``api_docs.py``) whose first
parameter is the server it answers from (``callers.Served``); a parameter ``who`` gets the caller
the row's rule lets in, one ``caller`` the rule itself (a handler that checks its caller where it
chooses: a submit, in its thread). What the API document says of each route is ``api_docs.ROUTES``,
keyed by the same (method, path): ``tests/serve/test_routes.py`` holds the two to the same routes. An
optional resource adds its rows (and what the document says of them) from its own package
(``Resource.routes``), after the API's own.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass, field
from typing import Callable

from fastapi import Depends, FastAPI

from apportion.serve.http import api_docs, dashboard, handlers
from apportion.serve.http.bodies import IDEMPOTENCY_KEY_PATTERN
from apportion.serve.http.callers import ANYONE, ATTEMPT, READER, USER, Caller, Served, admin
from apportion.serve.resources import registry
from apportion.serve.resources.base import RouteRow

IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                   "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
                   "description": "Send a submit again with the same key: the job stored the first time answers."}
HIDDEN = {"include_in_schema": False}  # a page or an asset: not in the API document


@dataclass(frozen=True)
class Route:
    """One route: ``options`` are FastAPI's for it (``include_in_schema``, ``openapi_extra``, ...)."""

    method: str
    path: str
    handler: Callable
    who: Caller
    options: dict = field(default_factory=dict)


API: tuple[Route, ...] = (  # the API (docs/serve-contract.md); each optional resource's rows follow
    Route("post", "/jobs", handlers.submit, USER, {"openapi_extra": {"parameters": [IDEMPOTENCY_KEY]}}),
    Route("get", "/jobs", handlers.jobs, USER),
    Route("get", "/jobs/{job_id}", handlers.job, USER),
    Route("post", "/jobs/{job_id}/cancel", handlers.cancel, USER),  # its owner or an admin (Scheduler.cancel)
    Route("post", "/jobs/{job_id}/lease", handlers.lease, ATTEMPT),
    Route("post", "/jobs/{job_id}/progress", handlers.progress, ATTEMPT),
    Route("get", "/jobs/{job_id}/logs", handlers.logs, USER),  # its owner or an admin
    Route("get", "/history", handlers.accounting, USER),
    Route("get", "/status", handlers.status, USER),
)
PAGES: tuple[Route, ...] = (
    # the dashboard (dashboard.py)
    Route("get", "/", dashboard.page, ANYONE, HIDDEN),
    Route("get", "/dashboard/assets/{name}", dashboard.asset, ANYONE, HIDDEN),
    Route("get", "/dashboard/plotly.min.js", dashboard.plotly_js, ANYONE, HIDDEN),
    Route("get", "/dashboard/state", dashboard.state, READER, {"response_model": None}),
    Route("get", "/dashboard/jobs/{job_id}", dashboard.job, READER),
    # for operators: who may read /status may scrape it (views/metrics.py)
    Route("get", "/metrics", handlers.metrics, USER),
    # the API document's page (api_docs.py; /openapi.json is FastAPI's own)
    Route("get", "/docs", api_docs.docs_page, ANYONE, HIDDEN),
    Route("get", "/docs/assets/{name}", api_docs.docs_asset, ANYONE, HIDDEN),
)


RULES = {"anyone": ANYONE, "reader": READER, "user": USER, "attempt": ATTEMPT}  # a resource's row's ``who``


def resource_route(row: RouteRow) -> Route:
    """A row an optional resource adds (``resources/base.RouteRow``) as a row of the table."""
    return Route(row.method, row.path, row.handler, admin(row.admin_for) if row.who == "admin" else RULES[row.who])


def table() -> tuple[Route, ...]:
    """The table: the API's routes, each registered resource's (``resources/registry.py``), the pages."""
    return (*API, *(resource_route(row) for row in registry.routes()), *PAGES)


ROUTES: tuple[Route, ...] = table()


def add_routes(app: FastAPI, served: Served, routes: tuple[Route, ...] | None = None) -> None:
    """Each of ``routes`` (default :func:`table`, the resources registered now) on ``app``, answering from ``served``."""
    for route in table() if routes is None else routes:
        app.add_api_route(route.path, endpoint(route, served), methods=[route.method.upper()], **route.options)


def endpoint(route: Route, served: Served) -> Callable:
    """``route.handler`` as FastAPI calls it: ``served`` given, ``who`` found by the row's rule (and for an
    admin's route, checked to be an admin once the request is read), ``caller`` the rule; the rest of its
    parameters as the handler declares them, under the handler's name (the document's operation ids)."""
    handler, rule = route.handler, route.who
    hints = typing.get_type_hints(handler)
    declared = list(inspect.signature(handler).parameters.values())[1:]  # the first: the server
    names = {p.name for p in declared}
    bound = {"caller": rule.check} if "caller" in names else {}
    keyword = inspect.Parameter.KEYWORD_ONLY  # FastAPI passes every one by name
    parameters = [p.replace(annotation=hints.get(p.name, p.annotation), kind=keyword) for p in declared
                  if p.name != "caller"]
    passes_who = "who" in names
    if passes_who and rule.dependency is None:
        raise ValueError(f"{route.method} {route.path}: {handler.__name__} takes who, but {rule.name} may call it")
    if rule.dependency is not None:
        found = Depends(rule.dependency)
        if passes_who:
            parameters = [p.replace(default=found) if p.name == "who" else p for p in parameters]
        elif "caller" not in names:  # asked, though the handler does not use who it is
            parameters.append(inspect.Parameter("who", keyword, default=found))

    def call(kwargs: dict):
        who = kwargs.pop("who", None) if not passes_who else kwargs.get("who")
        if rule.admin is not None and who is not None:
            who.require_admin(rule.admin)
        return handler(served, **kwargs, **bound)

    if inspect.iscoroutinefunction(handler):
        async def answer(**kwargs):
            return await call(kwargs)
    else:
        def answer(**kwargs):
            return call(kwargs)
    functools.update_wrapper(answer, handler, assigned=("__module__", "__name__", "__qualname__", "__doc__"),
                             updated=())
    answer.__signature__ = inspect.Signature(parameters,
                                             return_annotation=hints.get("return", inspect.Signature.empty))
    return answer
