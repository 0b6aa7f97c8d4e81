"""What the server says about resuming is what will happen: a crash or a preemption resumes
from the newest checkpoint in the job's checkpoint directory (or from step 0 when there is
none), and a later attempt that starts below that checkpoint is a script that never restores."""

from __future__ import annotations

from test_serve_scheduler import job, make, run_for

from apportion.runtime import Checkpointer


def checkpoint(tmp_path, job_id: int, step: int) -> None:
    Checkpointer(tmp_path / "jobs" / str(job_id) / "checkpoints").save({"step": step}, step)


def settle(scheduler, executor, clock) -> dict:
    """Settle the attempts that ended, and nothing else (a tick would start the next at once)."""
    for ended in executor.poll():
        scheduler.lifecycle.on_exit(ended, clock.now)
    return scheduler.store.job(1)


def crash(scheduler, executor, clock, attempt: int, steps_done: int) -> dict:
    run_for(scheduler, clock, 2)
    assert executor.running()[1].attempt == attempt
    scheduler.lease(1, attempt, steps_done)
    executor.finish(1, 3)
    return settle(scheduler, executor, clock)


def test_a_crash_says_it_retries_from_its_last_checkpoint_or_from_step_0(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("crashy"), "ann")

    row = crash(scheduler, executor, clock, 1, 25)
    assert row.reason == "exit 3; retry 1 of 3 from step 0: it had no checkpoint" and row.steps_done == 0

    checkpoint(tmp_path, 1, 40)
    row = crash(scheduler, executor, clock, 2, 52)
    assert row.reason == "exit 3; retry 2 of 3 from step 40 (its last checkpoint; the 12 step(s) after it are redone)"
    assert row.steps_done == 40
    assert [e.detail for e in scheduler.store.events(1) if e.event == "retry"][-1].startswith("retry 2 of 3 from step 40")


def test_a_preempted_job_waits_to_resume_from_the_step_of_its_newest_checkpoint(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", grace_s=1.0)
    scheduler.submit(job("a"), "ann")
    run_for(scheduler, clock, 1)
    scheduler.lease(1, 1, 30)
    checkpoint(tmp_path, 1, 33)  # it checkpointed three steps after its last report, and exits 75
    executor.finish(1, 75)
    row = settle(scheduler, executor, clock)
    assert row.status == "preempted" and row.steps_done == 33
    assert row.reason.startswith("waiting to resume from step 33")


def test_an_attempt_that_ignores_its_checkpoint_is_reported_as_never_restoring(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=5)
    scheduler.submit(job("forgetful"), "ann")
    run_for(scheduler, clock, 1)
    scheduler.lease(1, 1, 0)
    checkpoint(tmp_path, 1, 20)
    executor.finish(1, 3)  # crashed at step 20, checkpointed
    run_for(scheduler, clock, 2)
    assert executor.running()[1].attempt == 2

    scheduler.lease(1, 2, 0)  # attempt 2 starts at step 0: it never called restore()
    warning = "never calls restore(): restarts from 0"
    assert warning in scheduler.store.job(1).reason
    assert [e.event for e in scheduler.store.events(1)].count("warning") == 1
    run_for(scheduler, clock, 25)  # rounds come and go: the reason keeps the warning
    assert warning in scheduler.store.job(1).reason

    executor.finish(1, 3)
    assert warning in settle(scheduler, executor, clock).reason  # while it waits for its retry too


def test_the_job_file_or_else_the_server_sets_the_jobs_checkpoint_cadence(tmp_path):
    scheduler, executor, _ = make(tmp_path, slots="cpu:2")
    scheduler.submit(job("own", checkpoint_every="auto:60"), "ann")
    scheduler.submit(job("default"), "ann")
    scheduler.tick()
    assert executor.envs[(1, 1)]["APPORTION_CHECKPOINT_EVERY"] == "auto:60"
    assert "APPORTION_CHECKPOINT_EVERY" not in executor.envs[(2, 1)]  # the runtime's own default: auto


def corrupt(tmp_path, job_id: int, step: int) -> None:
    """A damaged disk: a byte of a checkpoint changes after it was written (and its digest)."""
    path = tmp_path / "jobs" / str(job_id) / "checkpoints" / f"step-{step:08d}.pt"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(data)


def start_attempt(scheduler, clock, attempt: int, steps_done: int, skipped=()) -> dict:
    """Run rounds until the job's next attempt starts, then make its first lease call."""
    run_for(scheduler, clock, 2)
    scheduler.lease(1, attempt, steps_done, tuple(skipped))
    return scheduler.store.job(1)


def test_a_corrupt_newest_checkpoint_is_skipped_by_name_and_the_step_resumed_from_recorded(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("damaged"), "ann")
    checkpoint(tmp_path, 1, 20)
    checkpoint(tmp_path, 1, 40)
    corrupt(tmp_path, 1, 40)
    row = crash(scheduler, executor, clock, 1, 45)
    assert row.steps_done == 20
    assert row.reason == ("exit 3; retry 1 of 3 from step 20 (its newest intact checkpoint; skipped step-00000040.pt:"
                             " checksum mismatch; the 25 step(s) after it are redone)")
    exit_event = [e.detail for e in scheduler.store.events(1) if e.event == "exit"][-1]
    assert "newest checkpoint step 20 (skipped step-00000040.pt: checksum mismatch: its SHA-256 is" in exit_event

    # the runtime skips it too, and says so at its first lease call: it resumed where the server said
    row = start_attempt(scheduler, clock, 2, 20, ["step-00000040.pt: checksum mismatch: its SHA-256 is …"])
    assert row.steps_done == 20 and "WARNING" not in row.reason
    assert [a.first_step for a in scheduler.store.attempts()] == [45, 20]  # what each attempt said it started at


def test_a_checkpoint_too_large_to_hash_at_exit_is_verified_by_the_restore_and_its_step_recorded(tmp_path, monkeypatch):
    """The server hashes no checkpoint above VERIFY_MOST_BYTES under its lock: it takes the newest as
    intact, and the step the job's own restore reached, past the corrupt one, is what it records."""
    from apportion.serve.attempts import checkpoints

    monkeypatch.setattr(checkpoints, "VERIFY_MOST_BYTES", 16)  # every checkpoint here counts as large
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("large"), "ann")
    checkpoint(tmp_path, 1, 20)
    checkpoint(tmp_path, 1, 40)
    corrupt(tmp_path, 1, 40)
    row = crash(scheduler, executor, clock, 1, 45)
    assert row.reason == "exit 3; retry 1 of 3 from step 40 (its last checkpoint; the 5 step(s) after it are redone)"
    row = start_attempt(scheduler, clock, 2, 20, ["step-00000040.pt: checksum mismatch: its SHA-256 is …"])
    assert row.steps_done == 20
    assert row.reason == ("WARNING: attempt 2 resumed at step 20, not 40: its newer checkpoints could not be loaded"
                             " (skipped step-00000040.pt: checksum mismatch)")
    assert [a.first_step for a in scheduler.store.attempts()] == [45, 20]


