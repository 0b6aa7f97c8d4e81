"""The SQLite state: round trips, transactions, and what a reopened file still holds."""

from __future__ import annotations

import re
import sqlite3

import pytest

from apportion.serve.store.state import SCHEMA, StateStore


def add(store: StateStore, name: str = "a", user: str = "ann") -> int:
    return store.insert_job(spec={"name": name, "command": "x", "total_steps": 10}, name=name, user=user,
                            queue="q", priority=1.0, kind=name, gpus=1, total_steps=10, submitted=100.0)


def test_jobs_round_trip_and_survive_a_reopen(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first, second = add(store, "a"), add(store, "b", "bob")
    store.update_job(first, status="running", attempt_live=True, pid=1234, slots="cpu:0,cpu:1",
                     service_by_type={"cpu": 2.5}, steps_done=7, lease_end=200.5)
    store.close()

    again = StateStore(tmp_path / "state.db")
    row = again.job(first)
    assert (row.status, row.attempt_live, row.pid, row.slot_list, row.steps_done, row.lease_end) == (
        "running", True, 1234, ("cpu:0", "cpu:1"), 7, 200.5)
    assert row.service_by_type == {"cpu": 2.5} and row.spec["command"] == "x"
    assert again.job(second).user == "bob" and again.job(second).status == "queued"
    assert [r.id for r in again.live_jobs()] == [first]
    assert [r.id for r in again.active_jobs()] == [first, second]
    assert again.counts()["running"] == 1 and again.counts()["queued"] == 1
    assert again.job(99) is None
    assert [e.event for e in again.events()] == ["submit", "submit"]


def test_a_failed_transaction_leaves_nothing_behind(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job = add(store)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.update_job(job, status="running")
            store.add_event(1.0, job, "start")
            raise RuntimeError("the server died here")
    assert store.job(job).status == "queued"
    assert [e.event for e in store.events(job)] == ["submit"]


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
    store.update_job(running, status="running", attempt_live=True, pid=11, slots="cpu:1")
    store.update_job(stopping, status="running", attempt_live=True, slots="cpu:2", stop="preempt", stop_at=5.0)
    store.update_job(cancelled, status="cancelled", slots="cpu:3")  # not active: starts nothing
    assert [row[0] for row in store.pending_start_slots()] == [promised]
    assert [r.id for r in store.stopping_attempts()] == [stopping]
    assert [r.id for r in store.live_jobs()] == [running, stopping]
    assert [r.id for r in store.active_jobs()] == [waiting, promised, running, stopping]
    assert [r.id for r in store.jobs()] == [waiting, promised, running, stopping, cancelled]
    assert store.anyone_waiting() and store.slots_taken() == {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}


def test_an_attempt_keeps_the_first_time_of_each_thing_it_did(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job = add(store)
    store.attempt_started(job, 1, 100.0, "cpu", "cpu:0", None)
    store.attempt_first_lease(job, 1, 102.0, 0)
    store.attempt_first_lease(job, 1, 105.0, 30)  # a later call is not the first
    store.attempt_lease_told(job, 1, 130.0)
    store.attempt_stop_told(job, 1, 129.0, 270, lease_end=140.0)  # a round extended the lease it knew
    store.attempt_stop_told(job, 1, 129.5, 275, lease_end=140.0)
    store.attempt_ended(job, 1, 129.6, 270, "preempted")

    [attempt] = store.attempts()
    assert (attempt.started, attempt.first_lease, attempt.first_step) == (100.0, 102.0, 0)
    assert (attempt.stop_told, attempt.stop_step, attempt.stop_lease_end) == (129.0, 270, 130.0)
    assert (attempt.ended, attempt.end_step, attempt.how) == (129.6, 270, "preempted")


def test_a_state_file_opened_to_read_is_not_changed(tmp_path):
    store = StateStore(tmp_path / "state.db")
    add(store)
    store.close()
    before = (tmp_path / "state.db").read_bytes()

    reader = StateStore(tmp_path / "state.db", read_only=True)
    assert [j.name for j in reader.jobs()] == ["a"]
    with pytest.raises(sqlite3.OperationalError):
        reader.set_meta("round", "1")
    reader.close()
    assert (tmp_path / "state.db").read_bytes() == before


def test_a_state_file_from_before_idempotency_keys_and_private_reasons_gains_them(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job, failed = add(store), add(store, "f")
    store.update_job(failed, status="failed", reason="exit 1 on attempt 2, after 1 retry: password=hunter2")
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as an older apportion wrote it
    older.execute("DROP TABLE submit_keys")
    older.execute("ALTER TABLE jobs DROP COLUMN reason_log")
    older.commit()
    older.close()

    again = StateStore(tmp_path / "state.db")
    assert again.job(job).reason_log == ""
    # the log line an older apportion put into a failed job's reason is moved apart
    assert (again.job(failed).reason, again.job(failed).reason_log) == ("exit 1 on attempt 2, after 1 retry",
                                                                              "password=hunter2")
    keyed = again.insert_job(spec={"name": "b", "command": "x", "total_steps": 10}, name="b", user="ann", queue="q",
                             priority=1.0, kind="b", gpus=1, total_steps=10, submitted=101.0, key=("ann", "k1", "d1"))
    assert again.submitted_with("ann", "k1") == (keyed, "d1")
    assert again.submitted_with("bob", "k1") is None


def test_a_misspelt_field_is_refused_at_once_by_name(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job = add(store)
    with pytest.raises(ValueError, match="'stauts' is not a field of a job"):
        store.update_job(job, stauts="running")
    with pytest.raises(ValueError, match="'slot_list' is not a field of a job"):  # worked out from slots, not stored
        store.update_job(job, slot_list=("cpu:0",))
    assert store.job(job).status == "queued"


def test_a_state_file_from_before_attempt_live_reads_a_pid_as_an_attempt_alive(tmp_path):
    store = StateStore(tmp_path / "state.db")
    running, waiting = add(store), add(store, "b")
    store.update_job(running, status="running", attempt_live=True, pid=4321, slots="cpu:0")
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as an older apportion wrote it: nor the indexes over it
    older.execute("DROP INDEX jobs_to_start")
    older.execute("DROP INDEX jobs_live")
    older.execute("ALTER TABLE jobs DROP COLUMN attempt_live")
    older.commit()
    older.close()

    reader = StateStore(tmp_path / "state.db", read_only=True)  # a replay reads it as it is
    assert [(j.id, j.attempt_live) for j in reader.jobs()] == [(running, True), (waiting, False)]
    reader.close()
    again = StateStore(tmp_path / "state.db")  # a server migrates it
    assert [j.id for j in again.live_jobs()] == [running] and tuple(again.round_table()["live"]) == (1, 0)
    assert tuple(again.round_table()["pid"]) == (4321, None)


def test_a_state_file_from_before_after_reads_every_job_as_waiting_for_none(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first = add(store)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")
    older.execute("ALTER TABLE jobs DROP COLUMN after")
    older.commit()
    older.close()

    reader = StateStore(tmp_path / "state.db", read_only=True)
    assert [(j.id, j.after) for j in reader.jobs()] == [(first, "")]
    reader.close()
    again = StateStore(tmp_path / "state.db")
    second = again.insert_job(spec={"name": "b", "command": "x", "total_steps": 10, "after": [first]}, name="b",
                              user="ann", queue="q", priority=1.0, kind="b", gpus=1, total_steps=10, submitted=101.0)
    assert (again.job(first).after, again.job(second).after) == ("", str(first))
    assert tuple(again.round_table()["after"]) == ("", str(first))


def test_a_state_file_from_before_data_stalls_reads_them_as_never_said_and_a_server_stores_them(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first = add(store)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")
    for column in ("data_stall", "fetch_stall", "preprocess_stall"):
        older.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    older.commit()
    older.close()

    reader = StateStore(tmp_path / "state.db", read_only=True)
    assert [(j.data_stall, j.fetch_stall) for j in reader.jobs()] == [(None, None)]
    reader.close()
    again = StateStore(tmp_path / "state.db")
    again.update_job(first, data_stall=0.25, fetch_stall=0.2, preprocess_stall=0.05)
    row = again.job(first)
    assert (row.data_stall, row.fetch_stall, row.preprocess_stall) == (0.25, 0.2, 0.05)


def test_a_job_and_its_idempotency_key_are_stored_together_or_not_at_all(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first = store.insert_job(spec={"name": "a", "command": "x", "total_steps": 10}, name="a", user="ann", queue="q",
                             priority=1.0, kind="a", gpus=1, total_steps=10, submitted=100.0, key=("ann", "k", "d"))
    with pytest.raises(sqlite3.IntegrityError):  # the same user's key twice: the second job is not stored either
        store.insert_job(spec={"name": "b", "command": "x", "total_steps": 10}, name="b", user="ann", queue="q",
                         priority=1.0, kind="b", gpus=1, total_steps=10, submitted=101.0, key=("ann", "k", "d"))
    assert [j.id for j in store.jobs()] == [first]


def test_a_state_file_from_before_the_dashboards_samples_opens_with_none_and_keeps_new_ones(tmp_path):
    store = StateStore(tmp_path / "state.db")
    add(store)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as an older apportion wrote it
    older.execute("DROP TABLE samples")
    older.commit()
    older.close()

    again = StateStore(tmp_path / "state.db")
    assert again.samples() == []
    again.put_sample(5.0, 1, 2, {"v100": 2})
    assert again.samples() == [(5.0, 1, 2, {"v100": 2})]


def test_the_accounting_of_a_state_file_from_before_attempts_and_private_reasons_reads_their_defaults(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job = add(store)
    store.update_job(job, status="failed", reason="exit 1 on attempt 1, after 0 retries")
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as an older apportion wrote it
    older.execute("DROP TABLE attempts")
    older.execute("ALTER TABLE jobs DROP COLUMN reason_log")
    older.commit()
    older.close()

    jobs, attempts = StateStore(tmp_path / "state.db", read_only=True).accounting_columns()

    assert (jobs["id"], jobs["status"], jobs["reason_log"]) == ((job,), ("failed",), ("",))
    assert attempts["job_id"] == () and attempts["gpu_type"] == ()


def test_a_state_file_from_before_job_arrays_gains_their_columns_and_an_array_takes_the_ids_after_its_jobs(tmp_path):
    # the schema as it was: no array columns (SQLite cannot drop a column followed by a comment)
    before = re.sub(r",( *--[^\n]*)\n *array_id [^\n]*\n *array_index [^\n]*", r"\1", SCHEMA)
    assert "array_id" not in before
    older = sqlite3.connect(tmp_path / "state.db")
    older.executescript(before)
    older.execute("INSERT INTO jobs (name, user, queue, priority, kind, gpus, total_steps, spec, status, submitted)"
                  " VALUES ('a', 'ann', 'q', 1.0, 'a', 1, 10, '{}', 'queued', 100.0)")
    older.commit()
    older.close()
    first = 1

    reader = StateStore(tmp_path / "state.db", read_only=True)
    assert [(j.id, j.array_id, j.array_index) for j in reader.jobs()] == [(first, None, None)]
    reader.close()
    again = StateStore(tmp_path / "state.db")
    spec = {"name": "s", "command": "x", "total_steps": 10}
    array_id, tasks = again.insert_array(spec=spec, indices=(3, 5), user="ann", queue="q", priority=1.0,
                                         kind="s", gpus=1, total_steps=10, submitted=101.0)
    after = add(again)

    assert (array_id, tasks, after) == (first + 1, [first + 2, first + 3], first + 4)
    assert [(t.id, t.array_id, t.array_index) for t in again.array_tasks(array_id)] == [
        (first + 2, array_id, 3), (first + 3, array_id, 5)]
    assert tuple(again.round_table()["array_id"]) == (None, array_id, array_id, None)
    indexes = {row[1] for row in again._conn.execute("PRAGMA index_list(jobs)")}
    assert "jobs_array" in indexes


def test_the_round_table_kept_between_rounds_reads_as_the_file_does(tmp_path):
    store = StateStore(tmp_path / "state.db")
    first, second, third = add(store, "a"), add(store, "b", "bob"), add(store, "c")
    assert tuple(store.round_table()["id"]) == (first, second, third)
    store.update_job(first, status="running", attempt_live=True, slots="cpu:0", steps_done=3)
    store.update_jobs({second: {"status": "completed", "finished": 150.0}, third: {"reason": "waiting for slots"}})
    with pytest.raises(RuntimeError), store.transaction():
        store.update_job(third, priority=9.0)
        assert store.round_table()["priority"][-1] == 9.0  # inside: what the transaction wrote so far
        raise RuntimeError("abandoned")
    fourth = add(store, "d")
    with pytest.raises(ValueError, match="'colour' is not a field of a job"):
        store.update_jobs({fourth: {"colour": "red"}})

    kept = {name: tuple(column) for name, column in store.round_table().items()}

    assert kept["id"] == (first, third, fourth)  # the completed one is no longer active
    assert kept["steps_done"] == (3, 0, 0) and kept["live"] == (1, 0, 0) and kept["priority"] == (1.0, 1.0, 1.0)
    assert kept == {name: tuple(column) for name, column in StateStore(tmp_path / "state.db").round_table().items()}


def test_a_rounds_own_writes_reach_the_kept_round_rows_without_reading_those_jobs_again(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "state.db")
    ids = [add(store, f"j{k}") for k in range(20)]
    typed = store.round_table().typed("lease_end", float)  # a numeric column converted once and kept
    assert all(v != v for v in typed)  # NaN: no lease yet
    read = []
    original = store._round_rows_where
    monkeypatch.setattr(store, "_round_rows_where", lambda where, params=(): read.append(list(params)) or
                        original(where, params))
    store.update_jobs({job_id: {"reason": "waiting for slots", "lease_end": 200} for job_id in ids[:15]}
                      | {ids[15]: {"status": "completed", "finished": 150.0}})  # leaves the round: read again
    with pytest.raises(RuntimeError), store.transaction():  # rolled back: read again, as the file has it
        store.update_jobs({ids[16]: {"reason": "never kept"}})
        raise RuntimeError("abandoned")

    table = store.round_table()

    assert read == [[ids[15], ids[16]]]  # not the 15 the round wrote
    assert list(table["reason"][:15]) == ["waiting for slots"] * 15 and table["reason"][15] == "waiting for its first round"
    assert list(table.typed("lease_end", float)[:15]) == [200.0] * 15 and type(table["lease_end"][0]) is float
    assert tuple(table["id"]) == tuple(ids[:15] + ids[16:])
    kept = {name: tuple(column) for name, column in table.items()}
    assert kept == {name: tuple(column) for name, column in StateStore(tmp_path / "state.db").round_table().items()}


def test_jobs_stored_after_a_round_reach_the_kept_round_rows_as_the_file_reads_them(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "state.db")
    add(store, "first")
    store.round_table()
    read = []
    original = store._round_rows_where
    monkeypatch.setattr(store, "_round_rows_where", lambda where, params=(): read.append(list(params)) or
                        original(where, params))
    single = store.insert_job(spec={"name": "x", "command": "x", "total_steps": 10, "cpus": 2, "after": [1]},
                              name="x", user="ann", queue="q", priority=2, kind="k", gpus=1, total_steps=10,
                              submitted=100)
    array_id, tasks = store.insert_array(spec={"name": "s", "command": "x", "total_steps": 10, "array": "0-2"},
                                         indices=(0, 1, 2), user="ann", queue="q", priority=1.0, kind="k", gpus=1,
                                         total_steps=10, submitted=101.5)
    store.update_job(tasks[1], priority=5.0)  # written after it was stored: read back

    table = store.round_table()

    assert read == [[tasks[1]]]
    kept = {name: tuple((type(v), v) for v in column) for name, column in table.items()}
    assert kept == {name: tuple((type(v), v) for v in column)
                    for name, column in StateStore(tmp_path / "state.db").round_table().items()}
    assert tuple(table["id"]) == (1, single, *tasks)
