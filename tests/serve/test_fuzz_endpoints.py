"""Property-based, as a hostile caller would: any method, path, header and body sent to every
endpoint of a server with credentials gets a 2xx or 4xx, never a 5xx, never a traceback in the
log, and the jobs that were there before are still listed afterwards.

The endpoints are read from the app itself, so a new one is fuzzed without changing this file.
Each example builds a fresh server (fake executor, one CPU slot) holding three jobs, the first
running its first attempt, with users ann and bob (bob an admin), an admin token, and job 1's
attempt credential; a caller may present any of those, or a forged, malformed or oversized one.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from pathlib import Path

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.jobs.jobspec import FIELDS
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": ["python", "train.py"], "total_steps": 100}
ADMIN_TOKEN = "t" * 48
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")

HEX64 = "0" * 64
FORGED = ["", "Bearer", "Bearer ", "Basic YW5uOmFubg==", "bearer " + "u1." + HEX64, "Bearer u1." + HEX64,
          f"Bearer u{'9' * 23}.{HEX64}", f"Bearer u{'9' * 5000}.{HEX64}", f"Bearer a1.{'9' * 40}.{HEX64}",
          f"Bearer a{'9' * 30}.1.{HEX64}", f"Bearer a1.1.{HEX64}", "Bearer u-1." + HEX64, "Bearer u1." + "g" * 64,
          "Bearer " + "x" * 10_000, "Bearer u0." + HEX64, "Bearer \u00e9\u00e8", "Bearer a1.1", "Bearer u1"]
NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, 1e300, 1.5,
                           float("nan"), float("inf"), 1e-300])
TEXT = st.sampled_from(["", " ", "\x00", "a\nb", "\x1b[2J", "\ud800", "x" * 20_000, "../..", "名前", "admin", "root",
                        "tp=0 pp=-1", "gpt3-1.3b", "cpu", "h100"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), NUMBERS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                             max_size=3), max_leaves=6)
FIELD_NAMES = st.sampled_from((*FIELDS, "user", "attempt", "steps_done", "steps_per_s", "noise_scale"))
BODIES = st.one_of(
    st.none(),
    st.builds(lambda changes: {**JOB, **changes}, st.dictionaries(FIELD_NAMES | st.text(max_size=6), VALUES, max_size=4)),
    st.fixed_dictionaries({}, optional={"attempt": st.integers(0, 3) | VALUES, "steps_done": st.integers(-1, 120) | VALUES,
                                        "steps_per_s": st.floats(0, 1e7) | VALUES, "user": TEXT | VALUES}),
    st.builds(lambda model: {**JOB, **model}, st.fixed_dictionaries(  # what the perf model and the policies read
        {"model": st.sampled_from(["gpt3-1.3b", "gpt3-175b", "nope"]) | VALUES},
        optional={"global_batch": st.integers(-1, 2**40) | VALUES, "gpus": st.integers(-1, 9) | VALUES,
                  "layout": st.sampled_from(["tp=0 pp=-1", "tp=1 pp=1", "tp=3", "tp=2 pp=2 dp=2", "garbage", ""])
                  | VALUES, "gpu_types": st.lists(st.sampled_from(["cpu", "h100", "x"]), max_size=2) | VALUES})),
    VALUES,
    st.binary(max_size=64),  # not JSON at all
)
PATH_VALUES = st.one_of(st.integers(-2, 5).map(str), st.sampled_from(["3", str(2**63), str(2**70), "9" * 5000, "abc",
                                                                       "1e3", "0x1", "%00", "..", "app.js",
                                                                       "dashboard.css", "plotly.min.js"]))
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=40)


def endpoints() -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves."""
    app = create_app(_scheduler(Path(tempfile.mkdtemp(dir=SCRATCH)))[0], token=ADMIN_TOKEN)
    found = []
    for route in app.routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                found.append((method, route.path))
    assert any(isinstance(r, APIRoute) and r.path == "/jobs" for r in app.routes)
    return found


def _scheduler(path: Path) -> tuple[Scheduler, dict[str, str]]:
    """A server in ``path`` holding jobs 1, 2 (ann) and 3 (bob), job 1 running; its credentials by name."""
    config = ServeConfig(state_dir=path, round_s=60.0, renew_wait_s=0.0)
    executor = FakeExecutor(path)
    scheduler = Scheduler(StateStore(path / "state.db"), executor, parse_slots("cpu:1"), Las(), config)
    now = time.time()
    tokens = {"ann": add_user(scheduler.store, "ann", False, now), "bob": add_user(scheduler.store, "bob", True, now)}
    for user in ("ann", "ann", "bob"):
        scheduler.submit({**JOB, "user": user}, user)
    scheduler.tick()
    tokens["attempt"] = executor.envs[(1, 1)]["APPORTION_TOKEN"]
    tokens["admin"] = ADMIN_TOKEN
    return scheduler, tokens