def test_with_every_checkpoint_corrupt_it_restarts_from_0_and_says_why(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("damaged"), "ann")
    for step in (20, 40):
        checkpoint(tmp_path, 1, step)
        corrupt(tmp_path, 1, step)
    row = crash(scheduler, executor, clock, 1, 45)
    assert row.steps_done == 0
    assert row.reason == ("exit 3; retry 1 of 3 from step 0: no intact checkpoint (skipped step-00000040.pt: checksum"
                             " mismatch, step-00000020.pt: checksum mismatch)")

    row = start_attempt(scheduler, clock, 2, 0, ["step-00000040.pt: checksum mismatch", "step-00000020.pt: checksum mismatch"])
    assert row.steps_done == 0 and "restore()" not in row.reason and "WARNING" not in row.reason


def test_a_checkpoint_the_runtime_could_not_load_is_named_not_taken_for_a_missing_restore(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("damaged"), "ann")
    checkpoint(tmp_path, 1, 40)  # intact for the server: the runtime alone can tell it does not load
    crash(scheduler, executor, clock, 1, 45)
    row = start_attempt(scheduler, clock, 2, 0, ["step-00000040.pt: cannot load it (UnpicklingError: bad)"])
    assert row.steps_done == 0
    assert row.reason == ("WARNING: attempt 2 resumed at step 0, not 40: its newer checkpoints could not be loaded"
                             " (skipped step-00000040.pt: cannot load it (UnpicklingError: bad))")
    assert "never calls restore()" not in row.reason


def test_a_checkpoint_without_a_checksum_an_older_apportions_still_counts(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1", max_retries=3)
    scheduler.submit(job("old"), "ann")
    checkpoint(tmp_path, 1, 30)
    (tmp_path / "jobs" / "1" / "checkpoints" / "step-00000030.pt.sha256").unlink()
    row = crash(scheduler, executor, clock, 1, 35)
    assert row.steps_done == 30 and "from step 30 (its last checkpoint;" in row.reason
