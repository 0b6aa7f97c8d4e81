"""Every number and string a request carries has a bound: past it, a 400 naming the field and
nothing stored; and what a job reports about its progress is trusted only so far."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.requests import RATE_FACTOR
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100, "user": "ann"}


@pytest.fixture
def server(tmp_path):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(), config)
    return scheduler, TestClient(create_app(scheduler), raise_server_exceptions=False)


@pytest.fixture
def running(server):
    """A server with job 1 running its first attempt."""
    scheduler, client = server
    assert client.post("/jobs", json=JOB).status_code == 200
    scheduler.tick()
    return scheduler, client


def rejected(answer, field: str, words: str) -> None:
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["field"] == field and words in body["message"] and f"field '{field}'" in body["detail"]


@pytest.mark.parametrize("change, field, words", [
    ({"total_steps": 2**63}, "total_steps", "from 1 to 9,007,199,254,740,992, got 9.22e+18"),
    ({"total_steps": 2**64 + 1}, "total_steps", "got 1.84e+19"),
    ({"gpus": 2**21}, "gpus", "from 1 to 1,048,576"),
    ({"priority": 1e300}, "priority", "from 0 to 1000, got 1e+300"),
    ({"epochs": 2**40, "steps_per_epoch": 2**40, "total_steps": None}, "steps_per_epoch", "more than"),
    ({"user": "u" * 10_000_000}, "user", "at most 256 characters, got 10,000,000"),
    ({"name": "n" * 257}, "name", "at most 256 characters"),
    ({"queue": "q\nq"}, "queue", "without control characters"),
    ({"kind": "k" * 300}, "kind", "at most 256 characters"),
    ({"command": "x" * 20_000}, "command", "at most 16,384 characters"),
    ({"gpu_types": ["cpu"] * 65}, "gpu_types", "at most 64 types"),
    ({"env": {f"V{i}": "1" for i in range(257)}}, "env", "at most 256 variables"),
    ({"workdir": "/tmp/\0"}, "workdir", "NUL"),
    ({"workdir": "u" * 300}, "workdir", "no such directory on the server"),  # a name longer than the OS allows
])
def test_a_submit_past_a_bound_is_a_400_naming_the_field(server, change, field, words):
    scheduler, client = server
    rejected(client.post("/jobs", json={**JOB, **change}), field, words)
    assert scheduler.store.jobs() == [] and scheduler.store.events() == []


@pytest.mark.parametrize("path, body, field, words", [
    ("lease", {"attempt": 1, "steps_done": 2**63}, "steps_done", "got 9.22e+18"),
    ("lease", {"attempt": 1, "steps_done": 101}, "steps_done", "from 0 to the job's total_steps (100), got 101"),
    ("lease", {"attempt": 2**40}, "attempt", "from 0 to 2,147,483,648"),
    ("lease", {"attempt": True}, "attempt", "got True (true/false)"),
    ("lease", {"attempt": 1, "skipped_checkpoints": "step-00000040.pt"}, "skipped_checkpoints", "a list of at most 16"),
    ("lease", {"attempt": 1, "skipped_checkpoints": ["x"] * 17}, "skipped_checkpoints", "a list of at most 16"),
    ("lease", {"attempt": 1, "skipped_checkpoints": ["x" * 301]}, "skipped_checkpoints", "at most 300 characters"),
    ("lease", {"attempt": 1, "skipped_checkpoints": ["a\nWARNING"]}, "skipped_checkpoints", "one line"),
    ("progress", {"attempt": 1, "steps_done": -1}, "steps_done", "got -1"),
    ("progress", {"attempt": 1, "steps_done": 101}, "steps_done", "total_steps (100)"),
    ("progress", {"attempt": 1, "steps_done": 1.5}, "steps_done", "got 1.5"),
    ("progress", {"attempt": 1, "steps_done": 5, "steps_per_s": -2.0}, "steps_per_s", "finite number >= 0, got -2"),
    ("progress", {"attempt": 1, "steps_done": 5, "steps_per_s": "fast"}, "steps_per_s", "'fast' (a string)"),
    ("cancel", {"user": "x" * 1000}, "user", "at most 256 characters"),
])
def test_a_job_call_past_a_bound_is_a_400_and_changes_nothing(running, path, body, field, words):
    scheduler, client = running
    before = scheduler.store.jobs(), scheduler.store.throughputs()
    rejected(client.post(f"/jobs/1/{path}", json=body), field, words)
    assert (scheduler.store.jobs(), scheduler.store.throughputs()) == before


def test_infinite_and_nan_rates_are_refused(running):
    _, client = running
    for text in ("NaN", "Infinity", "1e999"):
        answer = client.post("/jobs/1/progress", content=f'{{"attempt": 1, "steps_done": 5, "steps_per_s": {text}}}',
                             headers={"content-type": "application/json"})
        rejected(answer, "steps_per_s", "finite number >= 0")


def test_bodies_that_are_not_objects_and_ids_beyond_the_state_file(running):
    _, client = running
    for body in (b"[1, 2]", b"3", b"not json", b""):
        answer = client.post("/jobs/1/lease", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 400 and answer.json()["detail"].startswith("request: ")
    assert client.get(f"/jobs/{2**64}").status_code == 404
    assert client.post(f"/jobs/{2**70}/cancel", json={"user": "ann"}).status_code == 404
    assert client.get("/jobs/1/logs", params={"offset": 2**70}).json()["field"] == "offset"


@pytest.mark.parametrize("body, content_type, message", [
    (b"", "application/json", "the body must be a JSON object"),
    (b"null", "application/json", "the body must be a JSON object"),
    (b"[1, 2]", "application/json", "the body must be a JSON object, got list"),
    (b'{"name": ', "application/json", "the body is not valid JSON"),
    (b"\xff\xfe{}", "application/json", "the body is not valid JSON"),
    (b"[" * 100_000, "application/json", "the body is not valid JSON"),
    (b'{"name": "cnn"}', "text/plain", "the body must be a JSON object, sent as Content-Type: application/json"),
    (b'{"name": "cnn"}', None, "the body must be a JSON object, sent as Content-Type: application/json"),
])
def test_a_submit_whose_body_is_no_json_object_is_a_400_and_stores_nothing(server, body, content_type, message):
    scheduler, client = server
    answer = client.post("/jobs", content=body, headers={"content-type": content_type} if content_type else {})
    assert answer.status_code == 400 and answer.json()["message"] == message
    assert scheduler.store.jobs() == []


def test_a_submit_sent_as_any_json_media_type_is_read(server):
    scheduler, client = server
    answer = client.post("/jobs", content=b'{"name": "cnn", "command": "python train.py", "total_steps": 100, '
                         b'"user": "ann"}', headers={"content-type": "application/vnd.apportion+json; charset=utf-8"})
    assert answer.json() == {"id": "1", "user": "ann"}
    assert [job.name for job in scheduler.store.jobs()] == ["cnn"]


def test_a_job_may_report_fewer_steps_after_a_resume_but_never_more_than_its_total(running):
    scheduler, client = running
    assert client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 60}).status_code == 200
    assert client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 40}).status_code == 200
    assert client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 100}).status_code == 200
    assert scheduler.store.job(1).steps_done == 100


def test_a_rate_far_from_the_estimate_moves_it_by_a_bounded_factor(running):
    scheduler, client = running
    assert scheduler.rate("cnn", "cpu", 1, None) == 1.0  # never measured: the default
    answer = client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 5, "steps_per_s": 1e300})
    assert answer.status_code == 200 and "counted as 10" in answer.json()["note"]
    assert scheduler.rate("cnn", "cpu", 1, None) == RATE_FACTOR
    answer = client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 6, "steps_per_s": 12.0})
    assert answer.json() == {}  # within the factor: taken as it is
    assert scheduler.rate("cnn", "cpu", 1, None) == pytest.approx(0.8 * 10 + 0.2 * 12)


def test_a_rate_of_zero_is_taken_as_no_measurement(running):
    scheduler, client = running
    answer = client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 5, "steps_per_s": 0})
    assert answer.status_code == 200 and "unchanged" in answer.json()["note"]
    assert scheduler.store.throughputs() == {} and scheduler.store.job(1).steps_done == 5
