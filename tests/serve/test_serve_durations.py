"""The server predicts job durations from its own finished jobs, kept in the state file across
restarts: the estimated finish time a job shows, and qssf's order. Fake clock and executor."""

from __future__ import annotations

import pytest

from fake_server import one_slot_scheduler


def start(tmp_path, policy="las"):
    return one_slot_scheduler(tmp_path, policy)


def job(name, steps, user="ann", **extra):
    return {"name": name, "command": "train", "total_steps": steps, "user": user, **extra}


def complete(scheduler, executor, job_id, steps, steps_per_s):
    """Run job ``job_id`` on the slot to the end, reporting ``steps_per_s`` as a job does."""
    scheduler.tick()
    assert scheduler.store.job(job_id).status == "running"
    scheduler.lease(job_id, 1, 0)
    scheduler.progress(job_id, 1, steps // 2, steps_per_s)
    scheduler.progress(job_id, 1, steps, steps_per_s)
    executor.finish(job_id, 0)
    scheduler.tick()
    assert scheduler.store.job(job_id).status == "completed"


def test_a_restarted_server_predicts_from_the_jobs_it_finished_before(tmp_path):
    """ann's cnn did 100 steps at 10 steps/s on one slot: 10 GPU-s. After a restart, a new cnn of
    ann's on one slot is predicted from the levels that have seen that job (user+name+GPUs,
    user+name, user, GPUs, everyone; no queue), each pulling the prior of 3600 half way:
    10 × 360**(1/32) GPU-s, 120.2 steps at 10 steps/s = 12.02 s. bob's lm (a cnn too, as the
    server measures speeds) shares only the GPU count and everyone: 10 × 360**(1/4) = 43.6 GPU-s,
    436 steps, 43.6 s. A job of a kind whose speed was never measured gets no time."""
    scheduler, executor, _ = start(tmp_path)
    scheduler.submit(job("cnn", 100), "ann")
    complete(scheduler, executor, 1, 100, 10.0)
    scheduler.store.close()

    scheduler, _, clock = start(tmp_path)  # the same state file
    assert scheduler.durations.predictor.observed == 1
    scheduler.submit(job("cnn", 1000), "ann")
    scheduler.submit(job("lm", 1000, user="bob", kind="cnn"), "bob")
    scheduler.submit(job("gan", 1000, user="bob"), "bob")
    cnn, lm, gan = (scheduler.job_info(scheduler.row(i)) for i in (2, 3, 4))

    assert cnn["predicted_remaining_s"] == pytest.approx(10 * 360 ** (1 / 32), abs=1e-3)
    assert cnn["estimated_finish"] == pytest.approx(clock.now + cnn["predicted_remaining_s"], abs=1e-3)
    assert cnn["estimate_from"] == "history: user+name+gpus"
    assert lm["predicted_remaining_s"] == pytest.approx(10 * 360 ** (1 / 4), abs=1e-3)
    assert lm["estimate_from"] == "history: gpus"
    assert gan["estimated_finish"] is None and gan["estimate_from"] == "speed not measured yet"


def test_the_estimate_never_goes_past_the_job_files_total_steps_and_ended_jobs_have_none(tmp_path):
    scheduler, executor, _ = start(tmp_path)
    scheduler.submit(job("cnn", 100), "ann")
    complete(scheduler, executor, 1, 100, 10.0)
    scheduler.submit(job("cnn", 50), "ann")  # predicted 120 steps, but it stops at 50: 5 s at 10 steps/s

    short = scheduler.job_info(scheduler.row(2))
    done = scheduler.job_info(scheduler.row(1))

    assert short["predicted_remaining_s"] == pytest.approx(5.0)
    assert short["estimate_from"] == "job file: total_steps"
    assert done["estimated_finish"] is None and done["predicted_remaining_s"] is None


def test_a_job_that_has_run_is_timed_at_its_own_speed(tmp_path):
    """The cnn kind is estimated at 10 steps/s, but this job did 100 steps in its 20 s: 5 steps/s.
    History says far more than the 50 steps its job file has left, so 50 steps at 5 steps/s: 10 s."""
    scheduler, executor, clock = start(tmp_path)
    scheduler.submit(job("cnn", 100), "ann")
    complete(scheduler, executor, 1, 100, 10.0)
    scheduler.submit(job("cnn", 150), "ann")
    scheduler.tick()
    scheduler.lease(2, 1, 0)
    clock.now += 20.0
    scheduler.lease(2, 1, 100)
    scheduler.plan(clock.now)  # counts its 20 s of service

    estimate = scheduler.job_info(scheduler.row(2))

    assert estimate["predicted_remaining_s"] == pytest.approx(10.0)
    assert estimate["estimated_finish"] == pytest.approx(clock.now + 10.0)


def test_qssf_runs_first_the_job_its_history_says_needs_the_least_gpu_time(tmp_path):
    """ann's short took 10 GPU-s. Then bob submits a job of a kind never seen, and ann another short:
    bob's is predicted at 43.6 GPU-s, ann's at 12.0, so ann's starts first although it came later."""
    scheduler, executor, _ = start(tmp_path, policy="qssf")
    scheduler.submit(job("short", 100), "ann")
    complete(scheduler, executor, 1, 100, 10.0)
    scheduler.submit(job("long", 100000, user="bob"), "bob")
    scheduler.submit(job("short", 100), "ann")

    scheduler.tick()

    assert executor.started[-1].job_id == 3
    assert scheduler.store.job(2).status == "queued"


def test_a_restarted_server_ranks_qssf_by_the_sample_of_the_jobs_it_finished_before(tmp_path):
    """Twenty of ann's shorts took 10 GPU-s each: after a restart the state file gives back her
    group's sample, and the round's view gives it to qssf for her next short (its index: 10 GPU-s)."""
    scheduler, executor, _ = start(tmp_path, policy="qssf")
    for job_id in range(1, 21):
        scheduler.submit(job("short", 100), "ann")
        complete(scheduler, executor, job_id, 100, 10.0)
    scheduler.store.close()

    scheduler, executor, _ = start(tmp_path, policy="qssf")
    seen = []
    allocate = scheduler.policy.allocate
    scheduler.policy.allocate = lambda jobs, *rest: seen.append(jobs) or allocate(jobs, *rest)
    scheduler.submit(job("short", 100), "ann")
    scheduler.tick()

    jobs = seen[-1]
    assert jobs.duration_samples.sample(int(jobs.sample_group[0])).tolist() == pytest.approx([10.0] * 20)
    assert jobs.duration_samples.keys(jobs.sample_group, [0.0])[0] == pytest.approx(10.0)
