"""A hung attempt (silent: no lease call, no progress report, for its hung_after_s) is stopped,
killed after the grace period, retried from its checkpoint and counted; a job's time_limit ends
it. On the fake clock and executor, and once with a real process that stops itself."""

from __future__ import annotations

import sqlite3
import sys

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.executors.local import LocalExecutor
from apportion.policies.las import Las
from apportion.runtime import Checkpointer
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from serve_helpers import wait_for
from test_serve_scheduler import Clock, job, run_for


def make(tmp_path, *, hung_after_s=30.0, executor=None, max_retries=3, round_s=10.0):
    clock, said = Clock(), []
    config = ServeConfig(state_dir=tmp_path, round_s=round_s, grace_s=5.0, max_retries=max_retries, fill_gap_s=0.0,
                         renew_wait_s=0.0, hung_after_s=hung_after_s)
    executor = executor or FakeExecutor(tmp_path, obey_sigterm=False)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:1"),
                          Las(thresholds_gpu_s=(1e9,)), config, clock=clock, log=said.append)
    return scheduler, executor, clock, said


def talk(scheduler, clock, seconds, every, *, how="lease", job_id=1):
    """Run the clock for ``seconds``, the job's current attempt calling ``how`` every ``every`` seconds."""
    end, next_call = clock.now + seconds, clock.now
    while clock.now < end:
        if clock.now >= next_call:
            row = scheduler.store.job(job_id)
            if how == "lease":
                scheduler.lease(job_id, row.attempt, 0)
            else:
                scheduler.progress(job_id, row.attempt, 0, None)
            next_call += every
        clock.now += 0.5
        scheduler.tick()


def test_a_silent_attempt_is_stopped_killed_after_grace_requeued_from_its_checkpoint_and_counted(tmp_path):
    scheduler, executor, clock, said = make(tmp_path, hung_after_s=30.0)
    scheduler.submit(job("frozen"), "ann")
    scheduler.tick()
    talk(scheduler, clock, 10, every=2)  # trains, checkpoints step 40, then stops talking (kill -STOP)
    Checkpointer(tmp_path / "jobs" / "1" / "checkpoints").save({"step": 40}, 40)
    scheduler.progress(1, 1, 40, None)  # its last word
    run_for(scheduler, clock, 29)
    assert executor.signals == []  # its lease was renewed by the rounds all along, but 29 s is not 30

    run_for(scheduler, clock, 1.5)
    assert executor.signals == [(1, "TERM")]
    row = scheduler.store.job(1)
    assert row.stop == "hung" and row.hangs == 1
    assert row.reason == "hung: no lease call or progress report for 30 s: SIGTERM sent"
    run_for(scheduler, clock, 5.5)  # SIGTERM does not reach a stopped process: SIGKILL after the grace period
    assert executor.signals == [(1, "TERM"), (1, "KILL")]

    events = [(e.event, e.detail) for e in scheduler.store.events(1)]
    names = [name for name, _ in events]
    assert names.index("hung") < names.index("sigkill") < names.index("exit") < names.index("retry")
    assert ("hung", "attempt 1: silent for 30 s") in events
    assert ("retry", "retry 1 of 3 from step 40 (its last checkpoint)") in events
    assert any("job 1: hung: no lease call or progress report for 30 s" in line for line in said)
    assert any("job 1 crashed (hung (no lease call or progress report for 30 s; killed (no exit code)))" in line
               for line in said)

    # requeued from its checkpoint: the idle slot's next round starts it again at once
    row = scheduler.store.job(1)
    assert row.hangs == 1 and row.retries == 1 and row.steps_done == 40
    assert row.status == "running" and executor.running()[1].attempt == 2
    info = scheduler.job_info(row)
    assert info["hangs"] == 1 and info["hung_after_s"] == 30.0
    assert scheduler.status()["hangs"] == 1


def test_a_hung_job_waiting_for_its_slot_says_why_it_was_stopped(tmp_path):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=30.0)
    scheduler.submit(job("frozen"), "ann")
    scheduler.tick()
    scheduler.submit(job("next"), "bob")  # takes the slot when the hung one is gone
    run_for(scheduler, clock, 37)
    row = scheduler.store.job(1)
    assert row.status == "queued" and row.hangs == 1, row.reason
    assert row.reason.startswith("hung (no lease call or progress report for 30 s; killed (no exit code));"
                                    " retry 1 of 3 from step 0")


