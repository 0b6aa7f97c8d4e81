"""The wall-clock scheduler on a fake clock and a fake executor: rounds, leases, preemption,
retries, cancellation, escalation and recovery, with no real processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from apportion.core.errors import InputError
from apportion.executors.fake import FakeExecutor
from apportion.policies import make_policy
from apportion.policies.las import Las
from apportion.runtime import Checkpointer
from apportion.serve.scheduler.scheduler import Conflict, Forbidden, Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, *, executor=None, slots="cpu:2", policy=None, round_s=10.0, grace_s=5.0,
         max_retries=3, store=None, clock=None, fill_gap_s=0.0, start_hold_s=0.01):
    clock = clock or Clock()
    store = store or StateStore(tmp_path / "state.db")
    executor = executor or FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=round_s, grace_s=grace_s, max_retries=max_retries,
                         fill_gap_s=fill_gap_s, renew_wait_s=0.0, start_hold_s=start_hold_s)
    policy = policy or Las(thresholds_gpu_s=tuple(float(t) for t in range(10, 1000, 10)))
    return Scheduler(store, executor, parse_slots(slots), policy, config, clock=clock), executor, clock


def job(name="j", steps=100, **extra):
    return {"name": name, "command": "train", "total_steps": steps, **extra}


def run_for(scheduler, clock, seconds, step=0.5):
    end = clock.now + seconds
    while clock.now < end:
        clock.now += step
        scheduler.tick()


def test_jobs_start_on_free_slots_with_the_contract_environment(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:2")
    first = scheduler.submit(job("a", env={"LR": "0.1"}), "ann")
    scheduler.submit(job("b"), "bob")
    scheduler.tick()

    assert [a.job_id for a in executor.started] == [1, 2]
    env = executor.envs[(first, 1)]
    assert env["APPORTION_JOB_ID"] == "1" and env["APPORTION_ATTEMPT"] == "1"
    assert env["APPORTION_TOTAL_STEPS"] == "100"
    assert env["APPORTION_SLOTS"] in ("cpu:0", "cpu:1") and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["APPORTION_CHECKPOINT_DIR"] == str(tmp_path / "jobs" / "1" / "checkpoints")
    assert float(env["APPORTION_LEASE_END"]) >= clock.now + 10.0 - 1e-6
    assert env["LR"] == "0.1"
    rows = {r.id: r for r in scheduler.store.jobs()}
    assert rows[1].status == rows[2].status == "running"
    assert {rows[1].slots, rows[2].slots} == {"cpu:0", "cpu:1"}


@pytest.mark.parametrize("hold_s, started", [(0.0, [4, 8, 12]), (None, [40, 40, 40])])
def test_a_round_that_places_many_jobs_starts_them_over_ticks_that_each_hold_the_lock_briefly(tmp_path, hold_s,
                                                                                                started):
    scheduler, executor, clock = make(tmp_path, slots="cpu:40", start_hold_s=hold_s)
    for k in range(40):
        scheduler.submit(job(f"j{k}"), "ann")

    counts = []
    for _ in range(3):
        scheduler.tick()
        counts.append(len(executor.started))

    assert counts == started
    assert [a.job_id for a in executor.started] == list(range(1, len(executor.started) + 1))  # by id
    assert scheduler.state.round == 1  # the later ticks start what the one round placed


def test_gpu_slots_set_cuda_visible_devices(tmp_path):
    scheduler, executor, _ = make(tmp_path, slots="v100:2")
    scheduler.submit(job("pair", gpus=2), "ann")
    scheduler.tick()
    env = executor.envs[(1, 1)]
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["APPORTION_SLOTS"] == "gpu:0,gpu:1"


@pytest.mark.parametrize("pids", [True, False], ids=["with-pids", "without-pids"])  # without: as on Ray
def test_las_preempts_through_the_lease_and_resumes_on_the_freed_slot(tmp_path, pids):
    scheduler, executor, clock = make(tmp_path, slots="cpu:2", executor=FakeExecutor(tmp_path, pids=pids))
    for name in "abc":
        scheduler.submit(job(name), "ann")
    scheduler.tick()
    assert scheduler.store.job(3).status == "queued"
    for j in (1, 2):  # first lease calls: both are past starting
        assert scheduler.lease(j, 1, 0)["renew"] is True

    stopped = None
    for _ in range(200):
        clock.now += 0.5
        scheduler.tick()
        for j in (1, 2):
            row = scheduler.store.job(j)
            if row.stop == "preempt":
                stopped = j
        if stopped:
            break
    assert stopped is not None, "job 3 waited, yet no running job was preempted"
    assert scheduler.store.job(3).slots, "job 3 should be placed on the slot being freed"

    assert scheduler.lease(stopped, 1, 42) == {"renew": False}
    Checkpointer(tmp_path / "jobs" / str(stopped) / "checkpoints").save({}, 42)  # as the job does before exit 75
    executor.finish(stopped, 75)
    scheduler.tick()
    row = scheduler.store.job(stopped)
    assert (row.status, row.preemptions, row.steps_done, row.attempt_live) == ("preempted", 1, 42, False)
    assert scheduler.store.job(3).status == "running"
    assert executor.started[-1].job_id == 3

    # the other running job keeps its lease, renewed to the end of the next round
    other = 3 - stopped
    answer = scheduler.lease(other, 1, 50)
    assert answer["renew"] is True and answer["lease_end"] > clock.now


def test_a_stale_attempt_gets_a_conflict(tmp_path):
    scheduler, _, _ = make(tmp_path)
    scheduler.submit(job(), "ann")
    scheduler.tick()
    with pytest.raises(Conflict):
        scheduler.lease(1, 2, 0)
    with pytest.raises(Conflict):
        scheduler.progress(1, 0, 5, 1.0)


def test_an_attempt_still_starting_is_not_preempted_until_its_first_lease_call(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", round_s=1.0,
                                      policy=Las(thresholds_gpu_s=(1.0, 2.0, 3.0)))
    scheduler.submit(job("slow-starter"), "ann")
    scheduler.tick()
    scheduler.submit(job("newcomer"), "ann")
    run_for(scheduler, clock, 20)
    assert scheduler.store.job(1).stop is None, "preempted before it ever asked for a lease"
    assert scheduler.store.job(1).reason == "starting attempt 1"

    before = clock.now
    answer = scheduler.lease(1, 1, 0)
    assert answer["renew"] is True and answer["lease_end"] >= before + 1.0  # a full round from its first call
    run_for(scheduler, clock, 5)
    assert scheduler.store.job(1).stop == "preempt"  # now it takes its turn


def test_a_job_that_ignores_its_lease_gets_sigterm_then_sigkill(tmp_path):
    executor = FakeExecutor(tmp_path, obey_sigterm=False)
    scheduler, _, clock = make(tmp_path, executor=executor, slots="cpu:1", round_s=2.0, grace_s=3.0,
                               policy=Las(thresholds_gpu_s=(1.0, 2.0)))
    scheduler.submit(job("stubborn"), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 0)
    scheduler.submit(job("next"), "ann")
    run_for(scheduler, clock, 30, step=0.25)

    assert [s for s in executor.signals if s[0] == 1] == [(1, "TERM"), (1, "KILL")]
    row = scheduler.store.job(1)
    assert row.status == "preempted" and row.preemptions == 1
    assert scheduler.store.job(2).status == "running"
    events = [e.event for e in scheduler.store.events(1)]
    assert events.index("preempt") < events.index("sigterm") < events.index("sigkill") < events.index("exit")


def test_a_crash_is_retried_from_its_checkpoint_then_the_job_fails_with_its_last_lines(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=2)
    scheduler.submit(job("crashy"), "ann")
    for attempt in (1, 2, 3):
        run_for(scheduler, clock, 2)
        assert executor.running().get(1) is not None and executor.running()[1].attempt == attempt
        executor.logs[(1, attempt)] = f"step 3\nRuntimeError: boom {attempt}"
        executor.finish(1, 1)
        scheduler.tick()
    row = scheduler.store.job(1)
    assert row.status == "failed" and row.retries == 3 and row.attempt == 3
    assert row.reason == "exit 1 on attempt 3, after 2 retries" and row.reason_log == "RuntimeError: boom 3"
    assert scheduler.job_info(row, private=True)["reason"] == "exit 1 on attempt 3, after 2 retries: RuntimeError: boom 3"
    assert row.last_lines.endswith("RuntimeError: boom 3")
    run_for(scheduler, clock, 5)
    assert len(executor.started) == 3  # nothing after the limit


def test_a_crashed_job_restarts_on_its_own_slots_at_once_without_waiting_for_a_round(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", round_s=600.0, fill_gap_s=600.0)
    scheduler.submit(job("crashy"), "ann")
    scheduler.submit(job("next"), "ann")
    scheduler.tick()
    rounds = scheduler.round
    executor.finish(1, 137)
    clock.now += 0.1
    scheduler.tick()
    assert executor.running()[1].attempt == 2 and executor.running()[1].slots == ("cpu:0",)
    assert scheduler.round == rounds  # no round was needed: the slot was still its own
    assert scheduler.store.job(2).status == "queued"


def test_completion_frees_the_slot_for_the_next_job_at_once(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", round_s=600.0)
    scheduler.submit(job("first"), "ann")
    scheduler.submit(job("second"), "ann")
    scheduler.tick()
    scheduler.progress(1, 1, 100, 4.0)
    executor.finish(1, 0)
    clock.now += 0.1
    scheduler.tick()
    assert scheduler.store.job(1).status == "completed"
    assert scheduler.store.job(2).status == "running"  # not a 600 s wait for the next round


def test_progress_reports_become_the_throughput_estimates(tmp_path):
    scheduler, _, _ = make(tmp_path, slots="cpu:1")
    scheduler.submit(job("a", kind="resnet"), "ann")
    scheduler.tick()
    scheduler.progress(1, 1, 10, 4.0)
    scheduler.progress(1, 1, 20, 6.0)
    rate, samples = scheduler.estimates[("resnet", "cpu", 1)]
    assert samples == 2 and rate == pytest.approx(0.8 * 4.0 + 0.2 * 6.0)
    assert scheduler.store.throughputs()[("resnet", "cpu", 1)] == (pytest.approx(rate), 2)
    assert scheduler.store.job(1).steps_done == 20
    assert scheduler.rate("resnet", "cpu", 1, None) == pytest.approx(rate)
    assert scheduler.rate("resnet", "cpu", 1, ("v100",)) == 0.0 and scheduler.rate("resnet", "cpu", 2, None) == 0.0
    scheduler.submit(job("b", kind="never-seen"), "ann")
    assert scheduler.rate("never-seen", "cpu", 1, None) == 1.0  # the documented default


def test_cancel_by_the_owner_stops_the_attempt_and_by_anyone_else_is_refused(tmp_path):
    scheduler, executor, _ = make(tmp_path, slots="cpu:1")
    scheduler.submit(job("a"), "ann")
    scheduler.submit(job("b"), "ann")
    scheduler.tick()
    with pytest.raises(Forbidden):
        scheduler.cancel(1, "mallory")
    assert scheduler.store.job(1).status == "running"

    scheduler.cancel(2, "ann")  # queued: cancelled at once
    scheduler.cancel(1, "ann")  # running: SIGTERM, cancelled when it exits
    assert (1, "TERM") in executor.signals
    scheduler.tick()
    assert scheduler.store.job(1).status == "cancelled" and not scheduler.store.job(1).attempt_live
    assert scheduler.store.job(2).status == "cancelled"
    with pytest.raises(Conflict):
        scheduler.cancel(1, "ann")


def test_a_cancelled_job_shows_the_step_it_stopped_at_not_its_last_report(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    scheduler.submit(job("a", steps=1000), "ann")
    scheduler.tick()
    scheduler.progress(1, 1, 157, None)
    scheduler.cancel(1, "ann")
    Checkpointer(tmp_path / "jobs" / "1" / "checkpoints").save({}, 170)  # as the job does at SIGTERM, then exits
    scheduler.tick()

    row = scheduler.store.job(1)
    assert row.status == "cancelled" and row.steps_done == 170


def test_a_job_that_cannot_fit_is_rejected_at_submit_and_nothing_is_stored(tmp_path):
    scheduler, _, _ = make(tmp_path, slots="cpu:2")
    with pytest.raises(InputError) as too_big:
        scheduler.submit(job("big", gpus=3), "ann")
    assert too_big.value.field == "gpus"
    with pytest.raises(InputError) as wrong_type:
        scheduler.submit(job("gpu-only", gpu_types=["h100"]), "ann")
    assert wrong_type.value.field == "gpu_types"
    with pytest.raises(InputError) as no_dir:
        scheduler.submit(job("lost", workdir=str(tmp_path / "missing")), "ann")
    assert no_dir.value.field == "workdir"
    assert scheduler.store.jobs() == []


def test_a_job_larger_than_its_non_borrowing_queues_quota_is_rejected_at_submit(tmp_path):
    from apportion.core.queues import Queue, QueueConfig

    queues = QueueConfig((Queue("small", nominal={"cpu": 1}, borrowing=False), Queue("open")))
    scheduler, _, _ = make(tmp_path, slots="cpu:2", policy=make_policy("hierarchical", queues=queues))
    with pytest.raises(InputError) as never:
        scheduler.submit(job("wide", gpus=2, queue="small"), "ann")

    assert never.value.field == "gpus" and "queue 'small' may not borrow" in str(never.value)
    assert scheduler.store.jobs() == []
    scheduler.submit(job("narrow", gpus=1, queue="small"), "ann")
    scheduler.submit(job("wide", gpus=2, queue="open"), "ann")
    assert [j.name for j in scheduler.store.jobs()] == ["narrow", "wide"]


def test_priority_zero_runs_under_a_weighted_policy(tmp_path):
    scheduler, executor, _ = make(tmp_path, slots="cpu:1", policy=make_policy("max-min-fairness"))
    scheduler.submit(job("best-effort", priority=0), "ann")
    scheduler.tick()
    assert executor.started and executor.started[0].job_id == 1


@pytest.mark.parametrize("pids", [True, False], ids=["with-pids", "without-pids"])
def test_a_restarted_server_adopts_live_attempts_and_settles_those_that_ended_meanwhile(tmp_path, pids):
    store = StateStore(tmp_path / "state.db")
    scheduler, executor, clock = make(tmp_path, slots="cpu:3", store=store, executor=FakeExecutor(tmp_path, pids=pids))
    for name in "abc":
        scheduler.submit(job(name), "ann")
    scheduler.tick()
    for j in (1, 2, 3):
        scheduler.lease(j, 1, 10)
    # the server dies; job 2 finishes and job 3 is preempted while no server runs
    executor.end_unseen(2, 0)
    executor.end_unseen(3, 75)
    executor.forget()

    clock.now += 30
    again = Scheduler(store, executor, parse_slots("cpu:3"), scheduler.policy, scheduler.config, clock=clock)
    found = again.recover()
    assert found["adopted"] == [1] and sorted(found["ended"]) == [2, 3]
    assert store.job(1).status == "running" and store.job(1).pid == executor.running()[1].pid
    assert store.job(2).status == "completed"
    assert store.job(3).status == "preempted" and store.job(3).preemptions == 1
    again.tick()
    assert executor.running()[3].attempt == 2  # resumed, once
    assert len([a for a in executor.started if a.job_id == 1]) == 1  # job 1 was never started twice


def test_a_state_file_from_before_attempt_live_recovers_its_attempts_from_their_pids(tmp_path):
    """An older apportion recorded a live attempt as its pid: a server on its state file adopts
    the attempt still alive and settles the one that ended, as it would have."""
    store = StateStore(tmp_path / "state.db")
    scheduler, executor, clock = make(tmp_path, slots="cpu:2", store=store)
    for name in "abc":
        scheduler.submit(job(name), "ann")
    scheduler.tick()  # job 3 waits for a slot
    scheduler.lease(1, 1, 10)
    executor.end_unseen(2, 0)  # job 2 finishes while no server runs
    executor.forget()
    store.close()
    older = sqlite3.connect(tmp_path / "state.db")  # as the older apportion left it: no attempt_live, no index on it
    older.execute("DROP INDEX jobs_to_start")
    older.execute("DROP INDEX jobs_live")
    older.execute("ALTER TABLE jobs DROP COLUMN attempt_live")
    older.commit()
    older.close()

    store = StateStore(tmp_path / "state.db")
    assert [(j.id, j.attempt_live) for j in store.jobs()] == [(1, True), (2, True), (3, False)]
    clock.now += 30
    again = Scheduler(store, executor, parse_slots("cpu:2"), scheduler.policy, scheduler.config, clock=clock)
    found = again.recover()
    assert found["adopted"] == [1] and found["ended"] == [2]
    assert store.job(1).status == "running" and store.job(1).attempt_live
    assert store.job(2).status == "completed" and not store.job(2).attempt_live
    again.tick()
    assert executor.running()[3].attempt == 1 and store.job(3).attempt_live


def test_space_sharing_starts_a_pair_on_one_slot_and_tells_each_who_shares_it(tmp_path):
    """a and b run 1 step/s alone and 0.8 together on a v100 (1.6 > 1): max-min fairness with
    space sharing starts both on the one slot, each told its partner, and renews both leases."""
    import numpy as np

    from apportion.core.throughputs import ThroughputTable

    throughputs = ThroughputTable(kinds=("a", "b"), gpu_types=("v100",), scales=(1,),
                                  steps_per_s=np.ones((2, 1, 1)), pair_steps_per_s={("a", "b", "v100"): (0.8, 0.8)})
    clock = Clock()
    executor = FakeExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, fill_gap_s=0.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("v100:1"),
                          make_policy("max-min-fairness", space_sharing=True), config, clock=clock,
                          throughputs=throughputs)
    first = scheduler.submit(job("a", kind="a"), "ann")
    second = scheduler.submit(job("b", kind="b"), "bob")
    scheduler.tick()

    assert {a.job_id for a in executor.started} == {first, second}
    assert executor.envs[(first, 1)]["APPORTION_SHARED_WITH"] == str(second)
    assert executor.envs[(second, 1)]["APPORTION_SHARED_WITH"] == str(first)
    assert executor.envs[(first, 1)]["APPORTION_SLOTS"] == executor.envs[(second, 1)]["APPORTION_SLOTS"] == "gpu:0"
    for job_id in (first, second):
        scheduler.lease(job_id, 1)
    run_for(scheduler, clock, 25.0)
    assert all(scheduler.lease(job_id, 1)["renew"] for job_id in (first, second))
    assert executor.signals == []


@pytest.mark.parametrize("code, missing", [(127, "not found"), (126, "not executable")])
def test_a_command_that_cannot_start_fails_at_once_naming_the_file(tmp_path, code, missing):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("typo"), "ann")
    run_for(scheduler, clock, 2)
    executor.logs[(1, 1)] = "apportion: cannot start: no such file trian.py"
    executor.finish(1, code)
    scheduler.tick()

    row = scheduler.store.job(1)
    assert row.status == "failed" and row.attempt == 1 and row.retries == 0
    assert scheduler.job_info(row, private=True)["reason"] == (
        f"its command is {missing} (exit {code}) on attempt 1, not retried: "
        "apportion: cannot start: no such file trian.py")
    run_for(scheduler, clock, 5)
    assert len(executor.started) == 1


def test_status_counts_down_to_the_next_rounds_decision_never_past_a_round(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", round_s=5.0)  # decided 2.5 s before it starts
    scheduler.submit(job("a", steps=10**6), "ann")
    scheduler.submit(job("b", steps=10**6), "bob")
    scheduler.tick()
    for _ in range(6):
        status = scheduler.status()
        assert 0 < status["next_round_in_s"] <= 5.0
        run_for(scheduler, clock, status["next_round_in_s"] - 0.5)
        assert scheduler.status()["round"] == status["round"]  # not yet
        run_for(scheduler, clock, 0.5)
        assert scheduler.status()["round"] == status["round"] + 1  # when it said
