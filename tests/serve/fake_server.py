"""A scheduler on a fake clock and a fake executor, over one state file (not a test module)."""

from __future__ import annotations

from apportion.executors.fake import FakeExecutor
from apportion.policies import make_policy
from apportion.serve.base.slots import parse_slots
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def one_slot_scheduler(tmp_path, policy):
    """A scheduler on one CPU slot over the state file in ``tmp_path`` (the same file each time: a restart),
    10-s rounds; ``policy`` a spec or a policy. Its (scheduler, executor, clock)."""
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, fill_gap_s=0.0, renew_wait_s=0.0)
    executor = FakeExecutor(tmp_path)
    clock = Clock()
    policy = make_policy(policy) if isinstance(policy, str) else policy
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:1"), policy, config,
                          clock=clock)
    return scheduler, executor, clock
