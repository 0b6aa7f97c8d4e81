"""The SQLite state: round trips, transactions, and what a reopened file still holds."""

from __future__ import annotations

import sqlite3

import pytest

from apportion.serve.state import StateStore


def add(store: StateStore, name: str = "a", user: str = "ann") -> int:
    return store.insert_job(spec={"name": name, "command": "x", "total_steps": 10}, name=name, user=user,
                            queue="q", priority=1.0, kind=name, gpus=1, total_steps=10, submitted=100.0)


def test_jobs_round_trip_and_survive_a_reopen(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first, second = add(store, "a"), add(store, "b", "bob")
    store.update_job(first, status="running", pid=1234, slots="cpu:0,cpu:1", service_by_type={"cpu": 2.5},
                     steps_done=7, lease_end=200.5)
    store.close()

    again = StateStore(tmp_path / "state.db")
    row = again.job(first)
    assert (row["status"], row["pid"], row["slot_list"], row["steps_done"], row["lease_end"]) == (
        "running", 1234, ["cpu:0", "cpu:1"], 7, 200.5)
    assert row["service_by_type"] == {"cpu": 2.5} and row["spec"]["command"] == "x"
    assert again.job(second)["user"] == "bob" and again.job(second)["status"] == "queued"
    assert [r["id"] for r in again.live_jobs()] == [first]
    assert [r["id"] for r in again.active_jobs()] == [first, second]
    assert again.counts()["running"] == 1 and again.counts()["queued"] == 1
    assert again.job(99) is None
    assert [e["event"] for e in again.events()] == ["submit", "submit"]


def test_a_failed_transaction_leaves_nothing_behind(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job = add(store)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.update_job(job, status="running")
            store.add_event(1.0, job, "start")
            raise RuntimeError("the server died here")
    assert store.job(job)["status"] == "queued"
    assert [e["event"] for e in store.events(job)] == ["submit"]


def test_throughputs_and_meta(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.put_throughput("cnn", "cpu", 1, 4.0, 1, 10.0)
    store.put_throughput("cnn", "cpu", 1, 5.0, 2, 11.0)
    store.put_throughput("cnn", "h100", 2, 50.0, 1, 12.0)
    assert store.throughputs() == {("cnn", "cpu", 1): (5.0, 2), ("cnn", "h100", 2): (50.0, 1)}
    store.set_meta("round", "3")
    store.set_meta("round", "4")
    assert store.meta("round") == "4" and store.meta("missing", "x") == "x"


def test_the_file_is_in_wal_mode_and_readable_by_others_while_open(tmp_path):
    store = StateStore(tmp_path / "state.db")
    add(store)
    other = sqlite3.connect(tmp_path / "state.db")
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT name FROM jobs").fetchall() == [("a",)]
    other.close()


def test_named_queries_pick_the_jobs_a_scheduler_step_needs(tmp_path):
    store = StateStore(tmp_path / "state.db")
    waiting, promised, running, stopping, cancelled = (add(store, name) for name in "abcde")
    store.update_job(promised, slots="cpu:0")
    store.update_job(running, status="running", pid=11, slots="cpu:1")
    store.update_job(stopping, status="running", pid=12, slots="cpu:2", stop="preempt", stop_at=5.0)
    store.update_job(cancelled, status="cancelled", slots="cpu:3")  # not active: starts nothing
    assert [r["id"] for r in store.pending_starts()] == [promised]
    assert [r["id"] for r in store.stopping_attempts()] == [stopping]
    assert [r["id"] for r in store.live_jobs()] == [running, stopping]
    assert [r["id"] for r in store.active_jobs()] == [waiting, promised, running, stopping]
    assert [r["id"] for r in store.jobs()] == [waiting, promised, running, stopping, cancelled]
    assert store.anyone_waiting() and store.slots_taken() == {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}
