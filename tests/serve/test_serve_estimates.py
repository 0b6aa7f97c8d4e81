"""A job file's own estimate of the job's duration (``estimated_duration_s``): qssf ranks by it,
corrected by how wrong its user's finished estimates were, so that a user who lies about them pays
for it alone; kept in the state file across restarts. Fake clock and executor, one slot that trains
every kind at 10 steps/s: a job of N steps takes N / 10 GPU-seconds."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from apportion.policies import make_policy
from apportion.serve.http.api import create_app
from fake_server import one_slot_scheduler


def start(tmp_path, policy="qssf"):
    return one_slot_scheduler(tmp_path, policy)


def job(name, steps, user, estimate=None, **extra):
    spec = {"name": name, "command": "train", "total_steps": steps, "user": user, "kind": "train", **extra}
    return spec if estimate is None else {**spec, "estimated_duration_s": estimate}


def run_alone(scheduler, executor, spec) -> int:
    """Submit ``spec`` on an idle server and run it to the end at 10 steps/s; its id."""
    job_id = scheduler.submit(spec, spec["user"])
    steps = spec["total_steps"]
    scheduler.tick()
    assert scheduler.store.job(job_id).status == "running"
    scheduler.lease(job_id, 1, 0)
    scheduler.progress(job_id, 1, steps // 2, 10.0)
    scheduler.progress(job_id, 1, steps, 10.0)
    executor.finish(job_id, 0)
    scheduler.tick()
    assert scheduler.store.job(job_id).status == "completed"
    return job_id


def first_started(scheduler, executor, *specs) -> int:
    """Submit ``specs`` in order on an idle server and run a round: the id of the job it starts."""
    ids = [scheduler.submit(spec, spec["user"]) for spec in specs]
    scheduler.tick()
    started = [job_id for job_id in ids if scheduler.store.job(job_id).status == "running"]
    assert len(started) == 1
    return started[0]


def test_qssf_runs_first_the_job_whose_own_estimate_says_it_is_short_though_its_history_says_otherwise(tmp_path):
    """ann's "sweep" jobs took 100 GPU-s and her "probe" jobs 10. Her next sweep says it takes 5 s:
    it is predicted from its estimate (no estimate was ever checked: taken as it is), 5 GPU-s, and
    runs before her next probe (10, from history), though it came first only in the job file."""
    scheduler, executor, _ = start(tmp_path)
    for _ in range(3):
        run_alone(scheduler, executor, job("sweep", 1000, "ann"))
        run_alone(scheduler, executor, job("probe", 100, "ann"))

    probe, sweep = job("probe", 100, "ann"), job("sweep", 1000, "ann", estimate=5)

    assert first_started(scheduler, executor, probe, sweep) == 8
    assert scheduler.job_info(scheduler.row(8))["estimated_duration_s"] == 5
    assert scheduler.job_info(scheduler.row(8))["estimate_from"] == \
        "job file: estimated_duration_s, as given (ann has no estimated job finished yet)"


def liar_and_honest_history(scheduler, executor) -> None:
    """mallory says each of her jobs takes 1 s: they take 100 GPU-s. ann's estimates are exact (10 s)."""
    for _ in range(3):
        run_alone(scheduler, executor, job("big", 1000, "mallory", estimate=1))
        run_alone(scheduler, executor, job("small", 100, "ann", estimate=10))


def test_a_user_whose_estimates_are_100_times_too_short_no_longer_jumps_an_honest_users_shorter_job(tmp_path):
    """After three of each finished, mallory's next "1 s" job is read by her own record (× ~50),
    ann's honest 10 s by hers: ann's runs first. Read by one cluster-wide correction, mallory's
    1 s would still be a tenth of ann's 10 s, and hers would run first."""
    scheduler, executor, _ = start(tmp_path)
    liar_and_honest_history(scheduler, executor)

    lie, honest = job("big", 1000, "mallory", estimate=1), job("small", 100, "ann", estimate=10)

    assert first_started(scheduler, executor, lie, honest) == 8


@pytest.mark.parametrize("policy", [make_policy("qssf:median-left"), make_policy("srtf", durations="predicted")],
                         ids=["qssf:median-left", "srtf predicted"])
def test_a_liars_estimates_do_not_change_the_rank_of_another_users_estimated_job(tmp_path, policy):
    """bob's jobs without an estimate took 30 GPU-s. ann's next job says 10 s and her record says she
    is right: ranked by the median time left, it runs before bob's next, whatever mallory said about
    hers (read by everyone's record, mallory's lies would make ann's 10 s about 70)."""
    scheduler, executor, _ = start(tmp_path, policy)
    for _ in range(3):
        run_alone(scheduler, executor, job("mid", 300, "bob"))
    liar_and_honest_history(scheduler, executor)

    assert first_started(scheduler, executor, job("mid", 300, "bob"), job("small", 100, "ann", estimate=10)) == 11


