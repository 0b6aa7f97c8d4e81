"""A crashed job waits before its retry, twice as long each time (``--retry-backoff-s``), and its
reason says how long: a command that fails at once does not burn its retries in seconds. A job
lost with its machine is no fault of its own: it is placed again at once."""

from __future__ import annotations

from test_serve_scheduler import Clock, job, run_for

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.attempts.lifecycle import retry_delay_s
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


def make(tmp_path, backoff_s: float):
    clock, executor = Clock(), FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, grace_s=5.0, max_retries=3, fill_gap_s=0.0,
                         renew_wait_s=0.0, retry_backoff_s=backoff_s)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:1"),
                          Las(thresholds_gpu_s=(100.0,)), config, clock=clock)
    return scheduler, executor, clock


def crash_at_once(scheduler, executor, clock) -> float:
    """Wait for the job's next attempt, let it crash at once; the time it started."""
    for _ in range(2000):
        if 1 in executor.running():
            break
        run_for(scheduler, clock, 0.5)
    started = clock.now
    executor.finish(1, 1)
    run_for(scheduler, clock, 0.5)
    return started


def test_the_waits_double_from_the_backoff_and_stop_at_ten_minutes():
    assert [retry_delay_s(k, 10.0) for k in (1, 2, 3, 7, 8, 50)] == [10.0, 20.0, 40.0, 600.0, 600.0, 600.0]
    assert retry_delay_s(2, 0.0) == 0.0


def test_a_job_that_crashes_at_once_waits_longer_before_each_retry_and_says_so(tmp_path):
    scheduler, executor, clock = make(tmp_path, backoff_s=10.0)
    scheduler.submit(job("fails-at-once"), "ann")

    starts = [crash_at_once(scheduler, executor, clock) for _ in range(3)]
    row = scheduler.store.job(1)
    assert row.status == "queued" and row.reason == "exit 1; retry 3 of 3 in 40 s from step 0: it had no checkpoint"
    assert [e.detail for e in scheduler.store.events(1) if e.event == "retry"][1].startswith("retry 2 of 3 in 20 s")
    waits = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert 10.0 <= waits[0] < 13.0 and 20.0 <= waits[1] < 23.0, waits  # not before its backoff, soon after it

    run_for(scheduler, clock, 30.0)
    assert 1 not in executor.running()  # 40 s not yet past
    crash_at_once(scheduler, executor, clock)
    row = scheduler.store.job(1)
    assert row.status == "failed" and row.reason == "exit 1 on attempt 4, after 3 retries"


def test_no_backoff_retries_at_once(tmp_path):
    scheduler, executor, clock = make(tmp_path, backoff_s=0.0)
    scheduler.submit(job("fails-at-once"), "ann")
    starts = [crash_at_once(scheduler, executor, clock) for _ in range(2)]
    assert starts[1] - starts[0] < 2.0
    assert [e.detail for e in scheduler.store.events(1) if e.event == "retry"][-1] == \
        "retry 2 of 3 from step 0: it had no checkpoint"


def test_a_job_lost_with_its_node_is_placed_again_at_once(tmp_path):
    scheduler, executor, clock = make(tmp_path, backoff_s=60.0)
    scheduler.submit(job("on-a-dying-node"), "ann")
    run_for(scheduler, clock, 1.0)
    executor.lose(1)
    run_for(scheduler, clock, 2.0)
    assert executor.running()[1].attempt == 2
