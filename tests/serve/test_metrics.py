"""GET /metrics through the HTTP API: what a Prometheus scrape reads against the queue itself."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.runtime import Checkpointer
from apportion.serve.views import metrics
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path, slots="cpu:2,v100:1"):
    clock = Clock()
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, grace_s=5.0, fill_gap_s=0.0, renew_wait_s=0.0)
    policy = Las(thresholds_gpu_s=tuple(float(t) for t in range(10, 1000, 10)))
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots(slots), policy,
                          config, clock=clock)
    return scheduler, TestClient(create_app(scheduler)), clock


def scrape(client, headers=None) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    answer = client.get("/metrics", headers=headers or {})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def cpu_job(name: str, user: str, queue: str = "") -> dict:
    return {"name": name, "command": "train", "total_steps": 100, "user": user, "queue": queue, "gpu_types": ["cpu"]}


def test_a_scrape_after_a_preemption_matches_the_queue(tmp_path):
    scheduler, client, clock = make(tmp_path)
    for name, user in (("a", "ann"), ("b", "bob"), ("c", "cat")):
        client.post("/jobs", json=cpu_job(name, user, queue="research"))
    scheduler.tick()
    started = clock.now
    for job_id in (1, 2):  # their first lease calls: both are past starting
        assert client.post(f"/jobs/{job_id}/lease", json={"attempt": 1, "steps_done": 0}).json()["renew"] is True
    stopped = None
    while stopped is None:  # LAS gives job 3 its turn: one of the two is told to stop
        clock.now += 0.5
        scheduler.tick()
        stopped = next((j for j in (1, 2) if scheduler.store.job(j).stop == "preempt"), None)
        assert clock.now < started + 100, "job 3 waited, yet nobody was preempted"
    assert client.post(f"/jobs/{stopped}/lease", json={"attempt": 1, "steps_done": 42}).json() == {"renew": False}
    Checkpointer(tmp_path / "jobs" / str(stopped) / "checkpoints").save({}, 42)
    clock.now += 0.5
    scheduler.executor.finish(stopped, 75)
    scheduler.tick()  # it exits preempted; job 3 starts on the slot it freed
    ended = clock.now
    clock.now += 2.0
    jobs = {j["id"]: j for j in client.get("/jobs").json()}
    assert sorted(j["status"] for j in jobs.values()) == ["preempted", "running", "running"]

    values = scrape(client)
    assert values[("apportion_slots", (("gpu_type", "cpu"),))] == 2
    assert values[("apportion_slots", (("gpu_type", "v100"),))] == 1
    assert values[("apportion_slots_busy", (("gpu_type", "cpu"),))] == 2
    assert values[("apportion_slots_busy", (("gpu_type", "v100"),))] == 0
    by_status = {dict(labels)["status"]: v for (name, labels), v in values.items() if name == "apportion_jobs"}
    assert by_status == {"queued": 0, "running": 2, "preempted": 1, "completed": 0, "failed": 0, "cancelled": 0}
    assert {dict(labels)["queue"] for (name, labels) in values if name == "apportion_jobs"} == {"research"}
    assert values[("apportion_preemptions_total", ())] == 1
    assert values[("apportion_attempts_started_total", ())] == 3
    assert values[("apportion_attempts_ended_total", (("how", "preempted"),))] == 1
    assert values[("apportion_lease_renewals_total", ())] == 2
    assert values[("apportion_lease_stops_total", ())] == 1
    # one slot each: GPU-seconds are seconds held, up to the exit for the preempted job and up to now for the others
    user_of = {1: "ann", 2: "bob"}
    gpu_s = {dict(labels)["user"]: v for (name, labels), v in values.items()
             if name == "apportion_user_gpu_seconds_total"}
    assert gpu_s[user_of[stopped]] == pytest.approx(ended - started)
    assert gpu_s[user_of[3 - stopped]] == pytest.approx(clock.now - started)
    assert gpu_s["cat"] == pytest.approx(clock.now - ended)
    assert gpu_s[user_of[stopped]] == pytest.approx(jobs[str(stopped)]["runtime_s"])
    rounds = client.get("/status").json()["round_ms"]["rounds_this_run"]
    assert values[("apportion_round_seconds_count", ())] == rounds > 1
    assert values[("apportion_round_seconds_bucket", (("le", "+Inf"),))] == rounds


def test_request_latency_is_labelled_by_route_template_never_by_path(tmp_path):
    _, client, _ = make(tmp_path)
    client.post("/jobs", json=cpu_job("a", "ann"))
    client.post("/jobs", json={"name": "bad"})
    for path in ("/jobs/1", "/jobs/2", "/jobs/123456789", "/no/such/path/0", "/no/such/path/1"):
        client.get(path)
    values = scrape(client)
    counts = {dict(labels)["route"] + " " + dict(labels)["code"]: v for (name, labels), v in values.items()
              if name == "apportion_request_seconds_count" and dict(labels)["method"] == "GET"}
    assert counts == {"/jobs/{job_id} 200": 1, "/jobs/{job_id} 404": 2, "(none) 404": 2}
    assert values[("apportion_submit_seconds_count", (("outcome", "accepted"),))] == 1
    assert values[("apportion_submit_seconds_count", (("outcome", "refused"),))] == 1


def test_queues_and_users_past_the_limit_are_summed_under_other(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_LABELLED", 2)
    _, client, _ = make(tmp_path, slots="cpu:1")
    for i in range(4):
        client.post("/jobs", json=cpu_job(f"j{i}", f"user{i}", queue=f"q{i}"))
    values = scrape(client)
    queued = {dict(labels)["queue"]: v for (name, labels), v in values.items()
              if name == "apportion_jobs" and dict(labels)["status"] == "queued"}
    assert queued == {"q0": 1, "q1": 1, "(other)": 2}  # the first two seen keep their own series
    users = {dict(labels)["user"] for (name, labels) in values if name == "apportion_user_gpu_seconds_total"}
    assert users == {"user0", "user1", "(other)"}


def test_who_may_scrape_is_who_may_read_status(tmp_path):
    scheduler, client, _ = make(tmp_path)
    ann = add_user(scheduler.store, "ann", admin=False, now=0.0)
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer not-a-credential"}).status_code == 401
    assert scrape(client, {"Authorization": f"Bearer {ann}"})[("apportion_slots", (("gpu_type", "v100"),))] == 1
    client.post("/jobs", json=cpu_job("a", "ann"), headers={"Authorization": f"Bearer {ann}"})
    scheduler.tick()
    attempt = scheduler.executor.envs[(1, 1)]["APPORTION_TOKEN"]
    assert client.get("/metrics", headers={"Authorization": f"Bearer {attempt}"}).status_code == 403
