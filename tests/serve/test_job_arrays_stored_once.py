"""A job array's spec is stored once, its tasks' rows keep only their own part: the state file grows
by a small multiple of the request, every task reads back whole, an older state file is cut down on
open, and another user's cancel (or log read) is refused from the jobs' keys, reading no task."""

from __future__ import annotations

import json
import sqlite3

import apportion.serve.state as state_module
from apportion.serve.job_array import task_spec
from apportion.serve.state import StateStore
from test_job_arrays import Cluster

BIG_VALUE = "x" * 16 * 1024  # the most one environment variable's value may hold (bounds.MAX_ENV_VALUE)


def state_bytes(tmp_path) -> int:
    """The state file and its write-ahead log, in bytes."""
    return sum(path.stat().st_size for path in tmp_path.glob("state.db*") if not path.name.endswith("-shm"))


def big_array(**fields) -> dict:
    return {"name": "sweep", "command": ["python", "train.py", "--lr", "0.1"], "total_steps": 100,
            "env": {f"V{k}": BIG_VALUE for k in range(16)}, **fields}


def test_a_big_array_grows_the_state_file_by_a_small_multiple_of_its_request(tmp_path):
    cluster = Cluster(tmp_path)
    body = big_array(array="0-39")
    before = state_bytes(tmp_path)

    answer = cluster.post("/jobs", **body)

    assert answer.status_code == 200, answer.text
    grown, sent = state_bytes(tmp_path) - before, len(json.dumps(body))
    assert grown < 3 * sent, f"40 tasks of a {sent:,}-byte request grew the state by {grown:,} bytes"
    lengths = [n for (n,) in cluster.scheduler.store.rows("SELECT length(spec) FROM jobs")]
    assert len(lengths) == 40 and max(lengths) < 500  # each task's own row: its name, index and numbers


def test_every_task_reads_back_as_submitted_wherever_it_is_read(tmp_path):
    cluster = Cluster(tmp_path)
    body = big_array(array="3,5", checkpoint_dir=str(tmp_path / "ckpt"), time_limit=600, cpus=1)
    array_id = int(cluster.post("/jobs", **body).json()["id"])
    store = cluster.scheduler.store
    submitted = {**body, "user": "alice"}

    cluster.tick()

    for task, index in ((array_id + 1, 3), (array_id + 2, 5)):
        spec = store.job(task).spec
        assert {k: spec[k] for k in submitted if k not in ("name", "checkpoint_dir")} == {
            k: v for k, v in submitted.items() if k not in ("name", "checkpoint_dir")}
        assert spec == task_spec(store.array_spec(array_id), index)
        assert (spec["name"], spec["checkpoint_dir"]) == (f"sweep[{index}]", str(tmp_path / "ckpt" / str(index)))
        shown = cluster.client.get(f"/jobs/{task}", headers={
            "Authorization": f"Bearer {cluster.credential['alice']}"}).json()
        assert (shown["command"], shown["time_limit"]) == (body["command"], 600)
        told = next(env for (job_id, _), env in cluster.executor.envs.items() if job_id == task)
        assert all(told[name] == BIG_VALUE for name in body["env"])
    assert [j["command"] for j in cluster.jobs()] == [body["command"]] * 2
    # the tasks share their array's parsed spec: read once, not once a task
    assert store.job(array_id + 1).spec["env"] is store.job(array_id + 2).spec["env"]


