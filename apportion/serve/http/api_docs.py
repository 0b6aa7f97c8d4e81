"""The API described: ``/openapi.json`` (OpenAPI 3.1) and a Swagger UI page at ``/docs``.

Each route gets a summary, a description, every status it can answer (what the server alone
judges said in its 400) and, where it takes a body, the schema of that body (``api_schema.py``:
documentation only; the hand-written checks stay the API's); the document names the bearer
credential. ``tests/serve/test_api_contract.py`` holds a live server to it with schemathesis. The page's Swagger UI comes from the ``fastapi-offline`` package,
served from here, so that it needs no network; without that package it is loaded from a CDN
(jsDelivr). Either way the page runs only scripts from those places (its own start-up included),
under a Content-Security-Policy as strict as the dashboard's.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response

from apportion.serve.http import api_schema
from apportion.serve.http.api_schema import PARAMETERS
from apportion.serve.resources import registry
from apportion.serve.resources.base import STORES
from apportion.serve.views.job_list import NEXT_PAGE, PAGE_MAX
from apportion.serve.scheduler.scheduler import NotFound

CDN = "https://cdn.jsdelivr.net"
CDN_ASSETS = {"swagger-ui-bundle.js": f"{CDN}/npm/swagger-ui-dist@5/swagger-ui-bundle.js",
              "swagger-ui.css": f"{CDN}/npm/swagger-ui-dist@5/swagger-ui.css"}
TYPES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "api_docs.js": "text/javascript"}

DESCRIPTION = """The API of `apportion serve`: submit, list, wait for and cancel training jobs, read their logs, \
and, for a job's own attempts, the lease and progress calls (docs/serve-contract.md).

