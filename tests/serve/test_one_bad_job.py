"""One job's fields never stop the others: what a round or the perf model would choke on is
refused at submit, and whatever still fails in a round fails that job alone."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

BAD_LAYOUT = {"name": "x", "command": ["python", "t.py"], "total_steps": 10, "user": "ann", "model": "gpt3-1.3b",
              "global_batch": 8, "layout": "tp=0 pp=-1"}
GOOD = {"name": "ok", "command": "python train.py", "total_steps": 10, "user": "bob"}


def make(tmp_path, slots="cpu:2"):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots(slots), Las(), config)
    return scheduler, TestClient(create_app(scheduler), raise_server_exceptions=False)


def test_a_layout_the_perf_model_cannot_use_is_a_400_naming_layout(tmp_path):
    scheduler, client = make(tmp_path)

    answer = client.post("/jobs", json=BAD_LAYOUT)

    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == "layout"
    assert "tensor-parallel size must be a positive integer, got 0" in answer.json()["message"]
    assert client.get("/jobs").json() == []
    on_two = client.post("/jobs", json={**BAD_LAYOUT, "layout": "tp=2 pp=1", "global_batch": 8})
    assert on_two.status_code == 400 and "does not divide the job's 1 GPU(s)" in on_two.json()["message"]
    assert client.post("/jobs", json={**BAD_LAYOUT, "layout": "tp=2 pp=1", "gpus": 2}).status_code == 200


def store_directly(path, spec: dict, kind: str) -> int:
    """A job written into the state file as a server of an older version might have, unchecked."""
    store = StateStore(path)
    try:
        return store.insert_job(spec=spec, name=spec["name"], user=spec["user"], queue="", priority=1.0, kind=kind,
                                gpus=spec.get("gpus", 1), total_steps=spec["total_steps"], submitted=0.0)
    finally:
        store.close()


def test_a_stored_job_with_a_bad_layout_fails_alone_at_the_next_round(tmp_path):
    bad = store_directly(tmp_path / "state.db", BAD_LAYOUT, "gpt3-1.3b gb=8 tp=0 pp=-1")
    good = store_directly(tmp_path / "state.db", GOOD, "ok")
    scheduler, client = make(tmp_path)  # a server restarted on that state

    for path in ("/jobs", f"/jobs/{bad}", "/status", "/dashboard/state"):
        assert client.get(path).status_code == 200, path
    scheduler.tick()

    failed, started = scheduler.row(bad), scheduler.row(good)
    assert failed.status == "failed" and failed.finished is not None
    assert failed.reason == ("cannot be scheduled: field 'layout': tensor-parallel size must be a positive "
                                "integer, got 0")
    assert started.status == "running" and started.slots == "cpu:0"
    assert [e.event for e in scheduler.store.events(bad)][-1] == "fail"
    for path in ("/jobs", f"/jobs/{bad}", "/status", "/dashboard/state"):
        assert client.get(path).status_code == 200, path
    assert {j["id"]: j["status"] for j in client.get("/jobs").json()} == {str(bad): "failed", str(good): "running"}


class FailsOnMallory(Las):
    """A policy that raises whenever one particular job is among those it allocates."""

    victim = "mallory"

    def allocate(self, jobs, cluster, throughputs):
        if self.victim in set(jobs.user.tolist()):
            raise ZeroDivisionError("integer modulo by zero")
        return super().allocate(jobs, cluster, throughputs)


def make_with(tmp_path, policy, slots="cpu:2"):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots(slots), policy, config)
    return scheduler, TestClient(create_app(scheduler), raise_server_exceptions=False)


def test_a_job_the_policy_raises_for_is_failed_and_the_others_placed_in_the_same_round(tmp_path):
    scheduler, client = make_with(tmp_path, FailsOnMallory())
    for user in ("ann", "mallory", "bob", "carl"):
        assert client.post("/jobs", json={**GOOD, "name": f"job-{user}", "user": user}).status_code == 200

    scheduler.tick()

    status = {j["user"]: j["status"] for j in client.get("/jobs").json()}
    assert status == {"ann": "running", "mallory": "failed", "bob": "running", "carl": "queued"}
    assert scheduler.row(2).reason == "cannot be scheduled: the round fails with it: ZeroDivisionError: integer modulo by zero"
    scheduler.tick(scheduler.round_end)  # the next round goes on as usual
    assert scheduler.row(4).status == "queued" and scheduler.round == 2


def test_a_live_job_the_round_fails_is_stopped_and_ends_failed(tmp_path):
    policy = FailsOnMallory()
    policy.victim = "nobody yet"
    scheduler, client = make_with(tmp_path, policy)
    client.post("/jobs", json={**GOOD, "user": "mallory"})
    client.post("/jobs", json={**GOOD, "user": "ann"})
    scheduler.tick()
    assert client.post("/jobs/1/lease", json={"attempt": 1}).json()["renew"] is True  # it runs, past its start
    policy.victim = "mallory"
    client.post("/jobs", json={**GOOD, "user": "bob"})  # a new job: the policy is asked again

    scheduler.tick(scheduler.round_end)

    row = scheduler.row(1)
    assert row.status == "failed" and row.stop == "cancel" and row.reason.endswith("; stopping")
    assert (1, "TERM") in scheduler.executor.signals  # it exits on the SIGTERM the round sent
    scheduler.tick(scheduler.round_end)
    row = scheduler.row(1)
    assert row.status == "failed" and not row.attempt_live
    assert row.reason == "cannot be scheduled: the round fails with it: ZeroDivisionError: integer modulo by zero"
    assert scheduler.row(2).status == "running" and scheduler.row(3).status == "running"


class AlwaysFails(Las):
    def allocate(self, jobs, cluster, throughputs):
        raise ZeroDivisionError("not any one job's doing")


def test_a_failure_every_job_causes_fails_nobody(tmp_path):
    scheduler, client = make_with(tmp_path, AlwaysFails())
    client.post("/jobs", json={**GOOD, "user": "ann"})
    client.post("/jobs", json={**GOOD, "user": "bob"})

    with pytest.raises(ZeroDivisionError):
        scheduler.tick()

    assert [j["status"] for j in client.get("/jobs").json()] == ["queued", "queued"]
    assert client.get("/dashboard/state").status_code == 200


def test_a_job_whose_speed_cannot_be_estimated_is_failed_and_still_listed(tmp_path, monkeypatch):
    scheduler, client = make(tmp_path)
    rate = scheduler.throughputs.rate

    def fragile(kind, *args):
        if kind == "boom":
            raise RuntimeError("no speed for boom")
        return rate(kind, *args)

    monkeypatch.setattr(scheduler.throughputs, "rate", fragile)
    client.post("/jobs", json={**GOOD, "name": "boom"})
    client.post("/jobs", json=GOOD)

    listed = client.get("/jobs")
    assert listed.status_code == 200
    assert listed.json()[0]["estimate_from"] == "cannot be worked out: RuntimeError: no speed for boom"
    assert client.get("/dashboard/state").status_code == 200
    scheduler.tick()

    assert scheduler.row(1).status == "failed"
    assert scheduler.row(1).reason == "cannot be scheduled: its speed cannot be estimated: RuntimeError: no speed for boom"
    assert scheduler.row(2).status == "running"


def test_a_stored_job_its_start_could_not_use_is_failed_at_the_next_round(tmp_path):
    bad = store_directly(tmp_path / "state.db", {**GOOD, "name": "env", "env": ["LR=0.1"]}, "env")
    good = store_directly(tmp_path / "state.db", GOOD, "ok")
    scheduler, _ = make(tmp_path)

    scheduler.tick()

    assert scheduler.row(bad).status == "failed"
    assert scheduler.row(bad).reason == "cannot be scheduled: field 'env': must be a mapping of variable to value, got ['LR=0.1']"
    assert scheduler.row(good).status == "running"


def test_a_job_whose_start_raises_is_failed_and_the_others_start(tmp_path, monkeypatch):
    scheduler, client = make(tmp_path)
    start = scheduler.executor.start

    def fragile(job_id, *args, **options):
        if job_id == 1:
            raise TypeError("expected str, bytes or os.PathLike object, not list")
        return start(job_id, *args, **options)

    monkeypatch.setattr(scheduler.executor, "start", fragile)
    client.post("/jobs", json=GOOD)
    client.post("/jobs", json=GOOD)

    scheduler.tick()

    assert scheduler.row(1).status == "failed" and scheduler.row(1).slots == ""
    assert scheduler.row(1).reason == ("cannot be started: TypeError: expected str, bytes or os.PathLike object, "
                                          "not list")
    assert scheduler.row(2).status == "running"
    assert client.get("/jobs").status_code == 200
