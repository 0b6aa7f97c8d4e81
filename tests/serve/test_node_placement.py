"""The cores and memory jobs ask for, counted by the round's placement: a job whose ask does not fit
beside the running jobs' waits, saying why, and starts when they end (fake executor and clock)."""

from __future__ import annotations

import sqlite3

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.round.rounds import _held_back as held_back_reason
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Node, parse_slots
from apportion.serve.store.state import StateStore

FOUR_CORES = Node(cpus=(0, 1, 2, 3), memory_gib=16.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path, split: str = "off", slots: str = "cpu:2"):
    clock = Clock()
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, renew_wait_s=0.0, node=FOUR_CORES, cpu_split=split,
                         cpu_profile_s=1.0)
    executor = FakeExecutor(tmp_path)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots(slots), Fifo(), config, clock=clock)
    return scheduler, executor, clock, TestClient(create_app(scheduler))


def submit(client, name: str, **asks) -> int:
    answer = client.post("/jobs", json={"name": name, "command": "train", "total_steps": 10, "user": "ann", **asks})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


def started(executor) -> list[int]:
    """The jobs whose attempts the executor started, in order."""
    return sorted({attempt.job_id for attempt in executor.started})


def reason(client, job_id: int) -> str:
    return client.get(f"/jobs/{job_id}").json()["reason"]


def test_a_job_whose_cores_do_not_fit_beside_the_running_ones_waits_then_starts_when_they_end(tmp_path):
    scheduler, executor, clock, client = make(tmp_path)
    first = submit(client, "three-cores", cpus=3)
    second = submit(client, "two-cores", cpus=2)
    scheduler.tick()
    # 3 + 2 > 4 cores: FIFO's second job waits though a slot is free
    assert started(executor) == [first]
    assert reason(client, second) == "waiting for 2 CPU cores beside its slots (running jobs hold them)"
    executor.finish(first, 0)
    clock.now += 1.0
    scheduler.tick()
    scheduler.tick()
    assert second in started(executor)


def test_host_memory_is_counted_the_same_way(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, slots="cpu:3")
    first = submit(client, "big", memory_gb=12)
    second = submit(client, "also-big", memory_gb=8)
    third = submit(client, "small", memory_gb=4)  # 12 + 4 fits the node's 16 GiB
    scheduler.tick()
    assert started(executor) == [first, third]
    assert reason(client, second) == "waiting for 8 GiB of memory beside its slots (running jobs hold them)"


def test_jobs_that_ask_nothing_run_beside_a_job_that_asked_for_every_core_unless_the_server_divides_them(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, split="off")
    submit(client, "all-cores", cpus=4)
    submit(client, "plain")
    scheduler.tick()
    assert started(executor) == [1, 2]  # the OS shares the cores: nothing is divided

    scheduler, executor, clock, client = make(tmp_path / "divided", split="proportional")
    submit(client, "all-cores", cpus=4)
    plain = submit(client, "plain")
    scheduler.tick()
    # divided, a job that asked none is never cut below half its proportional share (1 core): none is left
    assert started(executor) == [1]
    assert reason(client, plain) == "waiting for CPU cores beside its slots (jobs that asked for cores hold them)"


def test_a_job_that_fits_is_never_cut_below_its_ask(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, split="proportional")
    submit(client, "three-cores", cpus=3)
    submit(client, "plain")
    scheduler.tick()
    # proportional shares 3 (its ask) and 2 do not fit 4 cores: the plain job's part above its floor is cut
    assert executor.cores == {1: ((0, 1, 2), 3.0), 2: ((3,), 1.0)}


def test_on_a_machine_with_two_slot_types_each_type_gets_its_part_of_the_cores(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, slots="h100:1,a100:1")
    job = {"name": "big", "command": "train", "total_steps": 10, "user": "ann"}
    answer = client.post("/jobs", json={**job, "cpus": 3})
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "'cpus'" in detail and "asks for 3 CPU cores; the node here has 4" in detail
    assert "at most 2 beside the slots of a type it may use" in detail
    assert client.post("/jobs", json={**job, "cpus": 2}).status_code == 200


def test_an_older_state_file_gains_the_asks_as_columns_read_from_its_jobs_specs(tmp_path):
    scheduler, executor, clock, client = make(tmp_path)
    submit(client, "three-cores", cpus=3, memory_gb=2.5)
    submit(client, "plain")
    scheduler.store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:  # as written before the columns were there
        conn.execute("ALTER TABLE jobs DROP COLUMN cpus")
        conn.execute("ALTER TABLE jobs DROP COLUMN memory_gb")
    StateStore(tmp_path / "state.db").close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        assert conn.execute("SELECT id, cpus, memory_gb FROM jobs ORDER BY id").fetchall() == [(1, 3.0, 2.5),
                                                                                                (2, None, None)]


def test_the_cores_of_a_job_still_starting_are_not_given_to_the_next(tmp_path):
    scheduler, executor, clock, client = make(tmp_path)
    first = submit(client, "three-cores", cpus=3)
    scheduler.tick()
    assert started(executor) == [first]  # starting: it has not asked for its lease yet
    second = submit(client, "two-cores", cpus=2)
    for _ in range(3):  # rounds come early to fill the idle slot; the starting job keeps its 3 cores
        clock.now += 2.0
        scheduler.tick()
    assert started(executor) == [first]
    assert reason(client, second) == "waiting for 2 CPU cores beside its slots (running jobs hold them)"


def test_status_says_how_much_of_the_node_the_jobs_on_its_slots_asked_for(tmp_path):
    scheduler, executor, clock, client = make(tmp_path)
    submit(client, "three-cores", cpus=3, memory_gb=6)
    submit(client, "two-cores", cpus=2)
    scheduler.tick()
    assert client.get("/status").json()["node"] == {"cores": 4, "memory_gib": 16.0, "cpus_asked": 3.0,
                                                    "memory_gb_asked": 6.0}


def test_a_job_that_ran_before_and_is_held_back_for_cores_also_says_the_step_it_resumes_from():
    assert held_back_reason(3.0, None, "queued", 0) == "waiting for 3 CPU cores beside its slots (running jobs hold them)"
    assert held_back_reason(3.0, 12.5, "preempted", 40) == (
        "waiting for 3 CPU cores and 12.5 GiB of memory beside its slots (running jobs hold them); it resumes from step 40")
