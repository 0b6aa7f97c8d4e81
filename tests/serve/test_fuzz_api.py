"""Property-based: whatever a caller sends the API, it answers without a 500, with a JSON body,
and a request it refuses leaves the state file as it was.

Each example runs against a fresh server (fake executor, one CPU slot) holding three jobs, the
first of them running its first attempt, so that lease and progress calls can reach the job's
own checks. Bounded: a few hundred examples a test, no deadline.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.jobs.jobspec import FIELDS
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": ["python", "train.py"], "total_steps": 100, "user": "ann"}
ANSWERS = {200, 400, 403, 404, 409}
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# numbers at and past every bound: 2**53 steps, 2**63 (SQLite), 2**64, floats that overflow
EDGE_NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -2**63 - 1, 10**30,
                                1e300, -1e300, 1.5, float("nan"), float("inf"), float("-inf"), 1e-300])
EDGE_TEXT = st.sampled_from(["", " ", "[blink]root[/blink]", "\x00", "a\nb", "\x1b[2J", "\ud800", "u" * 300,
                             "x" * 20_000, "APPORTION_JOB_ID", "cpu", "../..", "名前"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), EDGE_NUMBERS, EDGE_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                             max_size=4), max_leaves=8)
JOB_IDS = st.one_of(st.integers(-2, 5).map(str), st.sampled_from([str(2**63), str(2**70), "abc", "1e3", "0x1"]))


def submit_bodies():
    """A valid job with some fields changed to anything, some removed, some unknown ones added."""
    keys = st.sampled_from((*FIELDS, "user")) | st.text(max_size=6)
    return st.builds(lambda changes, drop: {k: v for k, v in {**JOB, **changes}.items() if k not in drop},
                     st.dictionaries(keys, EDGE_TEXT | EDGE_NUMBERS | VALUES, max_size=4),
                     st.sets(st.sampled_from(tuple(JOB)), max_size=2))


def job_bodies():
    """Lease, progress and cancel bodies: near-valid numbers for the job's own checks, or anything."""
    near = {"attempt": st.integers(0, 3) | VALUES, "steps_done": st.integers(-1, 120) | VALUES,
            "steps_per_s": st.floats(0, 1e7) | VALUES, "user": st.sampled_from(["ann", "bob"]) | VALUES}
    return st.fixed_dictionaries({}, optional=near) | VALUES


def snapshot(scheduler: Scheduler) -> tuple:
    store = scheduler.store
    return store.jobs(), store.throughputs(), store.events()


def check_call(scheduler: Scheduler, client: TestClient, method: str, path: str, body: object = None) -> None:
    """One call: never a 500, always a JSON answer, and a refusal changes nothing."""
    before = snapshot(scheduler)
    content = None if body is None else json.dumps(body)  # NaN and Infinity too, as some clients send them
    answer = client.request(method, path, content=content, headers={"content-type": "application/json"})
    assert answer.status_code in ANSWERS, (answer.status_code, answer.text[:500])
    data = answer.json()
    if answer.status_code >= 400:
        assert isinstance(data["detail"], str) and "\n" not in data["detail"] and "Traceback" not in data["detail"]
        assert snapshot(scheduler) == before, f"{method} {path} was refused ({answer.text[:200]}) yet changed the state"
    if answer.status_code == 400:
        assert "field" in data and "message" in data
    scheduler.tick()  # whatever was accepted, the next round copes with it


class Current:
    """The scheduler of the example being run: one app (slow to build) serves every example,
    each over a fresh state file."""

    scheduler: Scheduler | None = None

    def __getattr__(self, name: str):
        return getattr(Current.scheduler, name)

    @property
    def store(self):
        return CurrentStore()


class CurrentStore:
    """The state file of the example being run (the app's authenticator holds on to it)."""

    def __getattr__(self, name: str):
        return getattr(Current.scheduler.store, name)


CLIENT = TestClient(create_app(Current()), raise_server_exceptions=False)
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None  # state files in memory where there is one


def fresh_server(directory: str) -> tuple[Scheduler, TestClient]:
    """A new scheduler in ``directory`` with jobs 1 and 2 (ann) and 3 (bob), job 1 running attempt 1."""
    path = Path(directory)
    config = ServeConfig(state_dir=path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(path / "state.db"), FakeExecutor(path), parse_slots("cpu:1"), Las(), config)
    for user in ("ann", "ann", "bob"):
        scheduler.submit({**JOB, "user": user}, user)
    scheduler.tick()
    Current.scheduler = scheduler
    return scheduler, CLIENT


@FUZZ
@given(body=submit_bodies() | VALUES)
def test_submit_never_fails_and_a_refused_job_leaves_no_trace(body):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as directory:
        scheduler, client = fresh_server(directory)
        check_call(scheduler, client, "POST", "/jobs", body)


@FUZZ
@given(job_id=JOB_IDS, call=st.sampled_from(["lease", "progress", "cancel"]), body=job_bodies())
def test_lease_progress_and_cancel_never_fail(job_id, call, body):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as directory:
        scheduler, client = fresh_server(directory)
        check_call(scheduler, client, "POST", f"/jobs/{job_id}/{call}", body)


@FUZZ
@given(job_id=JOB_IDS, params=st.dictionaries(st.sampled_from(["attempt", "offset", "limit"]),
                                              st.integers(-2, 2**70).map(str) | st.text(max_size=5), max_size=3))
def test_reading_jobs_and_logs_never_fails(job_id, params):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as directory:
        scheduler, client = fresh_server(directory)
        for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/logs", "/jobs", "/status"):
            before = snapshot(scheduler)
            answer = client.get(path, params=params)
            assert answer.status_code in ANSWERS and isinstance(answer.json(), (dict, list)), answer.text[:300]
            assert snapshot(scheduler) == before
