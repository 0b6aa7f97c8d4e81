"""Reads never wait for a round: on a server with credentials, while a round holds the state lock
(or a write transaction is open), checking a credential, every read-only endpoint and a submit
answer at once (apportion/serve/store/state.py's read connections, api.py, scheduler.py)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100}
HELD_S = 5.0  # how long the "round" holds on; every call below must answer well within it
PROMPT_S = 2.0
READS = ("/status", "/jobs", "/jobs/1", "/jobs/1/logs", "/jobs?status=queued&limit=5", "/dashboard/state",
         "/dashboard/jobs/1", "/metrics", "/blocks", "/history")


def server(tmp_path):
    store = StateStore(tmp_path / "state.db")
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(),
                          ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0))
    credential = add_user(store, "alice", admin=False, now=0.0)
    client = TestClient(create_app(scheduler), headers={"Authorization": f"Bearer {credential}"})
    for _ in range(3):
        assert client.post("/jobs", json=JOB).status_code == 200
    scheduler.tick()  # job 1 runs, 2 and 3 wait
    return scheduler, client


@contextmanager
def held(hold):
    """``hold`` (a context manager) entered in another thread for HELD_S seconds, as a long round would."""
    entered = threading.Event()

    def holder():
        with hold:
            entered.set()
            time.sleep(HELD_S)

    thread = threading.Thread(target=holder)
    thread.start()
    entered.wait()
    try:
        yield
    finally:
        thread.join()


def timed(call) -> tuple[int, float]:
    started = time.perf_counter()
    answer = call()
    return answer.status_code, time.perf_counter() - started


def test_while_a_round_holds_the_state_lock_reads_and_a_submit_answer_at_once(tmp_path):
    scheduler, client = server(tmp_path)
    client.get("/status")  # the credential checked once before, as a client that polls

    with held(scheduler.lock):
        answers = {path: timed(lambda: client.get(path)) for path in READS}
        answers["submit"] = timed(lambda: client.post("/jobs", json=JOB))

    slow = {what: (code, round(seconds, 2)) for what, (code, seconds) in answers.items()
            if code != 200 or seconds > PROMPT_S}
    assert slow == {}
    assert scheduler.store.job(4).status == "queued"  # the submit was stored


def test_while_a_write_transaction_is_open_a_new_credential_and_the_reads_answer_at_once(tmp_path):
    scheduler, client = server(tmp_path)
    ops = add_user(scheduler.store, "ops", admin=True, now=0.0)  # never checked yet: one lookup and one HMAC

    with held(scheduler.store.transaction()):
        answers = {path: timed(lambda: client.get(path, headers={"Authorization": f"Bearer {ops}"}))
                   for path in READS}

    slow = {what: (code, round(seconds, 2)) for what, (code, seconds) in answers.items()
            if code != 200 or seconds > PROMPT_S}
    assert slow == {}


def test_a_read_sees_what_was_committed_and_a_writer_sees_its_own_writes(tmp_path):
    store = StateStore(tmp_path / "state.db")
    seen_inside = []
    with store.transaction():
        job_id = store.insert_job(spec=dict(JOB), name="cnn", user="ann", queue="", priority=1.0, kind="cnn",
                                  gpus=1, total_steps=100, submitted=0.0)
        seen_inside.append(store.job(job_id) is not None)  # the writing thread reads what it wrote
        other = threading.Thread(target=lambda: seen_inside.append(store.job(job_id) is not None), daemon=True)
        other.start()
        other.join(timeout=PROMPT_S)  # nor does it wait for the transaction to end
        assert seen_inside == [True, False]  # another thread sees only what is committed
    assert store.job(job_id).name == "cnn"


def test_status_sums_the_hangs_of_the_jobs_that_hung_only(tmp_path):
    store = StateStore(tmp_path / "state.db")
    for name in ("a", "b", "c"):
        store.insert_job(spec=dict(JOB), name=name, user="ann", queue="", priority=1.0, kind="cnn", gpus=1,
                         total_steps=100, submitted=0.0)
    store.update_job(2, hangs=3)
    plan = " ".join(row[-1] for row in store.rows("EXPLAIN QUERY PLAN SELECT COALESCE(SUM(hangs), 0) FROM jobs"
                                                  " WHERE hangs > 0"))

    assert store.total_hangs() == 3
    assert "jobs_hung" in plan  # through the partial index: 50,000 waiting jobs cost /status nothing


def test_a_submit_is_stored_while_a_round_reads_the_jobs_and_the_next_round_sees_it(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "state.db")

    def insert(name):
        return store.insert_job(spec=dict(JOB), name=name, user="ann", queue="", priority=1.0, kind="cnn", gpus=1,
                                total_steps=100, submitted=0.0)

    first = insert("first")
    store.round_table()
    insert("second")  # read again by the next round
    read = StateStore._round_rows_where

    def slow_read(self, *args, **kwargs):  # a round reading tens of thousands of rows
        time.sleep(HELD_S)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(StateStore, "_round_rows_where", slow_read)
    tables = []
    with held_by(lambda: tables.append(store.round_table())):
        started = time.perf_counter()
        third = insert("third")
        took = time.perf_counter() - started
    monkeypatch.setattr(StateStore, "_round_rows_where", read)

    assert took < PROMPT_S  # the insert did not wait for the round's read
    assert list(tables[0]["id"]) == [first, first + 1]
    assert list(store.round_table()["id"]) == [first, first + 1, third]


@contextmanager
def held_by(work):
    """``work()`` running in another thread (started a moment before the block, joined after it)."""
    thread = threading.Thread(target=work)
    thread.start()
    time.sleep(0.3)
    try:
        yield
    finally:
        thread.join()