**Credentials.** A server with users asks every call for `Authorization: Bearer CREDENTIAL` (a user's, from \
`apportion users add`, or the admin token); its attempts use their own `APPORTION_TOKEN`. A server without \
credentials (loopback only) takes the `user` a request names. Press *Authorize* to try the calls with yours.

**Errors** are JSON: `{"detail": one line}`, and for a field that does not fit (400) also `field` and `message`. \
A method a path does not serve is a 405 whose `Allow` header names every method it does.

From Python: `from apportion import Client` (docs/serve.md, "Python client")."""


ERRORS = {400: "A field, query parameter or header that does not fit, named in `field`",
          401: "No credential, or a wrong one",
          403: "Not allowed: not the job's user nor an admin, an attempt's credential where a person's is needed, "
               "or a user with no account to run as",
          404: "No such job (or attempt)",
          409: "In conflict with what the server holds: not the job's current attempt, or over one of the user's "
               "quotas (the detail names the limit and what the user holds)",
          413: "The body is too large (the largest valid job fits)",
          429: "Too many requests: too many wrong credentials from this client, or over the user's rate of "
               "submits; Retry-After says when to try again",
          507: "The state directory is out of space"}
# what any route may answer, whatever it does: a malformed Content-Length (400), a credential that is
# missing or wrong (401) or an attempt's where a person's is needed (403), a body over the server's
# limit on any method (413, edge.py), a client over its limit of wrong credentials (429, edge.py)
EVERY_ROUTE = (400, 401, 403, 413, 429)
# what a route that stores something may answer besides: a conflict or a user over a quota (409), the
# state directory out of space (507); a resource's rows say it as resources/base.py's STORES
STORING = STORES
HEADERS = {401: {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
           429: {"Retry-After": {"description": "Seconds to wait before trying again",
                                 "schema": {"type": "string", "pattern": "^[0-9]+$"}}}}


TAGS = {"jobs": "What users do: submit, list, wait for (poll one job), cancel, read logs.",
        "attempts": "What a job's running attempt calls, with its own credential (docs/serve-contract.md).",
        "server": "The server and its dashboard."}


SUBMIT_REFUSED = "; ".join((  # what the optional resources refuse of the job fields they read after `after`
    "A field that does not fit, named in `field`; nothing is stored. Besides what the schema says, the server "
    "refuses what only it can know: a `model` unknown to the perf catalog or a `layout` that does not fit its "
    "`gpus`", "`gpu_types` none of which this server offers, or more `gpus`, `cpus` or `memory_gb` than it has",
    "a `workdir` or `checkpoint_dir` that is not a directory the user may use",
    "`after` naming a job that does not exist or is another user's", *registry.said("refused_at_submit"),
    "a `notify` host outside --notify-hosts", "an `array` whose text is none of its forms or that would take "
    "the user past their active jobs", "`total_steps` together with `epochs`/`steps_per_epoch`, or neither",
    "on a server without credentials, no `user`", "an `Idempotency-Key` header that is not 1 to 128 letters, "
    "digits and `- _ . :`", "a body that is not a JSON object sent as application/json."))


@dataclass(frozen=True)
class RouteDoc:
    """What the document says of one route: ``body`` and ``answer`` name schemas of ``api_schema.SCHEMAS``;
    ``errors``: what it answers besides :data:`EVERY_ROUTE`; ``refused``: its 400 where it says more than
    :data:`ERRORS`; ``answer_type``: the media type of its 200."""

    tag: str
    summary: str
    description: str
    errors: tuple[int, ...] = ()
    body: str | None = None
    body_required: bool = True
    answer: str | None = None
    refused: str | None = None
    answer_type: str = "application/json"
    answer_headers: tuple[tuple[str, str], ...] = ()  # (name, what it says) of the headers its 200 may carry


OWN = {
    ("post", "/jobs"): RouteDoc(
        "jobs", "Submit a job",
        "Checks the job field by field and stores it. With an `Idempotency-Key` header, a submit sent again with the "
        "same key answers with the job stored the first time (`existing: true`) instead of storing it twice; the "
        "same key with a different job is a 409.",
        STORING, body="JobSpec", answer="Submitted", refused=SUBMIT_REFUSED),
    ("get", "/jobs"): RouteDoc(
        "jobs", "List the jobs",
        f"A page of jobs (at most {PAGE_MAX:,}, or `limit`), oldest first, with their status, reason, progress and "
        "estimates; a failed job's last log lines only for its owner and admins. `after_id` starts the page after "
        f"that id; `{NEXT_PAGE}` says where the next one starts.",
        refused="A query parameter that does not fit, named in `field` (a `status` that is none of the statuses).",
        answer_headers=((NEXT_PAGE, "When more jobs may follow: the `after_id` of the next page."),)),
    ("get", "/jobs/{job_id}"): RouteDoc("jobs", "One job", "The job's fields, as in the list.", (404,)),
    ("post", "/jobs/{job_id}/cancel"): RouteDoc(
        "jobs", "Cancel a job",
        "A queued job is cancelled at once; a running one gets SIGTERM (SIGKILL after the grace period). Its user "
        "or an admin only; a job that has ended already is a 409.", (404, *STORING), body="Cancel",
        body_required=False),
    ("get", "/jobs/{job_id}/logs"): RouteDoc(
        "jobs", "Read a job's log",
        "Up to `limit` bytes of an attempt's output (default the latest) from byte `offset`; `done` once that "
        "attempt has ended and all of it was read. Its owner and admins only.", (404,)),
    ("post", "/jobs/{job_id}/lease"): RouteDoc(
        "attempts", "Renew an attempt's lease",
        "For the job's own attempt, with its credential: `renew: true` until the round's end, or `renew: false` "
        "(checkpoint and exit 75). Another attempt than the job's current one is a 409.", (404, *STORING),
        body="Lease"),
    ("post", "/jobs/{job_id}/progress"): RouteDoc(
        "attempts", "Report an attempt's progress",
        "For the job's own attempt, with its credential: the steps done and its speed, which the scheduler's "
        "estimates use. Another attempt than the job's current one is a 409.", (404, *STORING), body="Progress",
        refused="A field that does not fit, named in `field`; besides what the schema says, `steps_done` past the "
                "job's total_steps, and `fetch_stall` and `preprocess_stall` that sum past `data_stall`."),
    ("get", "/history"): RouteDoc(
        "jobs", "Jobs' accounting",
        "The jobs that ended (or `state=`) with user, queue, GPU types, GPU-hours, wait, run time, attempts, "
        "preemptions and exit; filters `user`, `queue`, `state`, `since`, `until`; `by=user|type|queue` totals; "
        "as `apportion history` prints them.",
        refused="A query parameter that does not fit, named in `field`: a `state` that is none of the statuses, a "
                "`since` or `until` that is not a date or a time ago (2026-01-31, 7d), a `by` other than user, "
                "type or queue."),
    ("get", "/metrics"): RouteDoc(
        "server", "Prometheus metrics",
        "The server in Prometheus's text format: slots busy per GPU type, jobs by status and queue, round times, "
        "preemptions, lease answers, request latencies and each user's GPU-seconds (docs/serve.md, Metrics).",
        answer_type="text/plain"),
    ("get", "/status"): RouteDoc(
        "server", "The server",
        "Its policy, round, slots and who holds them, jobs by status, hung attempts and the time a round takes."),
    ("get", "/dashboard/state"): RouteDoc(
        "server", "The dashboard's view",
        "What the page at / draws: slots, the running jobs, the first 100 waiting and the last 50 ended (counts "
        "for the rest: `waiting_not_shown`, `finished_not_shown`), the cluster over time"
        + "".join(f", {part}" for part in registry.said("on_dashboard"))  # e.g. the privacy blocks
        + ". Readable without a credential from this machine (the view of the round, made once a round)."),
    ("get", "/dashboard/jobs/{job_id}"): RouteDoc(
        "server", "The dashboard's view of one job",
        "Its fields, events, progress over time and, for its owner, its log.", (404,)),
}


def route_docs() -> dict[tuple[str, str], RouteDoc]:
    """What the document says of each route: the API's own, and each registered resource's rows' ``doc``."""
    return {**OWN, **{(row.method, row.path): RouteDoc(**row.doc) for row in registry.routes()}}


ROUTES = route_docs()


def add_api_docs(app: FastAPI) -> None:
    """``/openapi.json``: :data:`ROUTES` laid over what FastAPI finds and the bearer scheme (the page at
    ``/docs`` and its assets are rows of ``routes.py``)."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = described(get_openapi(title=app.title, version=app.version, description=DESCRIPTION,
                                                       routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi


def docs_page(at) -> HTMLResponse:
    """The Swagger UI page over ``/openapi.json``."""
    return HTMLResponse(_page(), headers={"Content-Security-Policy": csp(), "Cache-Control": "no-cache"})


def docs_asset(at, name: str) -> Response:
    """One of the page's scripts or styles."""
    data = _asset(name) if name in TYPES else None
    if data is None:
        raise NotFound(f"no asset {name[:60]!r}")
    return Response(data, media_type=TYPES[name], headers={"Cache-Control": "max-age=86400"})


def described(schema: dict) -> dict:
    """FastAPI's document of the routes with their summaries, bodies, answers and errors, and the bearer
    scheme in place of each route's Authorization header. No 422: the API answers a bad request 400."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas.update(api_schema.schemas())
    components["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "A user's credential (apportion users add), the admin token, or an attempt's APPORTION_TOKEN; "
                       "none on a server without credentials."}}
    schema["security"] = [{"bearer": []}, {}]  # {}: a server without credentials asks for none
    schema["tags"] = [{"name": name, "description": text} for name, text in TAGS.items()]
    docs = route_docs()
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            parameters = [p for p in operation.pop("parameters", []) if p.get("name") != "authorization"]
            for parameter in parameters:  # what the server reads in a parameter's text
                told = PARAMETERS.get((method, path), {}).get(parameter["name"])
                if told is not None:
                    parameter["schema"], parameter["description"] = told, told["description"]
            if parameters:
                operation["parameters"] = parameters
            operation.get("responses", {}).pop("422", None)
            doc = docs.get((method, path))
            if doc is None:
                continue
            operation["tags"], operation["summary"], operation["description"] = [doc.tag], doc.summary, doc.description
            if doc.body:
                operation["requestBody"] = {"required": doc.body_required, "content": {"application/json": {
                    "schema": _ref(doc.body)}}}
            if doc.answer or doc.answer_type != "application/json":
                answer = _ref(doc.answer) if doc.answer else {"type": "string"}
                operation["responses"]["200"] = {"description": "Done", "content": {doc.answer_type: {
                    "schema": answer}}}
            if doc.answer_headers:
                operation["responses"]["200"]["headers"] = {name: {"description": said, "schema": {
                    "type": "string", "pattern": "^[0-9]+$"}} for name, said in doc.answer_headers}
            for code in sorted({*EVERY_ROUTE, *doc.errors}):
                said = doc.refused if code == 400 and doc.refused else ERRORS[code]
                answer = {"description": said, "content": {"application/json": {"schema": _ref("Error")}}}
                operation["responses"][str(code)] = {**answer, **({"headers": HEADERS[code]} if code in HEADERS else {})}
    return schema


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def csp() -> str:
    """The page's Content-Security-Policy: scripts and styles from here (and the CDN without the package),
    Swagger UI's inline styles, calls to this server only, never framed."""
    cdn = "" if swagger_ui_dir() else f" {CDN}"
    return (f"default-src 'self'; script-src 'self'{cdn}; style-src 'self' 'unsafe-inline'{cdn}; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def swagger_ui_dir() -> Path | None:
    """The folder of Swagger UI's files in the ``fastapi-offline`` package (found, not imported); None without it."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "static"
    return folder if all((folder / name).is_file() for name in CDN_ASSETS) else None


def _page() -> str:
    local = swagger_ui_dir() is not None
    page = resources.files("apportion.serve.http").joinpath("assets", "api_docs.html").read_text(encoding="utf-8")
    for name, url in CDN_ASSETS.items():
        page = page.replace(f"{{{name}}}", f"docs/assets/{name}" if local else url)
    return page


@lru_cache(maxsize=4)
def _asset(name: str) -> bytes | None:
    if name == "api_docs.js":
        return resources.files("apportion.serve.http").joinpath("assets", name).read_bytes()
    folder = swagger_ui_dir()
    return (folder / name).read_bytes() if folder is not None else None