def test_an_older_state_file_whose_tasks_hold_whole_specs_reads_the_same_and_is_cut_down_on_open(tmp_path):
    store = StateStore(tmp_path / "state.db")
    spec = big_array(array="0-2", checkpoint_dir="/ckpt", user="ann")
    common = dict(user="ann", queue="default", priority=1.0, kind="k", gpus=1, total_steps=100, submitted=1.0)
    kept, _ = store.insert_array(spec=spec, indices=(0, 1, 2), **common)
    odd, _ = store.insert_array(spec={**spec, "array": "0-1"}, indices=(0, 1), **common)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as an older apportion stored them: every task whole
    for job_id, array_id, index in older.execute("SELECT id, array_id, array_index FROM jobs").fetchall():
        whole = task_spec(spec if array_id == kept else {**spec, "array": "0-1"}, index)
        if job_id == odd + 2:
            whole["env"] = {"ONLY": "this task's"}  # no array spec makes this one: its array is left whole
        older.execute("UPDATE jobs SET spec = ? WHERE id = ?", (json.dumps(whole), job_id))
    older.execute("DROP TABLE arrays")
    older.execute("DELETE FROM meta WHERE key = 'arrays_stored_once'")
    older.commit()
    older.close()
    reader = StateStore(tmp_path / "state.db", read_only=True)
    before = [(j.id, j.name, j.array_id, j.array_index, j.spec) for j in reader.jobs()]
    reader.close()
    assert before[1][4] == task_spec(spec, 1)

    opened = StateStore(tmp_path / "state.db")

    assert [(j.id, j.name, j.array_id, j.array_index, j.spec) for j in opened.jobs()] == before
    whole = dict(opened.rows("SELECT id, json_extract(spec, '$.command') IS NOT NULL FROM jobs"))
    assert [whole[kept + 1 + k] for k in range(3)] == [0, 0, 0]  # stored once now
    assert [whole[odd + 1 + k] for k in range(2)] == [1, 1]  # left whole: nothing lost
    assert opened.array_spec(kept) == spec and opened.array_spec(odd) is None
    assert [t.spec for t in opened.array_tasks(kept)] == [task_spec(spec, k) for k in range(3)]


def count_records(monkeypatch) -> list[int]:
    """The ids of the jobs the store reads as whole records from now on."""
    read: list[int] = []
    record = state_module.job_record

    def counted(row, *args):
        read.append(row["id"])
        return record(row, *args)

    monkeypatch.setattr(state_module, "job_record", counted)
    return read


def test_another_users_cancel_of_an_array_is_refused_reading_no_task_and_changing_nothing(tmp_path, monkeypatch):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.post("/jobs", **big_array(array="0-19")).json()["id"])
    store = cluster.scheduler.store
    events = len(store.events())
    read = count_records(monkeypatch)

    refused = cluster.post(f"/jobs/{array_id}/cancel", "bob")
    refused_task = cluster.post(f"/jobs/{array_id + 3}/cancel", "bob")

    assert refused.status_code == 403 and f"array {array_id} belongs to 'alice'" in refused.json()["detail"]
    assert refused_task.status_code == 403
    assert read == [] and len(store.events()) == events
    assert {j.status for j in store.array_tasks(array_id)} == {"queued"}
    read.clear()
    answer = cluster.post(f"/jobs/{array_id}/cancel")
    assert answer.json() == {"cancelled": 20, "array": True}
    assert read == []  # the owner's cancel too: SQL over the tasks' rows, no task read whole
    assert [e.detail for e in store.events() if e.event == "cancel"] == ["by alice"] * 20


def test_another_users_log_read_is_refused_reading_no_job(tmp_path, monkeypatch):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.post("/jobs", **big_array(array="0-1")).json()["id"])
    read = count_records(monkeypatch)

    answer = cluster.client.get(f"/jobs/{array_id + 1}/logs",
                                headers={"Authorization": f"Bearer {cluster.credential['bob']}"})

    assert answer.status_code == 403 and "belongs to 'alice'" in answer.json()["detail"]
    assert read == []


def test_an_older_state_file_with_a_damaged_task_still_opens_and_leaves_that_array_as_it_was(tmp_path):
    store = StateStore(tmp_path / "state.db")
    common = dict(user="ann", queue="default", priority=1.0, kind="k", gpus=1, total_steps=100, submitted=1.0)
    array_id, tasks = store.insert_array(spec=big_array(array="0-1", user="ann"), indices=(0, 1), **common)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")
    older.execute("UPDATE jobs SET spec = ? WHERE id = ?", (json.dumps(task_spec(big_array(array="0-1"), 0)), tasks[0]))
    older.execute("UPDATE jobs SET spec = 'not json' WHERE id = ?", (tasks[1],))
    older.execute("DROP TABLE arrays")
    older.execute("DELETE FROM meta WHERE key = 'arrays_stored_once'")
    older.commit()
    older.close()

    opened = StateStore(tmp_path / "state.db")

    assert opened.array_spec(array_id) is None
    assert opened.rows("SELECT spec FROM jobs WHERE id = ?", (tasks[1],)) == [("not json",)]
