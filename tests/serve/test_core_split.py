"""The node's CPU cores divided among the running jobs, through the HTTP API, on a fake executor and clock."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Node, parse_slots
from apportion.serve.store.state import StateStore

FOUR_CORES = Node(cpus=(0, 1, 2, 3), memory_gib=16.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path, split: str):
    clock = Clock()
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, renew_wait_s=0.0, node=FOUR_CORES, cpu_split=split,
                         cpu_profile_s=1.0)
    executor = FakeExecutor(tmp_path)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:2"), Las(), config, clock=clock)
    return scheduler, executor, clock, TestClient(create_app(scheduler))


def submit_two(client) -> None:
    for name in ("decoder", "cheap"):
        assert client.post("/jobs", json={"name": name, "command": "train", "total_steps": 10**6, "user": "ann"}).status_code == 200


def test_by_default_the_cores_are_left_to_the_os_no_job_pinned_or_limited(tmp_path):
    clock = Clock()
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, renew_wait_s=0.0, node=FOUR_CORES)
    executor = FakeExecutor(tmp_path)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:2"), Las(), config, clock=clock)
    submit_two(TestClient(create_app(scheduler)))
    scheduler.tick()
    clock.now += 5.0
    scheduler.tick()
    assert len(executor.started) == 2 and executor.cores == {}


def test_the_proportional_split_gives_each_slot_half_of_a_four_core_node(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, "proportional")
    submit_two(client)
    scheduler.tick()
    assert executor.cores == {1: ((0, 1), 2.0), 2: ((2, 3), 2.0)}
    status = client.get("/status").json()["cores"]
    assert status["split"] == "proportional" and status["node_cores"] == 4
    assert status["jobs"] == {"1": {"cpus": [0, 1], "share": 2.0}, "2": {"cpus": [2, 3], "share": 2.0}}


def test_the_aware_split_profiles_each_job_then_gives_the_cores_to_the_one_that_waits_for_data(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, "aware")
    submit_two(client)
    speed = {1: lambda cores: 10.0 * min(cores, 3.0),  # its loader keeps up with 3 cores at most
             2: lambda cores: 10.0}  # its batches cost nothing
    steps = {1: 0.0, 2: 0.0}
    seen = []
    for _ in range(40):  # 20 s: reports every 0.5 s
        scheduler.tick()
        seen.append(dict(executor.cores))
        clock.now += 0.5
        for job in (1, 2):
            steps[job] += speed[job](executor.cores[job][1]) * 0.5
            client.post(f"/jobs/{job}/progress", json={"attempt": 1, "steps_done": int(steps[job])})
    # profiled at 1, 1/2 and 1/4 of the proportional share (2 cores) each
    assert [s[1][1] for s in seen[:1]] == [2.0] and {s[1][1] for s in seen} >= {2.0, 1.0, 0.5}
    # then: the cheap job keeps 1 core (as fast with 0.5 as with its 2, but never below half its share);
    # the decoder gets the other 3 (its minimum, 1 core, and the 2 free, since its speed still rose at the
    # most it was measured at)
    assert executor.cores == {1: ((0, 1, 2), 3.0), 2: ((3,), 1.0)}


def test_a_bad_cpus_field_is_named_and_more_cores_than_the_node_has_is_refused_at_submit(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, "aware")
    job = {"name": "big", "command": "train", "total_steps": 10, "user": "ann"}
    answer = client.post("/jobs", json={**job, "cpus": "four"})
    assert answer.status_code == 400 and "'cpus'" in answer.json()["detail"] and "whole number" in answer.json()["detail"]
    answer = client.post("/jobs", json={**job, "cpus": 5})
    assert answer.status_code == 400
    assert "asks for 5 CPU cores; the node here has 4" in answer.json()["detail"] and "'cpus'" in answer.json()["detail"]
    answer = client.post("/jobs", json={**job, "memory_gb": 64})
    assert answer.status_code == 400 and "'memory_gb'" in answer.json()["detail"]
    assert client.post("/jobs", json={**job, "cpus": 4}).status_code == 200


def test_a_job_that_asked_for_cores_keeps_them_under_the_aware_split(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, "aware")
    client.post("/jobs", json={"name": "a", "command": "train", "total_steps": 10, "user": "ann", "cpus": 3})
    client.post("/jobs", json={"name": "b", "command": "train", "total_steps": 10, "user": "ann"})
    scheduler.tick()
    # job 1 is profiled from its ask (3 cores, above its proportional 2); job 2 at its proportional share
    # does not fit beside it: job 1 keeps its 3, job 2 is cut to the 1 left (its floor, half of 2)
    assert executor.cores == {1: ((0, 1, 2), 3.0), 2: ((3,), 1.0)}


def test_a_job_is_never_profiled_below_the_cores_it_asked_for_and_cores_nobody_needs_are_shared(tmp_path):
    scheduler, executor, clock, client = make(tmp_path, "aware")
    client.post("/jobs", json={"name": "a", "command": "train", "total_steps": 10**6, "user": "ann", "cpus": 1})
    client.post("/jobs", json={"name": "b", "command": "train", "total_steps": 10**6, "user": "ann"})
    steps, held = {1: 0.0, 2: 0.0}, {1: set(), 2: set()}
    for _ in range(30):  # neither job goes faster with more cores
        scheduler.tick()
        clock.now += 0.5
        for job in (1, 2):
            held[job].add(executor.cores[job][1])
            steps[job] += 5.0
            client.post(f"/jobs/{job}/progress", json={"attempt": 1, "steps_done": int(steps[job])})
    assert held[1] >= {2.0, 1.0} and min(held[1]) == 1.0 and 0.5 in held[2]
    # minimums 1 (asked) and 1 (as fast with 0.5 as with 2, but never below half its share); the other
    # 2 cores speed neither up: shared evenly
    assert executor.cores == {1: ((0, 1), 2.0), 2: ((2, 3), 2.0)}


def test_what_a_job_was_measured_at_outlives_the_server_and_an_older_state_file_gains_the_table(tmp_path):
    import sqlite3

    scheduler, executor, clock, client = make(tmp_path, "aware")
    submit_two(client)
    for step in range(1, 12):
        scheduler.tick()
        clock.now += 0.5
        client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 10 * step})
    learnt = scheduler.cores.speeds.measured[1]
    steps, seconds = learnt[2.0]
    assert steps / seconds == 20.0 and seconds >= 1.0 and 1.0 in learnt  # 10 steps each 0.5 s at 2 cores, then at 1
    after = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:2"), Las(),
                      scheduler.config, clock=clock)
    assert after.cores.speeds.measured[1] == learnt  # a restarted server keeps what it learnt
    after.store.close()
    scheduler.store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:  # as a state file written before the table was there
        conn.execute("DROP TABLE core_speeds")
    StateStore(tmp_path / "state.db").close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        assert conn.execute("SELECT count(*) FROM core_speeds").fetchone() == (0,)


def test_srtf_ranks_a_cpu_starved_job_at_its_speed_on_its_share_unless_its_kind_was_measured(tmp_path):
    """One slot, two cores: a share of 2 cores per slot. 'short' (100 steps) trains at a quarter of its
    best speed there (its curve as learnt: 0.25 at 2 cores per slot, 1 at 4), so at the default speed
    it is a 400-step job and 'long' (300 steps) runs first. Once its kind's speed was measured (at the
    cores such jobs held) that speed is taken as it is, and 'short' runs first."""
    from apportion.policies import make_policy

    for measured in (False, True):
        state = tmp_path / str(measured)
        state.mkdir()
        store = StateStore(state / "state.db")
        store.put_core_speed(1, 2.0, 0.25e6, 1e6, 0.0)  # job 1's curve, as its profile measured it
        store.put_core_speed(1, 4.0, 1e6, 1e6, 0.0)
        if measured:
            store.put_throughput("short", "cpu", 1, 1.0, 10, 0.0)
            store.put_throughput("long", "cpu", 1, 1.0, 10, 0.0)
        config = ServeConfig(state_dir=state, round_s=600.0, renew_wait_s=0.0, node=Node((0, 1), 16.0),
                             cpu_split="proportional")
        executor = FakeExecutor(state)
        scheduler = Scheduler(store, executor, parse_slots("cpu:1"), make_policy("srtf"), config, clock=Clock())
        for name, steps in (("short", 100), ("long", 300)):
            scheduler.submit({"name": name, "command": "train", "total_steps": steps}, "ann")
        scheduler.tick()
        assert list(executor.running()) == ([1] if measured else [2]), measured


def test_a_kinds_speed_measured_on_more_cores_than_a_job_gets_is_not_taken_for_that_jobs(tmp_path):
    """Four cores, two slots: a share of 2 cores per slot. The decoder's job file gives its curve (a quarter of
    its best speed with 1 core, half with 2, all of it with 4). The first decoder asked for 3 cores and
    trains at 3 steps/s with them; its kind's speed is kept at the proportional share, 2 steps/s, which is
    what a decoder that asked none trains at. So under srtf a 500-step decoder that asked none takes 250 s,
    and the two 200-step jobs run before it (taken at the first one's 3 steps/s it would seem to take 167 s)."""
    from apportion.policies import make_policy

    store = StateStore(tmp_path / "state.db")
    store.put_throughput("other", "cpu", 1, 1.0, 10, 0.0)  # measured: 1 step/s
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, renew_wait_s=0.0, node=FOUR_CORES,
                         cpu_split="proportional")
    executor, clock = FakeExecutor(tmp_path), Clock()
    scheduler = Scheduler(store, executor, parse_slots("cpu:2"), make_policy("srtf"), config, clock=clock)
    decoder = {"name": "decoder", "command": "train", "cpu_speed": "1:0.25 2:0.5 4:1"}
    first = scheduler.submit({**decoder, "total_steps": 30, "cpus": 3}, "ann")
    scheduler.tick()
    assert executor.cores[first][1] == 3.0  # held to the 3 cores it asked for
    scheduler.lease(first, 1, 0)
    clock.now += 10.0
    assert scheduler.progress(first, 1, 30, 3.0) == ""
    assert scheduler.throughputs.table[("decoder", "cpu", 1)][0] == pytest.approx(2.0)
    executor.finish(first, 0)
    scheduler.tick()

    second = scheduler.submit({**decoder, "total_steps": 500}, "ann")
    others = [scheduler.submit({"name": "other", "command": "train", "total_steps": 200}, "ann") for _ in range(2)]
    clock.now += 600.0
    scheduler.tick()
    assert sorted(executor.running()) == others and second not in executor.running()


def test_a_job_files_curve_is_read_before_two_close_shares_it_was_measured_at(tmp_path):
    """Under ``proportional`` a job is measured only at its share (here 2 cores per slot, and 1.9 while a
    neighbour's ask cut it): a curve learnt from those says nothing of more cores (it is flat above 2), so
    the job is ranked off its job file's curve, at half its best speed; a job without one at its best."""
    store = StateStore(tmp_path / "state.db")
    for job_id in (1, 2):
        store.put_core_speed(job_id, 1.9, 0.95e6, 1e6, 0.0)
        store.put_core_speed(job_id, 2.0, 1e6, 1e6, 0.0)
    scheduler, _, _, client = make(tmp_path, "proportional")
    scheduler.submit({"name": "decoder", "command": "train", "total_steps": 10, "cpu_speed": "1:0.25 2:0.5 4:1"}, "ann")
    scheduler.submit({"name": "cheap", "command": "train", "total_steps": 10}, "ann")
    speed = scheduler.state.resources.speed_at_share([1, 2], [1, 1], [float("nan")] * 2)
    assert speed.tolist() == pytest.approx([0.5, 1.0])
