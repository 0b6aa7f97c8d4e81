"""The HTTP API (docs/serve-contract.md) through FastAPI's TestClient, over a fake executor."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.app.server import ServerError, ServerOptions, serve
from apportion.serve.base.loopback import is_loopback
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100, "user": "ann"}


def make(tmp_path, token=None):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"),
                          Las(), config)
    return scheduler, TestClient(create_app(scheduler, token))


def test_submit_list_get_and_the_job_fields(tmp_path):
    scheduler, client = make(tmp_path)
    assert client.post("/jobs", json=JOB).json() == {"id": "1", "user": "ann"}
    assert client.post("/jobs", json={**JOB, "name": "two", "user": "bob"}).json() == {"id": "2", "user": "bob"}
    scheduler.tick()

    jobs = client.get("/jobs").json()
    assert [j["id"] for j in jobs] == ["1", "2"]
    for key in ("id", "name", "user", "queue", "priority", "status", "reason", "gpus", "alloc", "submitted",
                "runtime_s", "steps_done", "total_steps", "preemptions", "attempts", "last_lines"):
        assert key in jobs[0]
    assert jobs[0]["status"] == "running" and jobs[0]["alloc"] == "cpu:0" and jobs[0]["attempts"] == 1
    assert jobs[1]["status"] == "queued" and jobs[1]["user"] == "bob"
    assert client.get("/jobs/2").json()["name"] == "two"
    assert client.get("/jobs/9").status_code == 404
    assert client.get("/jobs/abc").status_code == 404


def test_a_malformed_spec_is_a_400_naming_the_field_and_nothing_is_stored(tmp_path):
    scheduler, client = make(tmp_path)
    answer = client.post("/jobs", json={**JOB, "gpus": "two"})
    assert answer.status_code == 400
    assert answer.json()["field"] == "gpus" and "field 'gpus'" in answer.json()["detail"]
    no_user = client.post("/jobs", json={k: v for k, v in JOB.items() if k != "user"})
    assert no_user.status_code == 400 and no_user.json()["field"] == "user"
    assert client.get("/jobs").json() == [] and scheduler.store.events() == []


def test_cancel_by_the_owner_works_and_by_another_user_is_403(tmp_path):
    _, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    refused = client.post("/jobs/1/cancel", json={"user": "mallory"})
    assert refused.status_code == 403 and "ann" in refused.json()["detail"]
    assert client.get("/jobs/1").json()["status"] == "queued"
    assert client.post("/jobs/1/cancel", json={"user": "ann"}).status_code == 200
    assert client.get("/jobs/1").json()["status"] == "cancelled"
    assert client.post("/jobs/1/cancel", json={"user": "ann"}).status_code == 409


def test_lease_progress_and_stale_attempts(tmp_path):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    scheduler.tick()
    lease = client.post("/jobs/1/lease", json={"attempt": 1, "steps_done": 3}).json()
    assert lease["renew"] is True and lease["lease_end"] > scheduler.clock()
    assert client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 9, "steps_per_s": 3.0}).json() == {}
    assert client.get("/jobs/1").json()["steps_done"] == 9
    assert client.post("/jobs/1/lease", json={"attempt": 2, "steps_done": 3}).status_code == 409
    assert client.post("/jobs/1/progress", json={"attempt": 0, "steps_done": 3}).status_code == 409


def test_logs_by_offset_and_attempt(tmp_path):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    assert client.get("/jobs/1/logs").json() == {"text": "", "offset": 0, "done": False, "attempt": 0,
                                                 "attempts": 0, "status": "queued"}
    scheduler.tick()
    log = tmp_path / "jobs" / "1" / "attempt-1.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("hello\nwörld\n")
    first = client.get("/jobs/1/logs", params={"limit": 8}).json()
    assert first["text"] == "hello\nw" and first["offset"] == 7 and not first["done"]  # ö not cut in half
    rest = client.get("/jobs/1/logs", params={"offset": first["offset"]}).json()
    assert rest["text"] == "örld\n" and rest["done"] is False  # the attempt is still running
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    assert client.get("/jobs/1/logs", params={"offset": 14}).json()["done"] is True
    assert client.get("/jobs/1/logs", params={"attempt": 2}).status_code == 404


def test_status(tmp_path):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    scheduler.tick()
    status = client.get("/status").json()
    assert status["policy"] == "las" and status["round"] == 1
    assert status["slots"] == [{"id": "cpu:0", "gpu_type": "cpu", "job": "1", "offline": False, "node": None}]
    assert status["counts"]["running"] == 1


def test_an_admin_token_is_required_from_every_caller_when_set(tmp_path):
    scheduler, client = make(tmp_path, token="s3cret")
    assert client.get("/jobs").status_code == 401
    assert client.post("/jobs", json=JOB, headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = {"Authorization": "Bearer s3cret"}
    assert client.post("/jobs", json=JOB, headers=ok).json() == {"id": "1", "user": "ann"}  # an admin names the user
    scheduler.tick()
    assert client.post("/jobs/1/lease", json={"attempt": 1}).status_code == 401
    assert client.post("/jobs/1/lease", json={"attempt": 1}, headers=ok).status_code == 200


def test_jobs_get_their_own_credential_never_the_servers_token(tmp_path):
    config = ServeConfig(state_dir=tmp_path, token="s3cret")
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(), config)
    scheduler.submit({k: v for k, v in JOB.items() if k != "user"}, "ann")
    scheduler.tick()
    credential = scheduler.executor.envs[(1, 1)]["APPORTION_TOKEN"]
    assert credential.startswith("a1.1.") and "s3cret" not in credential


def test_binding_beyond_loopback_needs_a_token(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(ServerError, match="--host 0.0.0.0 is not loopback: add users first"):
        serve(ServerOptions(state_dir=tmp_path, host="0.0.0.0", port=0), parse_slots("cpu:1"), Las(), print)
    assert not (tmp_path / "state.db").exists()
