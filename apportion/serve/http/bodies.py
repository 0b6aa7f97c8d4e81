"""The bodies of the API's calls (docs/serve-contract.md), checked field by field.

Each function takes a request's parsed JSON and returns its checked fields, or raises an
InputError naming the first field that does not fit (the API answers it with a 400). What
fits depends on the job (``steps_done`` at most its ``total_steps``) is checked later, in
``requests.py``; unknown fields are ignored, so a newer client can talk to an older server.
"""

from __future__ import annotations

import json
import re

from apportion.core.errors import InputError
from apportion.runtime.client import MAX_SKIPPED, MAX_SKIPPED_CHARS
from apportion.runtime.stalls import FETCH, PREPROCESS, STALL
from apportion.serve.base.bounds import (
    MAX_ATTEMPT, MAX_BATCH, MAX_GPUS, MAX_IDEMPOTENCY_KEY, MAX_NOISE_SCALE, MAX_STEP_S, MAX_STEPS, check_int,
    check_line, check_number, json_object,
)

SOURCE = "request"


def json_body(data: bytes, content_type: str | None) -> object:
    """A request's body as the API reads it: the value of a body sent as JSON (Content-Type
    ``application/json`` or ``application/*+json``), the bytes of one sent as anything else,
    None for no body; InputError when JSON does not parse. What the value must be is checked later."""
    if not data:
        return None
    media = (content_type or "").partition(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    if kind != "application" or "/" in subtype or not (subtype == "json" or subtype.endswith("+json")):
        return data
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past what Python parses
        raise InputError(SOURCE, "the body is not valid JSON") from None


def mapping(body: object) -> dict:
    """``body`` if it is a JSON object; else InputError."""
    return json_object(body, SOURCE)


def submitter(body: object) -> str:
    """The ``user`` of a submit body: who submits the job (required, one line)."""
    user = mapping(body).get("user")
    if not isinstance(user, str) or not user.strip():
        raise InputError(SOURCE, "is required: who submits the job", field="user")
    return check_line(user.strip(), "user", SOURCE)


def idempotency_key(header: str | None) -> str | None:
    """A submit's ``Idempotency-Key`` header (None: not given): 1 to MAX_IDEMPOTENCY_KEY letters,
    digits and ``- _ . :``, else InputError."""
    if header is None:
        return None
    if not _KEY.fullmatch(header):
        raise InputError(SOURCE, f"must be 1 to {MAX_IDEMPOTENCY_KEY} characters, each a letter, a digit or one of"
                         f" - _ . : (got {len(header)} characters)", field="Idempotency-Key")
    return header


IDEMPOTENCY_KEY_PATTERN = rf"^[A-Za-z0-9_.:-]{{1,{MAX_IDEMPOTENCY_KEY}}}$"  # as the API document says it
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN.strip("^$"))


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


def step_report(body: object) -> dict:
    """The optional fields an elastic job's progress report adds (``apportion.runtime.elastic``):
    ``noise_scale`` (examples), ``sync_s`` (seconds a step synchronises), ``micro_batch``
    (examples), ``micro_batches`` (a step's, per replica), ``nodes`` and ``examples_done`` (a job
whose target is in examples); those absent are left out."""
    body = mapping(body)
    checks = {
        "noise_scale": lambda v: check_number(v, "noise_scale", SOURCE, least=0.0, most=MAX_NOISE_SCALE),
        "sync_s": lambda v: check_number(v, "sync_s", SOURCE, least=0.0, most=MAX_STEP_S),
        "micro_batch": lambda v: check_number(v, "micro_batch", SOURCE, least=1.0, most=MAX_BATCH),
        "micro_batches": lambda v: check_int(v, "micro_batches", SOURCE, least=1, most=MAX_BATCH),
        "nodes": lambda v: check_int(v, "nodes", SOURCE, least=1, most=MAX_GPUS),
        "examples_done": lambda v: check_int(v, "examples_done", SOURCE, least=0, most=MAX_STEPS),
    }
    return {name: check(body[name]) for name, check in checks.items() if body.get(name) is not None}


STALL_SLACK = 0.01  # how far a report's fetch and pre-processing parts may sum past its stall (rounding)


def data_stall(body: object) -> dict[str, float]:
    """The optional data stall of a progress report (``apportion.runtime.stalls``): ``data_stall``,
    the share of step time spent waiting for data, and its parts ``fetch_stall`` and
    ``preprocess_stall`` where the job knows them; each a number from 0 to 1, the parts together
    no more than the whole. Empty when the report has none."""
    body = mapping(body)
    said = {name: check_number(body[name], name, SOURCE, least=0.0, most=1.0)
            for name in (STALL, FETCH, PREPROCESS) if body.get(name) is not None}
    parts = [name for name in (FETCH, PREPROCESS) if name in said]
    if parts and STALL not in said:
        raise InputError(SOURCE, f"{parts[0]} is a part of data_stall, which the report does not give", field=parts[0])
    if parts and sum(said[name] for name in parts) > said[STALL] + STALL_SLACK:
        raise InputError(SOURCE, f"fetch_stall and preprocess_stall are parts of data_stall ({said[STALL]:g}): they"
                         f" sum to {sum(said[name] for name in parts):g}", field=parts[-1])
    return said


def skipped_checkpoints(body: object) -> tuple[str, ...]:
    """The optional ``skipped_checkpoints`` of a lease call: the checkpoints an attempt's restore
    passed over, "step-XXXXXXXX.pt: why" each (at most MAX_SKIPPED lines of MAX_SKIPPED_CHARS)."""
    lines = mapping(body).get("skipped_checkpoints")
    if lines is None:
        return ()
    if not isinstance(lines, list) or len(lines) > MAX_SKIPPED or not all(isinstance(v, str) for v in lines):
        raise InputError(SOURCE, f"must be a list of at most {MAX_SKIPPED} strings", field="skipped_checkpoints")
    return tuple(check_line(v, "skipped_checkpoints", SOURCE, most=MAX_SKIPPED_CHARS) for v in lines)


def _attempt(body: dict) -> int:
    return check_int(body.get("attempt"), "attempt", SOURCE, least=0, most=MAX_ATTEMPT)


def _steps_done(value: object) -> int:
    return check_int(value, "steps_done", SOURCE, least=0, most=MAX_STEPS)
