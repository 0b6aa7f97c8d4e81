"""Jobs' accounting (apportion/serve/store/usage.py) through ``GET /history``, on a run worked out by hand.

The run, on a fake clock from T0 with one v100 and two k80 slots and a fake executor:
  t=0    ann's job 1 (v100) and bob's job 2 (two k80s) start;
  t=10   bob submits job 3 (v100): it waits;
  t=60   a round preempts job 1 for job 3; job 1 checkpoints and exits at t=62, job 3 starts then;
  t=100  job 3 fails (exit 1); job 1 resumes on the v100;
  t=120  bob cancels job 2;
  t=200  job 1 completes.
So: job 1 held 1 v100 for 62 + 100 = 162 s, waited 0 s; job 3 held 1 v100 for 38 s, waited 52 s;
job 2 held 2 k80s for 120 s (240 GPU-s), waited 0 s.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import LiveServer
from serve_helpers import wait_for
from typer.testing import CliRunner

from apportion.cli import app
from apportion.core.errors import InputError
from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.runtime import Checkpointer
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from apportion.serve.store.usage import parse_when

T0 = 1_000_000.0
H = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def job(name, **extra):
    return {"name": name, "command": "train", "total_steps": 100, **extra}


def worked_run(tmp_path):
    """The run above; its scheduler, clock and executor, and ann's and bob's credentials."""
    clock, executor = Clock(), FakeExecutor(tmp_path)
    store = StateStore(tmp_path / "state.db")
    tokens = {name: add_user(store, name, admin=False, now=T0) for name in ("ann", "bob")}
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, grace_s=5.0, max_retries=0, fill_gap_s=0.0,
                         renew_wait_s=0.0, plan_ahead_s=0.0)
    scheduler = Scheduler(store, executor, parse_slots("v100:1,k80:2"), Las(thresholds_gpu_s=(30.0,)), config,
                          clock=clock)

    def at(t):
        clock.now = T0 + t
        scheduler.tick()

    scheduler.submit(job("a", gpu_types=["v100"]), "ann")
    scheduler.submit(job("c", gpus=2, gpu_types=["k80"], queue="research"), "bob")
    at(0)
    scheduler.lease(1, 1, 0), scheduler.lease(2, 1, 0)
    clock.now = T0 + 10
    scheduler.submit(job("b", gpu_types=["v100"]), "bob")
    at(10)
    at(60)
    assert scheduler.lease(1, 1, 42) == {"renew": False}
    Checkpointer(tmp_path / "jobs" / "1" / "checkpoints").save({}, 42)
    clock.now = T0 + 62
    executor.finish(1, 75)
    at(62)
    clock.now = T0 + 100
    executor.logs[(3, 1)] = "RuntimeError: CUDA out of memory"
    executor.finish(3, 1)
    at(100)
    clock.now = T0 + 120
    scheduler.cancel(2, "bob")
    at(120)
    clock.now = T0 + 200
    scheduler.progress(1, 2, 100, 1.0)
    executor.finish(1, 0)
    at(200)
    return scheduler, clock, executor, tokens


@pytest.fixture
def run(tmp_path):
    scheduler, clock, executor, tokens = worked_run(tmp_path)
    client = TestClient(create_app(scheduler))
    as_user = {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
    return scheduler, clock, client, as_user


def by_id(answer: dict) -> dict:
    return {j["id"]: j for j in answer["jobs"]}


def test_each_finished_job_with_its_gpu_hours_wait_run_time_attempts_and_how_it_ended(run):
    _, _, client, as_user = run
    answer = client.get("/history", headers=as_user["ann"]).json()
    jobs = by_id(answer)

    assert list(jobs) == ["1", "2", "3"]
    a, c, b = jobs["1"], jobs["2"], jobs["3"]
    assert (a["user"], a["gpu_types"], a["gpu_hours"], a["wait_s"], a["run_s"]) == \
        ("ann", ["v100"], {"v100": round(162 / H, 6)}, 0.0, 162.0)
    assert (a["attempts"], a["preemptions"], a["status"], a["exit_code"]) == (2, 1, "completed", 0)
    assert (b["wait_s"], b["run_s"], b["gpu_hours"], b["status"], b["exit_code"]) == \
        (52.0, 38.0, {"v100": round(38 / H, 6)}, "failed", 1)
    assert (c["gpu_hours"], c["gpu_hours_total"], c["run_s"], c["status"], c["queue"]) == \
        ({"k80": round(240 / H, 6)}, round(240 / H, 6), 120.0, "cancelled", "research")
    assert c["reason"] == "cancelled by bob"
    assert answer["matched"] == 3
    assert answer["total"] == {"jobs": 3, "gpu_hours": round(440 / H, 6),
                               "gpu_hours_by_type": {"k80": round(240 / H, 6), "v100": round(200 / H, 6)},
                               "mean_wait_s": round(52 / 3, 3), "mean_run_s": round(320 / 3, 3),
                               "preemptions": 1, "failures": 1}


def test_a_failures_log_line_shows_only_to_its_owner_as_in_get_jobs(run):
    _, _, client, as_user = run
    seen_by_ann = by_id(client.get("/history", headers=as_user["ann"]).json())["3"]["reason"]
    seen_by_bob = by_id(client.get("/history", headers=as_user["bob"]).json())["3"]["reason"]

    assert seen_by_ann == "exit 1 on attempt 1, after 0 retries"
    assert seen_by_bob == "exit 1 on attempt 1, after 0 retries: RuntimeError: CUDA out of memory"
    assert client.get("/history").status_code == 401  # this server has users: a credential is needed


def test_totals_per_user_per_gpu_type_and_per_queue(run):
    _, _, client, as_user = run
    users = client.get("/history", params={"by": "user"}, headers=as_user["ann"]).json()["groups"]
    types = client.get("/history", params={"by": "type"}, headers=as_user["ann"]).json()["groups"]
    queues = client.get("/history", params={"by": "queue"}, headers=as_user["ann"]).json()["groups"]

    assert users == [
        {"user": "ann", "jobs": 1, "gpu_hours": round(162 / H, 6), "gpu_hours_by_type": {"v100": round(162 / H, 6)},
         "mean_wait_s": 0.0, "mean_run_s": 162.0, "preemptions": 1, "failures": 0},
        {"user": "bob", "jobs": 2, "gpu_hours": round(278 / H, 6),
         "gpu_hours_by_type": {"k80": round(240 / H, 6), "v100": round(38 / H, 6)},
         "mean_wait_s": 26.0, "mean_run_s": 79.0, "preemptions": 0, "failures": 1},
    ]
    assert [(g["type"], g["jobs"], g["gpu_hours"], g["mean_wait_s"], g["mean_run_s"], g["preemptions"], g["failures"])
            for g in types] == [("k80", 1, round(240 / H, 6), 0.0, 120.0, 0, 0),
                                ("v100", 2, round(200 / H, 6), 26.0, 100.0, 1, 1)]
    assert [(g["queue"], g["jobs"]) for g in queues] == [("", 2), ("research", 1)]


def test_filters_by_user_queue_state_and_time_window(run):
    scheduler, clock, client, as_user = run
    scheduler.submit(job("d", queue="research"), "ann")  # waits: active
    clock.now = T0 + 300

    def ids(**params):
        return [j["id"] for j in client.get("/history", params=params, headers=as_user["ann"]).json()["jobs"]]

    assert ids() == ["1", "2", "3"]  # finished only, by default
    assert ids(user="bob") == ["2", "3"]
    assert ids(user="ann,bob", queue="research") == ["2"]
    assert ids(state="failed,cancelled") == ["2", "3"]
    assert ids(state="active") == ["4"] and ids(state="all") == ["1", "2", "3", "4"]
    assert ids(since=str(T0 + 110)) == ["1", "2"]  # job 3 finished at t=100, before the window
    assert ids(since="3m") == ["1", "2"]  # three minutes before t=300: t=120, as job 2 was cancelled
    assert ids(since="170s") == ["1"]
    assert ids(until=str(T0 + 5)) == ["1", "2"]  # job 3 was submitted at t=10
    assert ids(state="all", until=str(T0 + 5), limit=1) == ["2"]  # the latest one of those matched


@pytest.mark.parametrize("params, field, says", [
    ({"since": "yesterday"}, "since", "2026-11-27T10:00"),
    ({"until": "2026-13-40"}, "until", "3d"),
    ({"state": "done"}, "state", "finished, active, all"),
    ({"by": "gpu"}, "by", "user, type, queue"),
    ({"since": "1h", "until": "2h"}, "until", "after since"),
    ({"limit": "0"}, "limit", "greater than or equal to 1"),
    ({"user": "x" * 5000}, "user", "at most 4096 characters"),
])
def test_a_bad_filter_is_a_400_naming_the_field_and_the_forms_it_takes(run, params, field, says):
    _, _, client, as_user = run
    answer = client.get("/history", params=params, headers=as_user["ann"])

    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field and says in answer.json()["detail"]


def test_times_are_ages_dates_local_times_or_unix_seconds():
    now = 2_000_000_000.0
    assert parse_when("90s", now, "since") == now - 90
    assert parse_when("2h", now, "since") == now - 2 * H
    assert parse_when("3d", now, "since") == now - 3 * 86400
    assert parse_when("1w", now, "since") == now - 7 * 86400
    assert parse_when("2026-11-27", now, "since") == datetime(2026, 11, 27).timestamp()
    assert parse_when("2026-11-27T10:00", now, "since") == datetime(2026, 11, 27, 10, 0).timestamp()
    assert parse_when("2026-11-27 10:00:30", now, "since") == datetime(2026, 11, 27, 10, 0, 30).timestamp()
    assert parse_when("1790000000", now, "since") == 1_790_000_000.0
    for bad in ("2h ago", "nan", "-5", "27/11/2026"):
        with pytest.raises(InputError, match="field 'since': .* is not a time: give an age"):
            parse_when(bad, now, "since")


def test_a_live_attempt_counts_until_now(tmp_path):
    scheduler, clock, _, _ = worked_run(tmp_path)
    scheduler.submit(job("e", gpus=2, gpu_types=["k80"]), "ann")  # at t=200
    clock.now = T0 + 300
    scheduler.tick()  # starts on the two k80s at t=300
    clock.now = T0 + 390
    client = TestClient(create_app(scheduler))
    token = add_user(scheduler.store, "eve", admin=False, now=time.time())

    running = client.get("/history", params={"state": "running"}, headers={"Authorization": f"Bearer {token}"}).json()

    assert [(j["id"], j["run_s"], j["gpu_hours"], j["wait_s"]) for j in running["jobs"]] == \
        [("4", 90.0, {"k80": round(180 / H, 6)}, 100.0)]


def test_apportion_history_asks_the_running_server(tmp_path):
    live = LiveServer(tmp_path / "state", slots="cpu:2", users=("ann",)).start()
    try:
        first = live.submit("cnn", "ann")
        live.submit("lm", "ann")
        wait_for(lambda: live.status_of(first) == "running", 20, "job 1 to start")
        live.finish(first, 0)
        wait_for(lambda: live.status_of(first) == "completed", 20, "job 1 to complete")
        token_file = tmp_path / "token"
        token_file.write_text(live.credential["ann"])
        token_file.chmod(0o600)
        result = CliRunner().invoke(app, ["history", "--server", live.url, "--token-file", str(token_file), "--json",
                                          "--since", "1h"])
        everything = CliRunner().invoke(app, ["history", "--server", live.url, "--token-file", str(token_file),
                                              "--state", "all"])
    finally:
        live.stop()

    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert [(j["id"], j["name"], j["status"], j["gpu_types"]) for j in answer["jobs"]] == [("1", "cnn", "completed",
                                                                                            ["cpu"])]
    assert everything.exit_code == 0, everything.output
    assert "total: 2 job(s)" in everything.output


FILTER_TEXT = st.one_of(st.text(max_size=24), st.sampled_from(
    ["", ",", "all,all", "1e400", "nan", "-1", "99999999999w", "2026-02-30", "9999-12-31T23:59", "0", "\x00",
     "ann,\u00e9", "x" * 4096, str(2**63), "type", "1.5h"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.dictionaries(st.sampled_from(["user", "queue", "state", "since", "until", "by", "limit"]),
                              FILTER_TEXT, max_size=4))
def test_any_filters_get_an_answer_or_a_400_never_a_5xx(run, params):
    _, _, client, as_user = run
    answer = client.get("/history", params=params, headers=as_user["bob"])

    assert answer.status_code in (200, 400), (params, answer.text[:300])
    if answer.status_code == 400:
        assert answer.json()["field"] in params


def test_a_history_read_never_waits_for_the_servers_own_connection(run):
    scheduler = run[0]
    admin = {"Authorization": "Bearer " + "t" * 48}  # checked without the state file
    client = TestClient(create_app(scheduler, "t" * 48))
    assert client.get("/history", headers=admin).status_code == 200
    answers: list = []
    held, release = threading.Event(), threading.Event()

    def round_in_progress():  # holds the server's connection, as a long round would
        with scheduler.store.transaction():
            held.set()
            release.wait(30)

    holder = threading.Thread(target=round_in_progress)
    holder.start()
    held.wait(10)
    reader = threading.Thread(target=lambda: answers.append(client.get("/history", headers=admin)))
    reader.start()
    reader.join(20)
    release.set()
    holder.join(10)

    assert answers and answers[0].status_code == 200
    assert answers[0].json()["total"]["jobs"] == 3


def test_a_history_read_goes_through_the_stores_read_connections_opening_none(run, monkeypatch):
    import sqlite3

    _, _, client, as_user = run
    assert client.get("/history", headers=as_user["ann"]).status_code == 200  # the store's readers are open now
    opened: list = []
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *args, **kwargs: opened.append(args) or connect(*args, **kwargs))

    answers = [client.get("/history", headers=as_user["ann"]) for _ in range(3)]

    assert [a.status_code for a in answers] == [200] * 3 and answers[-1].json()["matched"] == 3
    assert opened == []