@pytest.mark.parametrize("how", ["lease", "progress"])
def test_an_attempt_that_keeps_talking_is_never_hung(tmp_path, how):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=30.0)
    scheduler.submit(job("alive"), "ann")
    scheduler.tick()
    talk(scheduler, clock, 200, every=20, how=how)
    assert executor.signals == [] and scheduler.store.job(1).hangs == 0
    assert scheduler.store.job(1).status == "running"


def test_a_job_files_hung_after_s_overrides_the_servers(tmp_path):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=900.0)
    scheduler.submit(job("strict", hung_after_s=20), "ann")
    scheduler.tick()
    run_for(scheduler, clock, 21)
    assert executor.signals == [(1, "TERM")]
    assert scheduler.store.job(1).reason.startswith("hung: no lease call or progress report for 20 s")

    scheduler, executor, clock, _ = make(tmp_path / "lenient", hung_after_s=20.0)
    scheduler.submit(job("slow-to-start", hung_after_s=600), "ann")
    scheduler.tick()
    run_for(scheduler, clock, 300)  # a long first start (imports, data) is not a hang for this job
    assert executor.signals == []


def test_a_job_that_always_hangs_fails_after_max_retries_saying_so(tmp_path):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=10.0, max_retries=1)
    scheduler.submit(job("always-stuck"), "ann")
    run_for(scheduler, clock, 80)
    row = scheduler.store.job(1)
    assert row.status == "failed" and row.hangs == 2 and row.attempt == 2
    assert row.reason.startswith("hung (no lease call or progress report for 10 s; killed (no exit code))"
                                    " on attempt 2, after 1 retry")
    run_for(scheduler, clock, 30)
    assert len(executor.started) == 2


def test_silence_while_no_server_ran_is_not_counted_against_an_adopted_attempt(tmp_path):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=30.0)
    scheduler.submit(job("survivor"), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 0)
    clock.now += 600  # the server was down for ten minutes; the job trained on
    executor.forget()
    restarted = Scheduler(scheduler.store, executor, parse_slots("cpu:1"), Las(thresholds_gpu_s=(1e9,)),
                          scheduler.config, clock=clock)
    restarted.recover()
    run_for(restarted, clock, 20)
    assert executor.signals == []
    run_for(restarted, clock, 12)
    assert executor.signals == [(1, "TERM")]


def test_a_time_limit_counts_running_time_over_attempts_and_ends_the_job_failed(tmp_path):
    scheduler, executor, clock, said = make(tmp_path, hung_after_s=None,
                                            executor=FakeExecutor(tmp_path, obey_sigterm=True))
    scheduler.submit(job("long", time_limit="1m"), "ann")
    scheduler.tick()
    run_for(scheduler, clock, 40)
    executor.finish(1, 1)  # a crash at 40 s: retried, its time so far kept
    run_for(scheduler, clock, 15)
    assert scheduler.store.job(1).status == "running" and executor.running()[1].attempt == 2
    assert executor.signals == []
    run_for(scheduler, clock, 10)

    assert executor.signals == [(1, "TERM")]
    row = scheduler.store.job(1)
    assert row.status == "failed" and row.finished is not None and not row.attempt_live
    assert row.reason.startswith("time limit 60 s reached (ran 60 s over 2 attempts; exit 75)")
    assert [e.event for e in scheduler.store.events(1)][-3:] == ["time-limit", "exit", "fail"]
    assert any("job 1 failed: time limit 60 s reached" in line for line in said)
    info = scheduler.job_info(row)
    assert info["time_limit"] == 60.0 and info["status"] == "failed"
    run_for(scheduler, clock, 30)
    assert len(executor.started) == 2


@pytest.mark.parametrize("change, field, words", [
    ({"hung_after_s": 5}, "hung_after_s", "from 10 to 604800, got 5"),
    ({"hung_after_s": "soon"}, "hung_after_s", "'soon' (a string)"),
    ({"hung_after_s": 1e9}, "hung_after_s", "from 10 to 604800"),
    ({"time_limit": 0}, "time_limit", "from 1 to"),
    ({"time_limit": "forever"}, "time_limit", "a number with a unit s, m, h or d"),
    ({"time_limit": "9999d"}, "time_limit", "from 1 to 3.16224e+07"),
    ({"time_limit": True}, "time_limit", "(true/false)"),
])
def test_hung_after_s_and_time_limit_past_their_bounds_are_a_400_naming_them(tmp_path, change, field, words):
    scheduler, _, _, _ = make(tmp_path)
    client = TestClient(create_app(scheduler), raise_server_exceptions=False)
    answer = client.post("/jobs", json={"name": "j", "command": "x", "total_steps": 10, "user": "ann", **change})
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["field"] == field and words in body["message"]
    assert scheduler.store.jobs() == []


