"""The API described: ``/openapi.json`` (OpenAPI 3.1) and a Swagger UI page at ``/docs``.

Each route gets a summary, a description and, where it takes a body, the schema of that body
(``api_schema.py``: documentation only; the hand-written checks stay the API's); the document
names the bearer credential. The page's Swagger UI comes from the ``fastapi-offline`` package,
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

from apportion.serve.api_schema import SCHEMAS
from apportion.serve.scheduler import NotFound

CDN = "https://cdn.jsdelivr.net"
CDN_ASSETS = {"swagger-ui-bundle.js": f"{CDN}/npm/swagger-ui-dist@5/swagger-ui-bundle.js",
              "swagger-ui.css": f"{CDN}/npm/swagger-ui-dist@5/swagger-ui.css"}
TYPES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "api_docs.js": "text/javascript"}

DESCRIPTION = """The API of `apportion serve`: submit, list, wait for and cancel training jobs, read their logs, \
and, for a job's own attempts, the lease and progress calls (docs/serve-contract.md).

**Credentials.** A server with users asks every call for `Authorization: Bearer CREDENTIAL` (a user's, from \
`apportion users add`, or the admin token); its attempts use their own `APPORTION_TOKEN`. A server without \
credentials (loopback only) takes the `user` a request names. Press *Authorize* to try the calls with yours.

**Errors** are JSON: `{"detail": one line}`, and for a field that does not fit (400) also `field` and `message`.

From Python: `from apportion import Client` (docs/serve.md, "Python client")."""


ERRORS = {400: "A field that does not fit, named in `field`", 401: "No credential, or a wrong one",
          403: "Not allowed (not the job's user, nor an admin)", 404: "No such job",
          409: "Not the job's current attempt; for a submit, a reused Idempotency-Key or over a budget of its user "
               "(`budget`, `held`, `limit`)",
          413: "The body is too large",
          429: "Too many wrong credentials; for a submit, over its user's submit rate (wait its Retry-After)",
          507: "The state directory is out of space"}


TAGS = {"jobs": "What users do: submit, list, wait for (poll one job), cancel, read logs.",
        "attempts": "What a job's running attempt calls, with its own credential (docs/serve-contract.md).",
        "server": "The server and its dashboard."}


@dataclass(frozen=True)
class RouteDoc:
    """What the document says of one route: ``body`` and ``answer`` name schemas of ``api_schema.SCHEMAS``."""

    tag: str
    summary: str
    description: str
    errors: tuple[int, ...] = (401,)
    body: str | None = None
    body_required: bool = True
    answer: str | None = None


ROUTES = {
    ("post", "/jobs"): RouteDoc(
        "jobs", "Submit a job",
        "Checks the job field by field and stores it. With an `Idempotency-Key` header, a submit sent again with the "
        "same key answers with the job stored the first time (`existing: true`) instead of storing it twice.",
        (400, 401, 403, 409, 413, 429, 507), body="JobSpec", answer="Submitted"),
    ("get", "/jobs"): RouteDoc(
        "jobs", "List the jobs",
        "Every job, oldest first, with its status, reason, progress and estimates; a failed job's last log lines "
        "only for its owner and admins."),
    ("get", "/jobs/{job_id}"): RouteDoc("jobs", "One job", "The job's fields, as in the list.", (401, 404)),
    ("post", "/jobs/{job_id}/cancel"): RouteDoc(
        "jobs", "Cancel a job",
        "A queued job is cancelled at once; a running one gets SIGTERM (SIGKILL after the grace period). Its user "
        "or an admin only.", (400, 401, 403, 404, 507), body="Cancel", body_required=False),
    ("get", "/jobs/{job_id}/logs"): RouteDoc(
        "jobs", "Read a job's log",
        "Up to `limit` bytes of an attempt's output (default the latest) from byte `offset`; `done` once that "
        "attempt has ended and all of it was read. Its owner and admins only.", (400, 401, 403, 404)),
    ("post", "/jobs/{job_id}/lease"): RouteDoc(
        "attempts", "Renew an attempt's lease",
        "For the job's own attempt, with its credential: `renew: true` until the round's end, or `renew: false` "
        "(checkpoint and exit 75).", (400, 401, 403, 404, 409), body="Lease"),
    ("post", "/jobs/{job_id}/progress"): RouteDoc(
        "attempts", "Report an attempt's progress",
        "For the job's own attempt, with its credential: the steps done and its speed, which the scheduler's "
        "estimates use.", (400, 401, 403, 404, 409), body="Progress"),
    ("get", "/history"): RouteDoc(
        "jobs", "Jobs' accounting",
        "The jobs that ended (or `state=`) with user, queue, GPU types, GPU-hours, wait, run time, attempts, "
        "preemptions and exit; filters `user`, `queue`, `state`, `since`, `until`; `by=user|type|queue` totals; "
        "as `apportion history` prints them.", (400, 401)),
    ("get", "/metrics"): RouteDoc(
        "server", "Prometheus metrics",
        "The server in Prometheus's text format: slots busy per GPU type, jobs by status and queue, round times, "
        "preemptions, lease answers, request latencies and each user's GPU-seconds (docs/serve.md, Metrics).",
        (401, 403)),
    ("get", "/status"): RouteDoc(
        "server", "The server",
        "Its policy, round, slots and who holds them, jobs by status, hung attempts and the time a round takes."),
    ("post", "/blocks"): RouteDoc(
        "server", "Add privacy blocks",
        "Admins only: data blocks with a privacy budget (docs/privacy.md), all or none, each arriving now; one "
        "accounting (ε-δ, or Rényi at the same orders) a server.", (400, 401, 403, 413, 507), body="Blocks"),
    ("get", "/blocks"): RouteDoc(
        "server", "The privacy blocks",
        "The privacy policy and each block's budget in ε: unlocked, granted (to jobs not started yet), consumed "
        "(by jobs that started) and left; its claims arrived and waiting, as `apportion blocks list`."),
    ("get", "/dashboard/state"): RouteDoc(
        "server", "The dashboard's view",
        "What the page at / draws: slots, current jobs, the cluster over time, the privacy blocks. Readable "
        "without a credential from this machine."),
    ("get", "/dashboard/jobs/{job_id}"): RouteDoc(
        "server", "The dashboard's view of one job",
        "Its fields, events, progress over time and, for its owner, its log.", (401, 404)),
}


def add_api_docs(app: FastAPI) -> None:
    """``/openapi.json`` with :data:`ROUTES` laid over what FastAPI finds and the bearer scheme, and the
    page at ``/docs``."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = described(get_openapi(title=app.title, version=app.version, description=DESCRIPTION,
                                                       routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi

    @app.get("/docs", include_in_schema=False)
    def docs_page() -> HTMLResponse:
        return HTMLResponse(_page(), headers={"Content-Security-Policy": csp(), "Cache-Control": "no-cache"})

    @app.get("/docs/assets/{name}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
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
    schemas.update(SCHEMAS)
    components["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "A user's credential (apportion users add), the admin token, or an attempt's APPORTION_TOKEN; "
                       "none on a server without credentials."}}
    schema["security"] = [{"bearer": []}, {}]  # {}: a server without credentials asks for none
    schema["tags"] = [{"name": name, "description": text} for name, text in TAGS.items()]
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            parameters = [p for p in operation.pop("parameters", []) if p.get("name") != "authorization"]
            if parameters:
                operation["parameters"] = parameters
            operation.get("responses", {}).pop("422", None)
            doc = ROUTES.get((method, path))
            if doc is None:
                continue
            operation["tags"], operation["summary"], operation["description"] = [doc.tag], doc.summary, doc.description
            if doc.body:
                operation["requestBody"] = {"required": doc.body_required, "content": {"application/json": {
                    "schema": _ref(doc.body)}}}
            if doc.answer:
                operation["responses"]["200"] = {"description": "Done", "content": {"application/json": {
                    "schema": _ref(doc.answer)}}}
            for code in doc.errors:
                operation["responses"][str(code)] = {"description": ERRORS[code], "content": {
                    "application/json": {"schema": _ref("Error")}}}
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
    page = resources.files("apportion.serve").joinpath("assets", "api_docs.html").read_text(encoding="utf-8")
    for name, url in CDN_ASSETS.items():
        page = page.replace(f"{{{name}}}", f"docs/assets/{name}" if local else url)
    return page


@lru_cache(maxsize=4)
def _asset(name: str) -> bytes | None:
    if name == "api_docs.js":
        return resources.files("apportion.serve").joinpath("assets", name).read_bytes()
    folder = swagger_ui_dir()
    return (folder / name).read_bytes() if folder is not None else None
