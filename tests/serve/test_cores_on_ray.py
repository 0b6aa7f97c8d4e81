"""A job's CPU cores and memory on a Ray cluster: refused at submit when no node could hold them, handed
to the executor at each start, back to waiting (no retry counted) when Ray cannot place them yet, and
each node's in the server's start-up line. A fake clock; the Ray executor here only reads nodes given
on paper, and the fake executor runs the jobs."""

from __future__ import annotations

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.executors.ray_executor import RayExecutor
from apportion.executors.ray_nodes import declared
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.app.on_ray import RayBackend
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Node, Slot
from apportion.serve.store.state import StateStore

GIB = 2**30
V100_SLOTS = [Slot(f"v100:{i}", "v100", "") for i in range(8)]  # as a Ray cluster's slots are named
# two nodes of 4 V100s, 32 cores and 256 GiB each (Ray's "memory")
V100_NODES = [{"Alive": True, "NodeManagerAddress": f"10.0.0.{i}",
               "Resources": {"CPU": 32.0, "GPU": 4.0, "memory": 256.0 * GIB, "accelerator_type:V100": 1.0}}
              for i in (1, 2)]


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class NodesOnPaper(RayExecutor):
    """The Ray executor, its nodes given instead of asked of Ray."""

    def nodes(self) -> list[dict]:
        return V100_NODES


def ray_server(tmp_path) -> TestClient:
    executor = NodesOnPaper(tmp_path, types=[declared("v100", accelerator_type="V100")])
    config = ServeConfig(state_dir=tmp_path, node=Node((), 0.0))  # as `serve --executor ray` sets it
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, V100_SLOTS, Fifo(), config, clock=Clock())
    return TestClient(create_app(scheduler))


def job(name: str, gpus: int = 1, **asks) -> dict:
    return {"name": name, "command": "train", "total_steps": 100, "gpus": gpus, "user": "ann", **asks}


def test_more_cores_or_memory_than_any_ray_node_could_hold_is_refused_naming_the_field(tmp_path):
    client = ray_server(tmp_path)

    answer = client.post("/jobs", json=job("greedy", gpus=4, cpus=129))  # 32.25 cores a GPU: no node has them
    assert answer.status_code == 400
    assert answer.json()["detail"] == ("request: field 'cpus': asks for 129 CPU cores beside its 4 slots; no Ray nodes"
                                       " have room for them: the largest v100 node has 32 CPU cores for 4 slots")
    answer = client.post("/jobs", json=job("hungry", gpus=1, memory_gb=300))
    assert answer.status_code == 400 and "field 'memory_gb': asks for 300 GiB of memory" in answer.json()["detail"]

    assert client.post("/jobs", json=job("one-a-node", gpus=2, cpus=64)).status_code == 200  # 32 a GPU: one a node
    answer = client.post("/jobs", json=job("four", gpus=4, cpus=128))  # 32 a GPU again, but 4 GPUs: two nodes are short
    assert answer.status_code == 400 and "field 'cpus'" in answer.json()["detail"]
    assert client.post("/jobs", json=job("two-a-node", gpus=4, cpus=64, memory_gb=512)).status_code == 200


def make(tmp_path, max_retries: int = 0):
    clock, executor = Clock(), FakeExecutor(tmp_path, pids=False)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, max_retries=max_retries, fill_gap_s=0.0, renew_wait_s=0.0,
                         node=Node((), 0.0))
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, V100_SLOTS, Fifo(), config, clock=clock)
    return scheduler, executor, clock


def test_each_attempt_is_started_with_the_cores_and_memory_its_job_asked_for(tmp_path):
    scheduler, executor, _ = make(tmp_path)
    asks = scheduler.submit(job("asks", gpus=2, cpus=8, memory_gb=32), "ann")
    plain = scheduler.submit(job("plain"), "ann")
    scheduler.tick()

    assert executor.asks == {(asks, 1): (8, 32.0), (plain, 1): (None, None)}


def test_an_attempt_ray_never_placed_waits_for_a_round_again_and_is_no_retry_nor_preemption(tmp_path):
    scheduler, executor, clock = make(tmp_path, max_retries=0)  # a single crash would fail it
    job_id = scheduler.submit(job("asks", cpus=8), "ann")
    scheduler.tick()
    why = "waiting for Ray to place 8 CPU cores beside its slots (60 s so far)"

    for attempt in (1, 2, 3):  # never placed, three times over: still waiting, never failed
        executor.unplace(job_id, why)
        scheduler.lifecycle.on_exit(executor.poll()[0], clock.now)
        row = scheduler.store.job(job_id)
        assert (row.status, row.reason, row.slots) == ("queued", why, "")
        assert (row.retries, row.preemptions) == (0, 0)
        assert scheduler.store.attempt(job_id, attempt).how == "unplaced"
        events = [e.detail for e in scheduler.store.events(job_id)]
        assert f"attempt {attempt}: never placed: {why}; no checkpoint" in events

        clock.now += 1
        scheduler.tick()  # a round places it again
        row = scheduler.store.job(job_id)
        assert row.status == "running" and row.attempt == attempt + 1


def test_the_servers_start_up_line_gives_each_nodes_cores_and_memory_beside_its_slots(tmp_path):
    backend = RayBackend(NodesOnPaper(tmp_path), [], tmp_path, {"v100": [4, 4], "k80": [2]}, {}, 0,
                         {"v100": [(32.0, 180.0), (32.0, 180.0)], "k80": [(8.0, 21.6)]})

    assert backend.describe() == "v100 4+4 (32+32 cores, 180+180 GiB), k80 2 (8 cores, 21.6 GiB)"


def test_a_round_counts_the_asks_against_the_ray_nodes_cores_and_gives_the_slots_to_jobs_that_fit(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    executor.live_room = {"v100": (16.0, 512.0)}  # what the live nodes have beside the v100 slots (RayExecutor.room)
    first = scheduler.submit(job("twelve-cores", cpus=12), "ann")
    second = scheduler.submit(job("eight-cores", cpus=8), "ann")
    plain = scheduler.submit(job("plain"), "ann")
    scheduler.tick()
    # 12 + 8 > 16: the second waits, saying why, rather than start an attempt Ray could not place
    assert {attempt.job_id for attempt in executor.started} == {first, plain}
    row = scheduler.store.job(second)
    assert (row.status, row.reason) == ("queued", "waiting for 8 CPU cores beside its slots (running jobs hold them)")