def test_an_older_state_file_gains_the_hang_count_and_the_last_contact(tmp_path):
    store = StateStore(tmp_path / "state.db")
    job_id = store.insert_job(spec={"name": "old"}, name="old", user="ann", queue="", priority=1.0, kind="old", gpus=1,
                              total_steps=10, submitted=1.0)
    store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:  # as an apportion before hangs were counted wrote it
        conn.execute("DROP INDEX jobs_hung")  # (its index came with the count)
        conn.execute("ALTER TABLE jobs DROP COLUMN hangs")
        conn.execute("ALTER TABLE jobs DROP COLUMN heard_at")
    row = StateStore(tmp_path / "state.db").job(job_id)
    assert row.hangs == 0 and row.heard_at is None


def test_a_real_process_that_stops_itself_gets_its_sigterm_and_is_retried(tmp_path):
    """kill -STOP of a real training process: SIGTERM is followed by SIGCONT, so the job still runs its
    SIGTERM handler (here: says so and exits 75, as after a checkpoint) and is retried."""
    executor = LocalExecutor(tmp_path, spares=0)
    scheduler, _, clock, _ = make(tmp_path, hung_after_s=10.0, executor=executor)
    stops_itself = ("import os, signal, sys\n"
                    "def stop(signum, frame):\n    print('checkpointing', flush=True); sys.exit(75)\n"
                    "signal.signal(signal.SIGTERM, stop)\n"
                    "print('training', flush=True); os.kill(os.getpid(), signal.SIGSTOP)\n")
    scheduler.submit(job("stopped", command=[sys.executable, "-c", stops_itself], workdir=str(tmp_path)), "ann")
    try:
        scheduler.tick()
        wait_for(lambda: "training" in executor.tail(1, 1), 10, "the job's first line")
        clock.now += 11
        scheduler.tick()
        assert scheduler.store.job(1).stop == "hung"
        wait_for(lambda: scheduler.tick() or "exit" in [e.event for e in scheduler.store.events(1)], 10, "the exit")
        assert "checkpointing" in executor.tail(1, 1)
        events = [(e.event, e.detail) for e in scheduler.store.events(1)]
        assert ("retry", "retry 1 of 3 from step 0: it had no checkpoint") in events, events
        row = scheduler.store.job(1)
        assert row.hangs == 1 and row.retries == 1 and row.attempt == 2
    finally:
        for attempt in executor.scan():
            executor.kill_attempt(attempt)
        executor.close()


def test_queue_and_status_show_the_hangs(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from apportion.cli import app
    from apportion.serve.client import Client

    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=10.0)
    scheduler.submit(job("frozen"), "ann")
    run_for(scheduler, clock, 16)  # hung, killed, started again
    monkeypatch.setattr(Client, "jobs", lambda self, **chosen: [scheduler.job_info(r) for r in scheduler.store.jobs()])
    monkeypatch.setattr(Client, "status", lambda self: scheduler.status())
    runner = CliRunner()
    table = runner.invoke(app, ["queue", "--server", "http://127.0.0.1:9"])
    assert table.exit_code == 0, table.output
    assert "hung 1×" in table.output
    status = runner.invoke(app, ["status", "--server", "http://127.0.0.1:9"])
    assert status.exit_code == 0, status.output
    assert "hung attempts stopped: 1" in status.output


def test_the_dashboard_shows_the_hangs(tmp_path):
    scheduler, executor, clock, _ = make(tmp_path, hung_after_s=10.0)
    scheduler.submit(job("frozen"), "ann")
    run_for(scheduler, clock, 16)
    client = TestClient(create_app(scheduler), raise_server_exceptions=False)
    detail = client.get("/dashboard/jobs/1").json()
    assert detail["job"]["hangs"] == 1 and "hung" in [e["event"] for e in detail["events"]]
    assert client.get("/dashboard/state").json()["server"]["hangs"] == 1
    assert client.get("/jobs/1").json()["hangs"] == 1


@pytest.mark.parametrize("value", ["5", "1e9", "nan"])
def test_serve_refuses_a_hung_after_s_past_its_bounds(tmp_path, value):
    from typer.testing import CliRunner

    from apportion.cli import app

    result = CliRunner().invoke(app, ["serve", "--state-dir", str(tmp_path), "--hung-after-s", value])
    assert result.exit_code == 2 and "--hung-after-s must be 0 (never) or from 10 to 604800 seconds" in result.output
    assert not (tmp_path / "state.db").exists()