def test_a_job_that_outlives_its_one_second_estimate_is_not_believed_all_but_done(tmp_path):
    """ann's job says 1 s and has run 200 GPU-s: it is believed to have at least as much again to
    go, so bob's new job (10 GPU-s, from history) takes the slot from it at the next round."""
    scheduler, executor, clock = start(tmp_path)
    run_alone(scheduler, executor, job("probe", 100, "bob"))
    long_id = scheduler.submit(job("long", 100_000, "ann", estimate=1), "ann")
    scheduler.tick()
    scheduler.lease(long_id, 1, 0)
    for steps in range(100, 2001, 100):  # 10 s, 100 steps each: 200 GPU-s in all
        clock.now += 10.0
        scheduler.lease(long_id, 1, steps)
        scheduler.tick()
    assert scheduler.store.job(long_id).status == "running"

    new_id = scheduler.submit(job("probe", 100, "bob"), "bob")
    clock.now += 10.0
    scheduler.lease(long_id, 1, 2100)
    scheduler.tick()

    assert scheduler.store.job(long_id).stop == "preempt"
    assert new_id not in [a.job_id for a in executor.started]  # it starts once the slot is free


def test_a_restarted_server_rebuilds_each_users_correction_from_the_state_file(tmp_path):
    scheduler, executor, _ = start(tmp_path)
    liar_and_honest_history(scheduler, executor)
    scheduler.store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        kept = conn.execute("SELECT user, gpu_s, estimated_gpu_s FROM durations ORDER BY job_id").fetchall()
    assert kept == [("mallory", 100.0, 1.0), ("ann", 10.0, 10.0)] * 3

    scheduler, executor, _ = start(tmp_path)  # the same state file
    lie, honest = job("big", 1000, "mallory", estimate=1), job("small", 100, "ann", estimate=10)

    assert first_started(scheduler, executor, lie, honest) == 8
    assert scheduler.job_info(scheduler.row(7))["estimate_from"] == \
        "job file: estimated_duration_s, corrected by 3 of mallory's finished"


@pytest.mark.parametrize("value", [0, -5, "nan", "inf", "-inf", 1e300, "1e300", "soon", [10], {"s": 1}, True])
def test_a_nonsense_estimate_is_refused_with_a_400_naming_the_field(tmp_path, value):
    scheduler, _, _ = start(tmp_path)
    client = TestClient(create_app(scheduler))

    answer = client.post("/jobs", json=job("a", 10, "ann", estimate=value))

    assert answer.status_code == 400, answer.text
    assert "estimated_duration_s" in answer.json()["detail"]


def test_an_estimate_may_have_a_unit_and_an_arrays_tasks_each_keep_it(tmp_path):
    scheduler, _, _ = start(tmp_path)
    client = TestClient(create_app(scheduler))

    answer = client.post("/jobs", json=job("a", 10, "ann", estimate="90m", array="0-2"))

    assert answer.status_code == 200, answer.text
    listed = client.get("/jobs").json()
    assert [j["estimated_duration_s"] for j in listed] == [5400.0] * 3
    with sqlite3.connect(tmp_path / "state.db") as conn:
        assert conn.execute("SELECT estimated_duration_s FROM jobs").fetchall() == [(5400.0,)] * 3


def test_an_older_state_file_gains_the_estimate_columns(tmp_path):
    scheduler, executor, _ = start(tmp_path)
    run_alone(scheduler, executor, job("small", 100, "ann"))
    scheduler.store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:  # as written before the columns were there
        conn.execute("ALTER TABLE jobs DROP COLUMN estimated_duration_s")
        conn.execute("ALTER TABLE durations DROP COLUMN estimated_gpu_s")

    scheduler, executor, _ = start(tmp_path)

    assert scheduler.durations.predictor.observed == 1
    assert run_alone(scheduler, executor, job("small", 100, "ann", estimate=10)) == 2


def test_qssf_by_estimate_ratios_is_given_each_estimate_stretched_by_its_users_record(tmp_path):
    """As the simulator gives it: the estimated jobs' ratios actual ÷ estimate as a sample, and each
    estimate as that sample is to read it: mallory's 1 s stretched by how much more wrong hers were
    than everyone's, ann's shrunk by how much less: ann's is read as the shorter."""
    scheduler, executor, _ = start(tmp_path, "qssf:estimate-ratios")
    liar_and_honest_history(scheduler, executor)
    seen = []
    allocate = scheduler.policy.allocate
    scheduler.policy.allocate = lambda jobs, *rest: seen.append(jobs) or allocate(jobs, *rest)

    first_started(scheduler, executor, job("big", 1000, "mallory", estimate=1), job("small", 100, "ann", estimate=10))

    jobs = seen[-1]
    assert jobs.estimate_ratios.seen == 6
    lie, honest = jobs.estimated_gpu_s.tolist()
    assert lie > honest  # her 1 GPU-s now reads more than ann's 10 (about 4.4 against 1.4)


def test_the_job_list_estimates_finishes_as_each_jobs_page_does(tmp_path):
    scheduler, executor, _ = start(tmp_path)
    liar_and_honest_history(scheduler, executor)
    client = TestClient(create_app(scheduler))
    for spec in (job("big", 1000, "mallory", estimate=1), job("small", 100, "ann", estimate=10), job("small", 1000, "ann")):
        scheduler.submit(spec, spec["user"])

    listed = {j["id"]: j for j in client.get("/jobs").json()}

    for job_id in ("7", "8", "9"):
        page = client.get(f"/jobs/{job_id}").json()
        assert listed[job_id]["predicted_remaining_s"] == pytest.approx(page["predicted_remaining_s"])
        assert listed[job_id]["estimate_from"] == page["estimate_from"]
    assert listed["7"]["estimate_from"] == \
        "job file: estimated_duration_s, corrected by 3 of mallory's finished"
    assert listed["9"]["estimate_from"].startswith("history: ")
