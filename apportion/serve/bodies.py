"""The bodies of the API's calls (docs/serve-contract.md), checked field by field.

Each function takes a request's parsed JSON and returns its checked fields, or raises an
InputError naming the first field that does not fit (the API answers it with a 400). What
fits depends on the job (``steps_done`` at most its ``total_steps``) is checked later, in
``requests.py``; unknown fields are ignored, so a newer client can talk to an older server.
"""

from __future__ import annotations

from apportion.core.errors import InputError
from apportion.serve.bounds import MAX_ATTEMPT, MAX_STEPS, check_int, check_line, check_number

SOURCE = "request"


def mapping(body: object) -> dict:
    """``body`` if it is a JSON object; else InputError."""
    if not isinstance(body, dict):
        raise InputError(SOURCE, f"the body must be a JSON object, got {type(body).__name__}")
    return body


def submitter(body: object) -> str:
    """The ``user`` of a submit body: who submits the job (required, one line)."""
    user = mapping(body).get("user")
    if not isinstance(user, str) or not user.strip():
        raise InputError(SOURCE, "is required: who submits the job", field="user")
    return check_line(user.strip(), "user", SOURCE)


def cancel(body: object) -> str:
    """The ``user`` of a cancel body: who asks (default "", which owns no job)."""
    user = mapping(body).get("user", "")
    if not isinstance(user, str):
        raise InputError(SOURCE, f"must be a string, got {type(user).__name__}", field="user")
    return check_line(user, "user", SOURCE)


def lease(body: object) -> tuple[int, int | None]:
    """``attempt`` and the optional ``steps_done`` of a lease call."""
    body = mapping(body)
    steps = body.get("steps_done")
    return _attempt(body), None if steps is None else _steps_done(steps)


def progress(body: object) -> tuple[int, int, float | None]:
    """``attempt``, ``steps_done`` and the optional ``steps_per_s`` (a finite number >= 0) of a
    progress report. A rate beyond what is plausible is not an error here: it is clamped where
    it moves the estimates (``requests.py``)."""
    body = mapping(body)
    attempt = _attempt(body)
    steps = _steps_done(body.get("steps_done"))
    rate = body.get("steps_per_s")
    if rate is not None:
        rate = check_number(rate, "steps_per_s", SOURCE, least=0.0, most=float("inf"))
    return attempt, steps, rate


def _attempt(body: dict) -> int:
    return check_int(body.get("attempt"), "attempt", SOURCE, least=0, most=MAX_ATTEMPT)


def _steps_done(value: object) -> int:
    return check_int(value, "steps_done", SOURCE, least=0, most=MAX_STEPS)
