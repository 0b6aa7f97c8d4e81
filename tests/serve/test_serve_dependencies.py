"""A job file's ``after``: the server holds the job, saying why, until the jobs it names completed;
fails it when one of them fails or is cancelled; refuses at submit an id that does not exist or
that the submitting user may not name. On a fake clock and a fake executor."""

from __future__ import annotations

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.jobs.jobspec import load_job_file
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path, slots="cpu:2"):
    clock = Clock()
    executor = FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0, max_retries=0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots(slots), Fifo(), config, clock=clock)
    return scheduler, executor, clock


def job(name, **extra):
    return {"name": name, "command": "train", "total_steps": 100, **extra}


def job_row(scheduler, job_id):
    return scheduler.store.job(job_id)


def test_a_job_waits_with_its_reason_on_a_free_slot_and_starts_when_the_job_it_names_completes(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    prep = scheduler.submit(job("prep"), "ann")
    train = scheduler.submit(job("train", after=[prep]), "ann")
    scheduler.tick()

    assert list(executor.running()) == [prep]  # the second slot stays free
    assert job_row(scheduler, train).status == "queued"
    assert job_row(scheduler, train).reason == f"waiting for job {prep} to complete"

    scheduler.progress(prep, 1, 100, 4.0)
    executor.finish(prep, 0)
    clock.now += 0.5
    scheduler.tick()

    assert job_row(scheduler, prep).status == "completed"
    assert list(executor.running()) == [train]  # an early round: no wait for the next regular one
    assert job_row(scheduler, train).status == "running"


def test_a_job_fails_as_soon_as_the_job_it_names_is_cancelled_and_so_does_one_after_it(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    prep = scheduler.submit(job("prep"), "ann")
    train = scheduler.submit(job("train", after=[prep]), "ann")
    report = scheduler.submit(job("report", after=[str(train)]), "ann")  # ids as `apportion jobs` shows them
    scheduler.tick()
    assert job_row(scheduler, report).reason == f"waiting for job {train} to complete"

    scheduler.cancel(prep, "ann")
    clock.now += 0.5
    scheduler.tick()

    assert job_row(scheduler, train).status == "failed"
    assert job_row(scheduler, train).reason == f"cannot be scheduled: job {prep}, which it runs after, was cancelled"
    assert job_row(scheduler, report).status == "failed"
    assert job_row(scheduler, report).reason == f"cannot be scheduled: job {train}, which it runs after, failed"
    assert [a.job_id for a in executor.started] == [prep]


def test_a_job_after_one_that_already_failed_fails_at_its_first_round(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    broken = scheduler.submit(job("broken"), "ann")
    scheduler.tick()
    executor.finish(broken, 1)  # crashes, and no retry is allowed
    clock.now += 0.5
    scheduler.tick()
    assert job_row(scheduler, broken).status == "failed"

    after = scheduler.submit(job("after", after=[broken]), "ann")
    clock.now += 0.5
    scheduler.tick()

    assert job_row(scheduler, after).reason == f"cannot be scheduled: job {broken}, which it runs after, failed"


def test_a_job_file_names_the_jobs_it_runs_after(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\ncommand: python train.py\ntotal_steps: 10\nafter: [12, '14']\n")

    spec = load_job_file(path)

    assert spec.after == (12, 14) and spec.to_dict()["after"] == [12, 14]


class Users:
    """The HTTP API with alice, bob and an admin, ops."""

    def __init__(self, tmp_path) -> None:
        self.scheduler, _, _ = make(tmp_path)
        self.client = TestClient(create_app(self.scheduler))
        self.credential = {name: add_user(self.scheduler.store, name, admin=name == "ops", now=0.0)
                           for name in ("alice", "bob", "ops")}

    def submit(self, who: str, **fields):
        return self.client.post("/jobs", headers={"Authorization": f"Bearer {self.credential[who]}"},
                                json=job("j", **fields))


def test_an_after_naming_no_job_or_another_users_job_is_a_400_naming_after(tmp_path):
    users = Users(tmp_path)
    bobs = users.submit("bob").json()["id"]

    missing = users.submit("alice", after=[99])
    others = users.submit("alice", after=[bobs])

    assert missing.status_code == 400 and missing.json()["field"] == "after"
    assert missing.json()["detail"] == "request: field 'after': no job 99 on this server"
    assert others.status_code == 400 and others.json()["field"] == "after"
    assert "job 1 is bob's" in others.json()["detail"]
    own = users.submit("bob", after=[bobs])
    assert own.status_code == 200  # their own
    assert users.client.get(f"/jobs/{own.json()['id']}", headers={"Authorization": f"Bearer {users.credential['bob']}"}
                            ).json()["after"] == [bobs]
    assert users.submit("ops", after=[bobs]).status_code == 200  # an admin names anyone's
    assert users.submit("alice", after=["one"]).json()["field"] == "after[0]"


def edges(scheduler):
    return sorted(scheduler.store.after_edges())


def test_an_arrays_after_is_kept_once_for_all_its_tasks_and_asked_once_a_round(tmp_path, monkeypatch):
    from apportion.serve.round import admission

    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    first = [scheduler.submit(job(f"prep{k}"), "ann") for k in range(3)]
    array_id = scheduler.submit(job("sweep", array="0-49", after=first), "ann")
    lone = scheduler.submit(job("lone", after=first[:1]), "ann")
    assert edges(scheduler) == sorted([(array_id, j) for j in first] + [(lone, first[0])])  # 4 edges, not 151
    assert {r.after for r in scheduler.store.array_tasks(array_id)} == {""}  # no copy in each task's row
    assert [int(i) for i in scheduler.store.array_tasks(array_id)[7].spec["after"]] == first  # its array's spec
    asked = []
    spy = admission.AfterStage()
    monkeypatch.setattr(admission, "AFTER", type("Spy", (), {"admit": lambda self, jobs, ctx: (
        asked.append(sorted(jobs.key.tolist())), spy.admit(jobs, ctx))[1]})())
    scheduler.tick()
    assert asked[0] == sorted([array_id, lone])  # one question for the array, one for the job
    tasks = scheduler.store.array_tasks(array_id)
    assert {t.reason for t in tasks} == {f"waiting for job {first[0]} to complete (and 2 more)"}
    assert job_row(scheduler, lone).reason == f"waiting for job {first[0]} to complete"


def test_cancelling_an_array_or_a_job_that_waits_drops_its_after_edges(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    prep = scheduler.submit(job("prep"), "ann")
    array_id = scheduler.submit(job("sweep", array="0-9", after=[prep]), "ann")
    lone = scheduler.submit(job("lone", after=[prep]), "ann")
    scheduler.tick()
    assert edges(scheduler) == [(array_id, prep), (lone, prep)]
    scheduler.cancel(array_id, "ann")
    assert edges(scheduler) == [(lone, prep)]
    scheduler.cancel(lone, "ann")
    assert edges(scheduler) == []


def test_the_after_edges_of_jobs_that_started_or_failed_are_dropped_by_the_round(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    prep = scheduler.submit(job("prep"), "ann")
    train = scheduler.submit(job("train", after=[prep]), "ann")
    doomed = scheduler.submit(job("doomed", after=[prep]), "ann")
    scheduler.tick()
    scheduler.cancel(prep, "ann")  # doomed and train fail: what they waited for was cancelled
    clock.now += 0.5
    scheduler.tick()
    clock.now += 0.5
    scheduler.tick()
    assert job_row(scheduler, train).status == job_row(scheduler, doomed).status == "failed"
    assert edges(scheduler) == []


def test_a_users_after_edges_are_counted_once_per_array(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    first = [scheduler.submit(job(f"prep{k}"), "ann") for k in range(2)]
    scheduler.submit(job("sweep", array="0-99", after=first), "ann")
    scheduler.submit(job("lone", after=first[:1]), "ann")
    scheduler.submit(job("other"), "bob")
    assert scheduler.store.after_edges_of("ann") == 3 and scheduler.store.after_edges_of("bob") == 0
