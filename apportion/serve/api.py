"""The HTTP API of ``apportion serve`` (docs/serve-contract.md), over a Scheduler.

Who is asking is the ``user`` field of a request (the client sends its OS user by default).
On loopback that is trusted as given; a server bound to any other address requires a bearer
token from every caller, jobs included.
"""

from __future__ import annotations

import secrets
from typing import Any, Optional

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from apportion.core.errors import InputError
from apportion.serve import bodies
from apportion.serve.bounds import MAX_ATTEMPT, MAX_JOB_ID, MAX_LOG_OFFSET, clip
from apportion.serve.scheduler import Conflict, Forbidden, NotFound, Scheduler
from apportion.serve.state import TERMINAL

LOG_CHUNK = 256 * 1024


def create_app(scheduler: Scheduler, token: str | None = None) -> FastAPI:
    def authorize(authorization: Optional[str] = Header(default=None)) -> None:
        if token is None:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip(), token):
            raise HTTPException(status_code=401, detail="this server requires a token: Authorization: Bearer TOKEN"
                                " (apportion --token, or APPORTION_TOKEN)")

    app = FastAPI(title="apportion", dependencies=[Depends(authorize)], docs_url=None, redoc_url=None)

    @app.exception_handler(NotFound)
    def _not_found(request, exc):
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(Forbidden)
    def _forbidden(request, exc):
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.exception_handler(Conflict)
    def _conflict(request, exc):
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(InputError)
    def _bad_input(request, exc: InputError):
        return _input_error(exc)

    @app.exception_handler(RequestValidationError)
    def _unreadable(request, exc: RequestValidationError):
        return _input_error(_validation_error(exc))

    @app.post("/jobs")
    def submit(body: Any = Body(...)) -> dict:
        job_id = scheduler.submit(bodies.mapping(body), bodies.submitter(body))
        return {"id": str(job_id)}

    @app.get("/jobs")
    def jobs() -> list[dict]:
        now = scheduler.clock()
        return [scheduler.job_info(row, now) for row in scheduler.store.jobs()]

    @app.get("/jobs/{job_id}")
    def job(job_id: str) -> dict:
        return scheduler.job_info(scheduler.row(_id(job_id)))

    @app.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str, body: Any = Body(default=None)) -> dict:
        scheduler.cancel(_id(job_id), bodies.cancel({} if body is None else body))
        return {}

    @app.post("/jobs/{job_id}/lease")
    def lease(job_id: str, body: Any = Body(...)) -> dict:
        return scheduler.lease(_id(job_id), *bodies.lease(body))

    @app.post("/jobs/{job_id}/progress")
    def progress(job_id: str, body: Any = Body(...)) -> dict:
        note = scheduler.progress(_id(job_id), *bodies.progress(body))
        return {"note": note} if note else {}

    @app.get("/jobs/{job_id}/logs")
    def logs(job_id: str, attempt: Optional[int] = Query(default=None, ge=0, le=MAX_ATTEMPT),
             offset: int = Query(default=0, ge=0, le=MAX_LOG_OFFSET),
             limit: int = Query(default=LOG_CHUNK, ge=1, le=LOG_CHUNK)) -> dict:
        row = scheduler.row(_id(job_id))
        latest = row["attempt"]
        number = latest if attempt is None else attempt
        if latest == 0 and attempt is None:
            return {"text": "", "offset": 0, "done": row["status"] in TERMINAL, "attempt": 0, "attempts": 0,
                    "status": row["status"]}
        if not 1 <= number <= latest:
            raise NotFound(f"job {row['id']} has no attempt {number} (attempts: {latest})")
        path = scheduler.executor.log_path(row["id"], number)
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read(limit)
        except FileNotFoundError:
            data = b""
        text, used = _decode(data)
        live = row["pid"] is not None and number == latest
        done = not live and len(data) < limit and used == len(data)
        return {"text": text, "offset": offset + used, "done": done, "attempt": number, "attempts": latest,
                "status": row["status"]}

    @app.get("/status")
    def status() -> dict:
        return scheduler.status()

    return app


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
