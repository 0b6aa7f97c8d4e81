"""A cluster that loses a machine (a Ray node): its attempts are retried without failing the
job, and the rounds place jobs only on the slots still there."""

from __future__ import annotations

from pathlib import Path

from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.runtime import Checkpointer
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Slot
from apportion.serve.store.state import StateStore

V100_SLOTS = [Slot(f"v100:{i}", "v100", "") for i in range(3)]  # as a Ray cluster's slots are named


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, max_retries: int = 3):
    clock, executor = Clock(), FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, grace_s=5.0, max_retries=max_retries, fill_gap_s=0.0,
                         renew_wait_s=0.0, shared_dir=tmp_path / "shared")
    return Scheduler(StateStore(tmp_path / "state.db"), executor, V100_SLOTS, Fifo(), config, clock=clock), executor, clock


def job(name: str, gpus: int = 1) -> dict:
    return {"name": name, "command": "train", "total_steps": 100, "gpus": gpus}


def test_an_attempt_lost_with_its_node_is_retried_from_its_checkpoint_even_past_max_retries(tmp_path):
    scheduler, executor, clock = make(tmp_path, max_retries=0)
    job_id = scheduler.submit(job("a"), "ann")
    scheduler.tick()
    checkpoints = tmp_path / "shared" / "jobs" / str(job_id) / "checkpoints"  # the shared directory's
    assert executor.envs[(job_id, 1)]["APPORTION_CHECKPOINT_DIR"] == str(checkpoints)
    Checkpointer(checkpoints).save({"w": 1}, 30)

    executor.lose(job_id, "its Ray node died")
    clock.now += 1
    scheduler.tick()

    row = scheduler.store.job(job_id)
    assert row.retries == 1 and row.steps_done == 30
    assert row.status == "running" and row.attempt == 2  # started again at once, elsewhere
    details = [e.detail for e in scheduler.store.events(job_id)]
    assert "attempt 1: lost: its Ray node died; newest checkpoint step 30" in details
    assert "retry 1 from step 30 (its last checkpoint)" in details


def test_rounds_place_jobs_only_on_the_slots_still_there(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    executor.live_capacity = {"v100": 1}  # two of the three v100 slots' nodes are gone
    pair = scheduler.submit(job("pair", gpus=2), "ann")
    single = scheduler.submit(job("single"), "bob")
    scheduler.tick()

    assert [a.job_id for a in executor.started] == [single]
    assert scheduler.store.job(pair).status == "queued"

    executor.live_capacity = {"v100": 3}  # the nodes are back
    clock.now += 11
    scheduler.tick()
    assert [a.job_id for a in executor.started] == [single, pair]
