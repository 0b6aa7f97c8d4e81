"""`GET /jobs` and its choices (status, user, limit, ended_after), through the HTTP API over a fake executor:
each job listed exactly as its own page shows it, to its owner and to anyone else."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
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


def make(tmp_path):
    """Two users, ann and bob, on a server with two slots; their credentials' headers."""
    store = StateStore(tmp_path / "state.db")
    headers = {name: {"Authorization": f"Bearer {add_user(store, name, admin=False, now=time.time())}"}
               for name in ("ann", "bob")}
    clock = Clock()
    executor = FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0, max_retries=0)
    scheduler = Scheduler(store, executor, parse_slots("cpu:2"), Las(), config, clock=clock)
    return scheduler, executor, clock, TestClient(create_app(scheduler)), headers


def job(name: str, user: str, **fields) -> dict:
    return {"name": name, "command": "python train.py", "total_steps": 1000, "user": user, **fields}


def busy_server(tmp_path):
    """Two hours ago job 1 (ann) failed with its log's last lines and job 2 (bob) was cancelled; now 3 (bob) and
    4 (ann) run, 5 (bob) waits for 3 to complete, and 6 (ann) for both slots."""
    scheduler, executor, clock, client, headers = make(tmp_path)
    scheduler.submit(job("doomed", "ann", time_limit=3600), "ann")
    scheduler.tick()
    executor.logs[(1, 1)] = "loading\nTraceback: boom"
    executor.finish(1, 3)
    scheduler.tick()
    scheduler.submit(job("old", "bob"), "bob")
    scheduler.cancel(2, "bob")
    clock.now += 7200
    scheduler.submit(job("cnn", "bob", gpu_types=["cpu"]), "bob")
    scheduler.submit(job("lm", "ann", kind="transformer"), "ann")
    scheduler.submit(job("next", "bob", after=[3]), "bob")
    scheduler.submit(job("wide", "ann", gpus=2, hung_after_s=60), "ann")
    clock.now += 1
    scheduler.tick()
    for row in scheduler.store.live_jobs():
        scheduler.lease(row.id, row.attempt, 0)
        clock.now += 30
        scheduler.progress(row.id, row.attempt, 40, 2.0)
    return scheduler, clock, client, headers


def test_each_job_is_listed_as_its_own_page_shows_it_to_its_owner_and_to_others(tmp_path):
    scheduler, clock, client, headers = busy_server(tmp_path)
    for name in ("ann", "bob"):
        listed = client.get("/jobs", headers=headers[name]).json()
        assert [j["id"] for j in listed] == ["1", "2", "3", "4", "5", "6"]
        assert listed == [client.get(f"/jobs/{j['id']}", headers=headers[name]).json() for j in listed]
    failed = {who: client.get("/jobs", headers=headers[who]).json()[0] for who in ("ann", "bob")}
    assert failed["ann"]["last_lines"].endswith("Traceback: boom") and failed["bob"]["last_lines"] == ""
    assert failed["ann"]["reason"].endswith(": Traceback: boom") and "boom" not in failed["bob"]["reason"]


def test_a_list_keeps_up_with_the_jobs_running_time_and_changes(tmp_path):
    scheduler, clock, client, headers = busy_server(tmp_path)
    before = {j["id"]: j for j in client.get("/jobs", headers=headers["ann"]).json()}
    clock.now += 10
    row = scheduler.store.job(3)
    scheduler.progress(3, row.attempt, 90, 2.0)
    after = {j["id"]: j for j in client.get("/jobs", headers=headers["ann"]).json()}
    assert after["3"]["steps_done"] == 90 and before["3"]["steps_done"] == 40
    assert after["4"]["runtime_s"] == before["4"]["runtime_s"] + 10  # running: counted up to now
    assert after["5"]["runtime_s"] == before["5"]["runtime_s"] == 0.0  # waiting
    assert list(after.values()) == [client.get(f"/jobs/{i}", headers=headers["ann"]).json() for i in after]
    scheduler.submit(job("late", "ann"), "ann")
    scheduler.cancel(5, "bob")
    again = client.get("/jobs", headers=headers["ann"]).json()
    assert [(j["id"], j["status"]) for j in again[4:]] == [("5", "cancelled"), ("6", "queued"), ("7", "queued")]


def test_jobs_are_chosen_by_status_user_count_and_when_they_ended(tmp_path):
    scheduler, clock, client, headers = busy_server(tmp_path)

    def ids(**params):
        answer = client.get("/jobs", params=params, headers=headers["ann"])
        assert answer.status_code == 200, answer.text
        return [j["id"] for j in answer.json()]

    statuses = {j["id"]: j["status"] for j in client.get("/jobs", headers=headers["ann"]).json()}
    assert statuses == {"1": "failed", "2": "cancelled", "3": "running", "4": "running", "5": "queued",
                        "6": "queued"}
    assert ids(status="queued") == ["5", "6"]
    assert ids(status="running,queued") == ["3", "4", "5", "6"]
    assert ids(user="bob") == ["2", "3", "5"]
    assert ids(status="queued", user="bob") == ["5"]
    assert ids(limit=2) == ["1", "2"]
    assert ids(status="queued,running", limit=3) == ["3", "4", "5"]
    assert ids(ended_after=clock.now - 3600) == ["3", "4", "5", "6"]  # active jobs always; 1 and 2 ended 2 h ago
    assert ids(ended_after=clock.now - 3 * 3600) == ["1", "2", "3", "4", "5", "6"]
    assert ids(user="nobody") == []


def test_a_bad_choice_is_a_400_naming_the_parameter(tmp_path):
    scheduler, clock, client, headers = busy_server(tmp_path)
    for params, field in (({"status": "running,sleeping"}, "status"), ({"limit": "0"}, "limit"),
                          ({"limit": "many"}, "limit"), ({"ended_after": "nan"}, "ended_after"),
                          ({"user": "u" * 10_000}, "user")):
        answer = client.get("/jobs", params=params, headers=headers["ann"])
        assert answer.status_code == 400, (params, answer.text)
        assert answer.json()["field"] == field, answer.json()
    assert "'sleeping' is not a status" in client.get("/jobs", params={"status": "sleeping"},
                                                      headers=headers["ann"]).json()["detail"]