ENDPOINTS = endpoints()


class NoTracebacks(logging.Handler):
    """Remembers every log record that carries an exception (a traceback in the server's log)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


def listed(client: TestClient) -> list[tuple]:
    """The jobs an admin sees: id, name, user and queue of each."""
    answer = client.get("/jobs", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert answer.status_code == 200, answer.text[:300]
    return [(job["id"], job["name"], job["user"], job.get("queue")) for job in answer.json()]


@FUZZ
@given(
    endpoint=st.sampled_from(ENDPOINTS),
    other_method=st.one_of(st.none(), st.sampled_from(METHODS)),
    path_value=PATH_VALUES,
    credential=st.one_of(st.none(), st.sampled_from(["ann", "bob", "admin", "attempt"]), st.sampled_from(FORGED),
                         HEADER_TEXT),
    content_type=st.sampled_from([None, "application/json", "text/plain", "multipart/form-data", "application/x-yaml"]),
    extra_headers=st.dictionaries(st.sampled_from(["Idempotency-Key", "X-Forwarded-For", "Accept-Encoding", "Accept",
                                                   "Origin", "Cookie"]), HEADER_TEXT, max_size=3),
    params=st.dictionaries(st.sampled_from(["attempt", "offset", "limit", "user"]) | st.text(max_size=4),
                           st.integers(-2, 2**70).map(str) | st.text(max_size=6), max_size=3),
    body=BODIES,
)
@example(endpoint=("GET", "/jobs"), other_method=None, path_value="1", credential=FORGED[6], content_type=None,
         extra_headers={}, params={}, body=None)
@example(endpoint=("GET", "/dashboard/state"), other_method=None, path_value="1", credential=FORGED[8],
         content_type=None, extra_headers={}, params={}, body=None)
def test_no_request_to_any_endpoint_gets_a_5xx_or_loses_a_job(endpoint, other_method, path_value, credential,
                                                               content_type, extra_headers, params, body):
    method, template = endpoint
    method = other_method or method
    path = re.sub(r"\{[^}]+\}", path_value, template)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as directory:
        scheduler, tokens = _scheduler(Path(directory))
        client = TestClient(create_app(scheduler, token=ADMIN_TOKEN), raise_server_exceptions=False)
        before = listed(client)
        headers = dict(extra_headers)
        if credential is not None:
            headers["Authorization"] = f"Bearer {tokens[credential]}" if credential in tokens else credential
        if content_type is not None:
            headers["Content-Type"] = content_type
        content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        tracebacks = NoTracebacks()
        logging.getLogger().addHandler(tracebacks)
        raw = {name: value.encode("latin-1") for name, value in headers.items()}  # past ASCII, as a raw client may send
        try:
            answer = client.request(method, path, params=params, headers=raw, content=content)
            scheduler.tick()  # whatever was accepted, the next round copes with it
        finally:
            logging.getLogger().removeHandler(tracebacks)
        assert answer.status_code < 500, (method, path, answer.status_code, answer.text[:500])
        assert not tracebacks.records, [r.getMessage() for r in tracebacks.records]
        if answer.status_code >= 400 and answer.content and answer.headers.get("content-type", "").startswith("application/json"):
            detail = answer.json().get("detail")
            assert isinstance(detail, (str, list)) and "Traceback" not in str(detail)
        after = listed(client)
        assert after[: len(before)] == before, "a job that was there before is gone or changed its owner"


@FUZZ
@given(credential=st.sampled_from(["ann", "bob", "admin"]), body=BODIES)
@example(credential="ann", body={**JOB, "model": "gpt3-1.3b", "global_batch": 8, "layout": "tp=0 pp=-1"})
@example(credential="ann", body={**JOB, "model": "gpt3-1.3b", "global_batch": 2**40})  # no work in proportion to it
def test_whatever_a_user_submits_the_rounds_go_on_for_everyone(credential, body):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as directory:
        scheduler, tokens = _scheduler(Path(directory))
        client = TestClient(create_app(scheduler, token=ADMIN_TOKEN), raise_server_exceptions=False)
        content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        answer = client.post("/jobs", content=content, headers={"Authorization": f"Bearer {tokens[credential]}",
                                                                "Content-Type": "application/json"})
        assert answer.status_code < 500, answer.text[:500]
        scheduler.tick()
        assert client.get("/jobs", headers={"Authorization": f"Bearer {tokens['ann']}"}).status_code == 200
        assert client.get("/dashboard/state", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 200
        scheduler.executor.finish(1, 0)  # job 1 ends and frees the slot: whatever was submitted, job 2 starts
        scheduler.tick()
        scheduler.tick(now=time.time() + 61)  # the next round
        assert scheduler.store.job(2).status == "running", scheduler.store.job(2)
