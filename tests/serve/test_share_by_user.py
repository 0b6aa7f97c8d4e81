"""The server shares its slots among users before its policy orders their jobs (ServeConfig.
share_by_user; `apportion serve` turns it on by default), on a fake clock and a fake executor."""

from __future__ import annotations

import json
from pathlib import Path

from apportion.executors.fake import FakeExecutor
from apportion.policies import make_policy
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, policy: str = "fifo", **config):
    executor = FakeExecutor(tmp_path)
    settings = ServeConfig(state_dir=tmp_path, round_s=10.0, fill_gap_s=0.0, renew_wait_s=0.0, start_hold_s=None,
                           **config)
    store = StateStore(tmp_path / "state.db")
    return Scheduler(store, executor, parse_slots("cpu:4"), make_policy(policy), settings, clock=Clock()), executor


def owners(scheduler: Scheduler, executor: FakeExecutor) -> list[str]:
    return sorted(scheduler.store.job(job_id).user for job_id in executor.running())


def submit(scheduler: Scheduler, users: list[str]) -> None:
    for i, user in enumerate(users):
        scheduler.submit({"name": f"{user}-{i}", "command": "train", "total_steps": 100}, user)


def test_a_second_user_runs_in_the_first_round_beside_a_backlog(tmp_path):
    # 4 slots; ann submits six one-slot jobs, then bob one: equal shares of 2, bob needs 1,
    # so ann holds 3 and bob 1 from the first round
    scheduler, executor = make(tmp_path, share_by_user=True)
    submit(scheduler, ["ann"] * 6 + ["bob"])
    scheduler.tick()
    assert owners(scheduler, executor) == ["ann", "ann", "ann", "bob"]


def test_weights_split_the_slots(tmp_path):
    # ann weighs 3, bob 1, each with six jobs: 3 slots and 1
    scheduler, executor = make(tmp_path, policy="las", share_by_user=True, user_weights={"ann": 3.0})
    submit(scheduler, ["ann"] * 6 + ["bob"] * 6)
    scheduler.tick()
    assert owners(scheduler, executor) == ["ann", "ann", "ann", "bob"]


def test_without_it_the_backlog_comes_first_and_the_run_records_which(tmp_path):
    scheduler, executor = make(tmp_path)
    submit(scheduler, ["ann"] * 6 + ["bob"])
    scheduler.tick()
    assert owners(scheduler, executor) == ["ann"] * 4
    run = json.loads(scheduler.store.meta("run"))
    assert (run["share_by_user"], run["user_weights"]) == (False, {})


def test_the_run_records_the_sharing_for_a_replay(tmp_path):
    scheduler, _ = make(tmp_path, share_by_user=True, user_weights={"ann": 2.0})
    run = json.loads(scheduler.store.meta("run"))
    assert (run["share_by_user"], run["user_weights"]) == (True, {"ann": 2.0})
