"""A job array's spec is stored once, its tasks' rows keep only their own part: the state file grows
by a small multiple of the request, every task reads back whole, an older state file is cut down on
open, and another user's cancel (or log read) is refused from the jobs' keys, reading no task."""

from __future__ import annotations

import json
import sqlite3

import apportion.serve.store.state as state_module
from apportion.serve.jobs.job_array import task_spec
from apportion.serve.store.state import StateStore
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


def test_rounds_starts_and_lists_parse_an_arrays_spec_once_not_once_a_task(tmp_path, monkeypatch):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.post("/jobs", **big_array(array="0-19")).json()["id"])
    loads, big = json.loads, []

    def counted(text, *args, **kwargs):
        if isinstance(text, str) and len(text) > 100_000:  # an array's spec, not a task's own row
            big.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    for _ in range(3):
        cluster.tick()
    assert len(cluster.jobs()) == 20
    for task in range(array_id + 1, array_id + 21):
        assert cluster.scheduler.store.job(task).spec["env"]["V0"] == BIG_VALUE

    assert len(big) == 1


def test_a_small_request_of_many_tasks_costs_a_small_row_a_task_whatever_its_array_text(tmp_path):
    cluster = Cluster(tmp_path)
    indices = ",".join(str(1_000_000 + 3 * k) for k in range(2000))  # 16 KB of `array`, 2,000 tasks
    body = {"name": "n" * 200, "command": "train", "total_steps": 100, "array": indices}
    before = state_bytes(tmp_path)

    answer = cluster.post("/jobs", **body)

    assert answer.status_code == 200, answer.text
    grown, sent = state_bytes(tmp_path) - before, len(json.dumps(body))
    assert grown < 3 * sent + 2000 * 1024, f"2,000 tasks of a {sent:,}-byte request grew the state by {grown:,} bytes"
    assert cluster.jobs()[-1]["name"] == "n" * 200 + "[1005997]"


def test_an_arrays_table_without_its_text_column_gains_it_on_open(tmp_path):
    store = StateStore(tmp_path / "state.db")
    common = dict(user="ann", queue="default", priority=1.0, kind="k", gpus=1, total_steps=100, submitted=1.0)
    array_id, _ = store.insert_array(spec=big_array(array="0-3%2"), indices=(0, 1, 2, 3), **common)
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")
    older.executescript("CREATE TABLE kept AS SELECT id, user, spec FROM arrays; DROP TABLE arrays;"
                        " ALTER TABLE kept RENAME TO arrays;")  # as the arrays table was first made
    older.commit()
    older.close()
    reader = StateStore(tmp_path / "state.db", read_only=True)
    assert reader.array_texts([array_id]) == {array_id: ""}  # read as it is: the tasks' rows no longer say
    reader.close()

    assert StateStore(tmp_path / "state.db").array_texts([array_id]) == {array_id: "0-3%2"}


def test_an_arrays_gpu_types_are_kept_once_and_still_decide_where_its_tasks_run(tmp_path):
    cluster = Cluster(tmp_path, slots="cpu:2,k80:2")
    long_names = [f"t{k:02d}" + "x" * 250 for k in range(63)]  # 16 KB of gpu_types: the most they may be
    body = {"name": "g", "command": "train", "total_steps": 100, "array": "0-1999", "gpu_types": ["k80", *long_names]}
    before = state_bytes(tmp_path)

    array_id = int(cluster.post("/jobs", **body).json()["id"])
    grown, sent = state_bytes(tmp_path) - before, len(json.dumps(body))
    on_cpu = int(cluster.post("/jobs", name="c", command="train", total_steps=100, array="0-1",
                              gpu_types=["cpu"]).json()["id"])
    cluster.tick()

    assert grown < 3 * sent + 2000 * 1024, f"2,000 tasks of a {sent:,}-byte request grew the state by {grown:,} bytes"
    store = cluster.scheduler.store
    assert [store.job(array_id + k).gpu_type for k in (1, 2, 3)] == ["k80", "k80", None]
    assert [store.job(on_cpu + k).gpu_type for k in (1, 2)] == ["cpu", "cpu"]
    assert store.job(array_id + 3).allowed == ("k80", *long_names)
    assert cluster.jobs()[0]["gpu_types"] == ["k80", *long_names]


def test_a_tasks_time_limit_is_read_from_its_own_row_by_the_watchdogs_query(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.post("/jobs", **big_array(array="0-1", time_limit=5)).json()["id"])
    cluster.tick()
    store = cluster.scheduler.store
    assert [store.job(array_id + k).attempt_live for k in (1, 2)] == [True, True]

    later = cluster.clock.now + 60
    assert store.overdue_attempts(later, 0.0, None) == [array_id + 1, array_id + 2]
