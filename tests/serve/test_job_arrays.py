"""Job arrays (a job file's ``array:``) through the HTTP API, on a fake clock and a fake executor:
one job per index, each told its index and checkpointing apart; ``after`` an array; cancelling
one; ranges that cannot be read, or are too large, refused naming the field; all tasks or none."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.core.errors import InputError
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.base.bounds import MAX_ARRAY_TASKS
from apportion.serve.jobs.job_array import array_text, parse_array
from test_serve_dependencies import make


class Cluster:
    """The API over a four-slot fake cluster, with users alice and bob."""

    def __init__(self, tmp_path, slots: str = "cpu:4") -> None:
        self.scheduler, self.executor, self.clock = make(tmp_path, slots=slots)
        self.client = TestClient(create_app(self.scheduler))
        self.credential = {name: add_user(self.scheduler.store, name, admin=False, now=0.0) for name in ("alice", "bob")}

    def post(self, path: str, who: str = "alice", **body):
        return self.client.post(path, headers={"Authorization": f"Bearer {self.credential[who]}"}, json=body)

    def submit(self, who: str = "alice", **fields):
        return self.post("/jobs", who, **{"name": "sweep", "command": "train", "total_steps": 100, **fields})

    def jobs(self) -> list[dict]:
        return self.client.get("/jobs", headers={"Authorization": f"Bearer {self.credential['alice']}"}).json()

    def tick(self) -> None:
        self.clock.now += 1.0
        self.scheduler.tick()


def test_an_array_of_four_is_four_jobs_each_told_its_own_index_and_checkpointing_apart(tmp_path):
    cluster = Cluster(tmp_path)
    answer = cluster.submit(array="0-3", checkpoint_dir=str(tmp_path / "ckpt"))
    assert answer.status_code == 200, answer.text
    array_id = int(answer.json()["id"])
    assert answer.json()["tasks"] == 4

    cluster.tick()

    jobs = cluster.jobs()
    assert [(j["id"], j["name"], j["array_id"], j["array_index"]) for j in jobs] == [
        (str(array_id + 1 + i), f"sweep[{i}]", str(array_id), i) for i in range(4)]
    told = {job_id: env for (job_id, _), env in cluster.executor.envs.items()}
    assert [told[array_id + 1 + i]["APPORTION_ARRAY_INDEX"] for i in range(4)] == ["0", "1", "2", "3"]
    assert {told[job_id]["APPORTION_ARRAY_ID"] for job_id in told} == {str(array_id)}
    assert {told[job_id]["APPORTION_ARRAY_COUNT"] for job_id in told} == {"4"}
    assert [told[array_id + 1 + i]["APPORTION_CHECKPOINT_DIR"] for i in range(4)] == [
        str(tmp_path / "ckpt" / str(i)) for i in range(4)]


def test_tasks_without_a_checkpoint_dir_keep_the_servers_directory_of_each_job(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="5,7").json()["id"])
    cluster.tick()
    dirs = {env["APPORTION_CHECKPOINT_DIR"] for env in cluster.executor.envs.values()}
    assert dirs == {str(tmp_path / "jobs" / str(array_id + 1) / "checkpoints"),
                    str(tmp_path / "jobs" / str(array_id + 2) / "checkpoints")}
    assert sorted(env["APPORTION_ARRAY_INDEX"] for env in cluster.executor.envs.values()) == ["5", "7"]


def test_a_job_after_an_array_waits_for_every_task_and_then_starts(tmp_path):
    cluster = Cluster(tmp_path, slots="cpu:2")
    array_id = int(cluster.submit(array="0-1").json()["id"])
    report = int(cluster.submit(name="report", after=[array_id]).json()["id"])
    cluster.tick()
    assert cluster.scheduler.store.job(report).reason == f"waiting for array {array_id} to complete"

    cluster.scheduler.progress(array_id + 1, 1, 100, 1.0)
    cluster.executor.finish(array_id + 1, 0)
    cluster.tick()
    assert cluster.scheduler.store.job(report).status == "queued"  # one task of two completed

    cluster.scheduler.progress(array_id + 2, 1, 100, 1.0)
    cluster.executor.finish(array_id + 2, 0)
    cluster.tick()
    assert cluster.scheduler.store.job(report).status == "running"


def test_a_job_after_an_array_fails_as_soon_as_one_task_fails(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-2").json()["id"])
    report = int(cluster.submit(name="report", after=[str(array_id)]).json()["id"])
    cluster.tick()

    cluster.executor.finish(array_id + 2, 1)  # crashes; the server allows no retry
    cluster.tick()

    assert cluster.scheduler.store.job(array_id + 2).status == "failed"
    row = cluster.scheduler.store.job(report)
    assert (row.status, row.reason) == ("failed", f"cannot be scheduled: array {array_id}, which it runs after, failed")


def test_after_may_name_only_the_users_own_array(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = cluster.submit("alice", array="0-1").json()["id"]
    answer = cluster.submit("bob", after=[array_id])
    assert answer.status_code == 400 and answer.json()["field"] == "after"
    assert f"job {array_id} is alice's" in answer.json()["message"]


def test_cancelling_an_array_cancels_its_tasks_still_active_and_says_how_many(tmp_path):
    cluster = Cluster(tmp_path, slots="cpu:2")
    array_id = int(cluster.submit(array="0-3").json()["id"])
    cluster.tick()  # tasks 0 and 1 run, 2 and 3 wait
    cluster.scheduler.progress(array_id + 1, 1, 100, 1.0)
    cluster.executor.finish(array_id + 1, 0)
    cluster.tick()
    assert cluster.scheduler.store.job(array_id + 1).status == "completed"

    assert cluster.post(f"/jobs/{array_id}/cancel", "bob").status_code == 403
    answer = cluster.post(f"/jobs/{array_id}/cancel")

    assert answer.status_code == 200 and answer.json() == {"cancelled": 3, "array": True}
    assert [j["status"] for j in cluster.jobs()] == ["completed", "cancelled", "cancelled", "cancelled"]
    assert cluster.post(f"/jobs/{array_id}/cancel").status_code == 409  # nothing left to cancel


def test_one_task_is_cancelled_by_its_own_id(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-2").json()["id"])

    answer = cluster.post(f"/jobs/{array_id + 2}/cancel")

    assert answer.json() == {"cancelled": 1}
    assert [j["status"] for j in cluster.jobs()] == ["queued", "cancelled", "queued"]


@pytest.mark.parametrize("text, said", [
    ("0-", "'0-' is none of those"),
    ("a-b", "'a-b' is none of those"),
    ("7-3", "the range 7-3 runs backwards"),
    ("0-9:0", "the step of 0-9:0 must be at least 1"),
    ("1,,2", "'' is none of those"),
    ("0-3%0", "%N (at most N tasks at once) must be a whole number from 1"),
    ("-1", "'-1' is none of those"),
    ("9" * 5000, "is none of those"),  # more digits than any index: never turned into a number
    ([1, None], "must be an index or a range such as 5-7, got None"),
])
def test_a_malformed_range_is_refused_naming_the_field_and_nothing_is_stored(tmp_path, text, said):
    cluster = Cluster(tmp_path)
    answer = cluster.submit(array=text)
    assert answer.status_code == 400
    assert answer.json()["field"].startswith("array") and said in answer.json()["message"]
    assert cluster.jobs() == []


def test_an_array_too_large_is_refused_before_any_index_is_listed(tmp_path):
    cluster = Cluster(tmp_path)
    for text in (f"0-{MAX_ARRAY_TASKS}", "0-999999999", f"0-{MAX_ARRAY_TASKS - 1},{MAX_ARRAY_TASKS + 5}"):
        answer = cluster.submit(array=text)
        assert answer.status_code == 400 and answer.json()["field"] == "array", text
        assert f"more than {MAX_ARRAY_TASKS:,} tasks" in answer.json()["message"]
    assert cluster.jobs() == []


def test_an_array_is_stored_whole_or_not_at_all(tmp_path):
    cluster = Cluster(tmp_path)
    store = cluster.scheduler.store
    add_event, events = store.add_event, []

    def full_at_the_third_task(time, job_id, event, detail=""):
        events.append(job_id)
        if len(events) == 3:  # the state directory fills up halfway through
            raise store.no_space("the disk filled")
        add_event(time, job_id, event, detail)

    store.add_event = full_at_the_third_task
    answer = cluster.submit(array="0-4")
    store.add_event = add_event
    store.full_since = None

    assert answer.status_code == 507
    assert cluster.jobs() == []
    again = cluster.submit(array="0-4")
    assert again.status_code == 200 and len(cluster.jobs()) == 5


def test_a_retried_submit_of_an_array_finds_the_array(tmp_path):
    cluster = Cluster(tmp_path)
    headers = {"Authorization": f"Bearer {cluster.credential['alice']}", "Idempotency-Key": "k1"}
    body = {"name": "sweep", "command": "train", "total_steps": 10, "array": "0-2"}
    first = cluster.client.post("/jobs", headers=headers, json=body).json()
    again = cluster.client.post("/jobs", headers=headers, json=body).json()
    assert again == {**first, "existing": True} and len(cluster.jobs()) == 3


def test_the_forms_of_array_slurm_users_know():
    assert array_text([1, 3, "5-7"], "f") == "1,3,5-7" and array_text(4, "f") == "4"
    assert parse_array("0-3", "f").indices == (0, 1, 2, 3)
    assert parse_array("0-10:4", "f").indices == (0, 4, 8)
    assert parse_array("1,3,5-7", "f").indices == (1, 3, 5, 6, 7)
    assert parse_array("3,1,3", "f").indices == (1, 3)  # each index once, in order
    assert parse_array("0-15%4", "f").most_running == 4
    with pytest.raises(InputError, match="field 'array'"):
        parse_array("0-3%x", "f")


def test_an_array_with_a_limit_runs_at_most_that_many_tasks_at_once_beside_free_slots(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-4%2").json()["id"])
    tasks = [array_id + 1 + i for i in range(5)]
    cluster.tick()

    assert sorted(cluster.executor.running()) == tasks[:2]  # two of the four slots stay free
    row = cluster.scheduler.store.job(tasks[2])
    assert (row.status, row.reason) == ("queued", f"waiting: array {array_id} runs at most 2 tasks at once")

    cluster.scheduler.progress(tasks[0], 1, 100, 1.0)
    cluster.executor.finish(tasks[0], 0)
    cluster.tick()

    assert sorted(cluster.executor.running()) == [tasks[1], tasks[2]]  # one ended, the next in its place
    cluster.post(f"/jobs/{tasks[1]}/cancel")  # its attempt exits at SIGTERM
    cluster.tick()
    assert sorted(cluster.executor.running()) == [tasks[2], tasks[3]]


def test_asking_for_an_arrays_id_as_a_job_says_how_to_list_its_tasks(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-2").json()["id"])

    answer = cluster.client.get(f"/jobs/{array_id}", headers={"Authorization": f"Bearer {cluster.credential['alice']}"})

    assert answer.status_code == 404
    assert answer.json()["detail"] == (f"job {array_id} is a job array of 3 tasks (jobs {array_id + 1}-{array_id + 3}):"
                                       f" `apportion queue --array {array_id}` lists them")


def test_a_name_with_no_room_left_for_its_tasks_index_is_refused(tmp_path):
    cluster = Cluster(tmp_path)
    answer = cluster.submit(name="n" * 252, array="0-100")
    assert answer.status_code == 400 and answer.json()["field"] == "name"
    assert "with [100] is 257 characters, more than 256" in answer.json()["message"]
    assert cluster.submit(name="n" * 252, array="0-99").status_code == 200  # n…n[99]: 256 characters


def test_a_job_after_an_array_fails_in_the_round_its_tasks_fail_for_the_job_they_wait_for(tmp_path):
    cluster = Cluster(tmp_path, slots="cpu:1")
    prep = int(cluster.submit(name="prep").json()["id"])
    array_id = int(cluster.submit(array="0-1", after=[prep]).json()["id"])  # every task waits for prep
    report = int(cluster.submit(name="report", after=[array_id]).json()["id"])
    cluster.tick()

    cluster.post(f"/jobs/{prep}/cancel")
    cluster.tick()

    assert [cluster.scheduler.store.job(array_id + 1 + i).status for i in range(2)] == ["failed", "failed"]
    row = cluster.scheduler.store.job(report)
    assert (row.status, row.reason) == ("failed", f"cannot be scheduled: array {array_id}, which it runs after, failed")
