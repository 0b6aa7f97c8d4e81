"""A finished serve run (the real scheduler on a fake clock, its fake jobs taking known times to
start, stop and finish) replayed in the simulator: the two side by side, job by job."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.fidelity import replay_run
from apportion.fidelity.measured import COSTS, Measured, Spread, StartUp, measure
from apportion.fidelity.served import read_served_run
from apportion.policies import make_policy
from fake_runtime import Behaviour, FakeJob, Jitter, serve_on_fake_clock

REPO = Path(__file__).resolve().parents[2]
TICK_S = 0.05  # the fake server notices an exit one tick after it happens
LAS_JOBS = [FakeJob("a", 300, 10.0, 0.0), FakeJob("b", 100, 20.0, 5.0), FakeJob("a", 200, 10.0, 12.0),
            FakeJob("b", 400, 20.0, 13.0)]
SLOW_B = {"b": Behaviour(start_s=4.0, restart_s=5.0, lead_s=1.0, stop_s=1.0, finish_s=1.0)}


@pytest.fixture(scope="module")
def las_run(tmp_path_factory):
    """Two slots under las (thresholds 8 and 30 GPU-s), rounds of 10 s: jobs preempted and resumed."""
    state_dir = tmp_path_factory.mktemp("las")
    serve_on_fake_clock(LAS_JOBS, state_dir, make_policy("las", thresholds_gpu_s="8,30"), slots="cpu:2",
                        round_s=10.0, behaviour=SLOW_B, tick_s=TICK_S, policy_options={"thresholds_gpu_s": "8,30"})
    return state_dir


def test_a_fifo_run_and_its_replay_agree_with_the_times_worked_out_by_hand(tmp_path):
    # one slot; two jobs of 100 steps at 10 steps/s, submitted at 0 and 1 s; 2 s to start, and
    # the exit is noticed 0.5 s + a tick after the last step
    serve_on_fake_clock([FakeJob("a", 100, 10.0, 0.0), FakeJob("a", 100, 10.0, 1.0)], tmp_path, make_policy("fifo"),
                        behaviour={"a": Behaviour(start_s=2.0, finish_s=0.5)}, tick_s=TICK_S)

    fidelity = replay_run(tmp_path)

    first, second = fidelity.rows
    assert (first.real_jct_s, first.sim_jct_s) == pytest.approx((12.55, 12.55))  # 2 + 10 + 0.55
    assert (second.real_queueing_s, second.sim_queueing_s) == pytest.approx((11.55, 11.55))  # starts as job 1 exits
    assert (second.real_jct_s, second.sim_jct_s) == pytest.approx((24.1, 24.1))  # 11.55 + 12.55
    assert fidelity.errors["avg_jct_error"] == pytest.approx(0.0, abs=1e-9)
    assert (fidelity.settings.policy, fidelity.settings.round_s, fidelity.settings.describe_slots()) == ("fifo", 10.0,
                                                                                                         "cpu:1")


def test_a_job_held_for_the_one_it_runs_after_replays_as_the_server_held_it(tmp_path):
    # two slots; job 2 runs after job 1 (100 steps at 10 steps/s, 2 s to start, its exit noticed
    # 0.55 s after its last step): the server starts it in the early round job 1's exit brings, at 12.55 s
    jobs = [FakeJob("a", 100, 10.0, 0.0), FakeJob("a", 50, 10.0, 0.0, after=(1,))]
    serve_on_fake_clock(jobs, tmp_path, make_policy("fifo"), slots="cpu:2",
                        behaviour={"a": Behaviour(start_s=2.0, finish_s=0.5)}, tick_s=TICK_S)

    second = replay_run(tmp_path).rows[1]

    assert (second.real_queueing_s, second.sim_queueing_s) == pytest.approx((12.55, 12.55))
    assert second.sim_jct_s == pytest.approx(second.real_jct_s)


def test_a_las_run_with_preemptions_replays_job_by_job(las_run):
    fidelity = replay_run(las_run)

    assert [r.job_id for r in fidelity.rows] == [1, 2, 3, 4]
    assert [r.real_preemptions for r in fidelity.rows] == [1, 0, 0, 1]
    assert [r.sim_preemptions for r in fidelity.rows] == [1, 0, 0, 1]
    for row in fidelity.rows:  # the same to within the fake server's tick
        assert row.sim_jct_s == pytest.approx(row.real_jct_s, abs=2 * TICK_S), row
        assert row.sim_queueing_s == pytest.approx(row.real_queueing_s, abs=2 * TICK_S), row
    assert fidelity.errors["p90_job_error"] < 0.01


def test_the_replay_follows_the_servers_received_share_rule_and_reports_its_progress(las_run):
    told = []

    fidelity = replay_run(las_run, progress=lambda ended, total, now_s: told.append((ended, total)))

    assert fidelity.settings.received_since == "allocation"  # what the server ran with, recorded at its start
    assert told and told[-1] == (4, 4)  # the four jobs, all ended
    assert [ended for ended, _ in told] == sorted(ended for ended, _ in told)


def test_the_replay_is_told_the_costs_each_kind_took(las_run):
    run = read_served_run(las_run)
    costs = measure(run.jobs, run.attempts).describe()

    assert costs["start_s"]["a"]["mean"] == pytest.approx(2.0) and costs["start_s"]["b"]["mean"] == pytest.approx(4.0)
    assert costs["restart_s"]["a"]["mean"] == pytest.approx(3.0) and costs["restart_s"]["b"]["mean"] == pytest.approx(5.0)
    assert costs["stop_lead_s"]["a"]["mean"] == pytest.approx(1.0)
    assert costs["stop_s"]["b"]["mean"] == pytest.approx(1.0 + TICK_S)
    assert costs["finish_s"]["a"]["mean"] == pytest.approx(0.5 + TICK_S)


def test_the_simulator_alone_is_far_off_without_what_the_run_measured(las_run):
    measured = replay_run(las_run)
    constant = replay_run(las_run, costs="constant")  # 10 s a resume, nothing else
    plain = replay_run(las_run, clock="rounds")  # the simulator's fixed rounds

    assert measured.errors["avg_jct_error"] < 0.01
    assert constant.errors["avg_jct_error"] > 0.05
    assert plain.errors["avg_jct_error"] > 0.05


def test_replay_prints_the_jobs_side_by_side_and_writes_its_files(las_run, tmp_path):
    runner = CliRunner()
    table = runner.invoke(app, ["replay", str(las_run)])
    as_json = runner.invoke(app, ["replay", str(las_run), "--json", "--out", str(tmp_path)])

    assert table.exit_code == 0, table.output
    assert "las on cpu:2, rounds of 10 s: 4 jobs" in table.stdout
    assert "average JCT error" in table.stdout and "measured b: start 4.00" in table.stdout
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert document["policy"] == "las" and document["jobs"] == 4
    assert [row["real_preemptions"] for row in document["rows"]] == [1, 0, 0, 1]
    assert {p.name for p in tmp_path.iterdir()} == {"fidelity.json", "jobs.csv", "fidelity.png"}
    assert (tmp_path / "jobs.csv").read_text().splitlines()[0].startswith("job_id,name,kind,submitted_s,real_jct_s")


def test_replay_json_of_an_lp_policy_run_is_pure_json(tmp_path):
    jobs = [FakeJob("a", 100, 10.0, 0.0), FakeJob("b", 200, 20.0, 0.5), FakeJob("a", 150, 10.0, 3.0)]
    serve_on_fake_clock(jobs, tmp_path, make_policy("max-min-fairness"), slots="cpu:2", round_s=10.0, tick_s=TICK_S)

    done = subprocess.run([sys.executable, "-m", "apportion", "replay", str(tmp_path), "--json"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # the solver's banner, if any, went to stderr
    assert document["policy"] == "max-min-fairness" and document["jobs"] == 3
    assert document["errors"]["p90_job_error"] < 0.01


def test_start_ups_that_follow_the_machines_load_are_charged_as_the_run_measured_them(tmp_path):
    # fifo on one slot, ten jobs of 5 s queued at once; start-ups take 2 s until 30 s into the
    # run, then three times as long (the machine got busy)
    jobs = [FakeJob("a", 50, 10.0, 0.0) for _ in range(10)]
    serve_on_fake_clock(jobs, tmp_path, make_policy("fifo"), behaviour={"a": Behaviour(start_s=2.0, finish_s=0.5)},
                        tick_s=TICK_S, jitter=Jitter(load=((0.0, 1.0), (30.0, 3.0))))

    by_moment = replay_run(tmp_path)
    by_kind = replay_run(tmp_path, costs="kind")  # every start-up the kind's mean, 4.4 s

    assert by_kind.rows[0].sim_jct_s - by_kind.rows[0].real_jct_s == pytest.approx(2.4, abs=0.1)
    assert by_kind.errors["p90_job_error"] > 0.2
    assert by_moment.rows[0].sim_jct_s == pytest.approx(by_moment.rows[0].real_jct_s, abs=2 * TICK_S)
    assert by_moment.errors["p90_job_error"] < 0.02
    assert math.isfinite(by_moment.measured.best_window_s())


def test_a_new_servers_slow_first_start_ups_are_not_charged_to_every_later_one(tmp_path):
    # two slots, fifo; start-ups take 0.1 s, but the two beginning in the server's first second
    # take 20 times as long (its spares still importing): 2 s. Then a job every 10 s, 2 s of steps
    jobs = [FakeJob("a", 20, 10.0, 0.0), FakeJob("a", 20, 10.0, 0.0)] + [FakeJob("a", 20, 10.0, 10.0 * i)
                                                                        for i in range(1, 9)]
    serve_on_fake_clock(jobs, tmp_path, make_policy("fifo"), slots="cpu:2",
                        behaviour={"a": Behaviour(start_s=0.1, finish_s=0.5)}, tick_s=TICK_S,
                        jitter=Jitter(load=((0.0, 20.0), (1.0, 1.0))))

    by_moment = replay_run(tmp_path)
    by_mean = replay_run(tmp_path, costs="kind")  # every start-up the kind's mean, 0.48 s

    start = by_moment.measured.costs["start_s"]["a"]
    assert (start.mean, start.median) == pytest.approx((0.48, 0.1))
    for row in by_moment.rows:  # the first two charged 20 times the median, as each other took
        assert row.sim_jct_s == pytest.approx(row.real_jct_s, abs=2 * TICK_S), row
    later = by_mean.rows[2:]
    assert all(r.sim_jct_s - r.real_jct_s == pytest.approx(0.38, abs=2 * TICK_S) for r in later)


def test_a_run_whose_first_job_came_after_the_servers_first_round_replays_from_that_round(tmp_path):
    # the fake server decides its first round at 0 s, with nothing to run; the jobs come at 0.3 and
    # 0.4 s, and the next round may come only 1 s after the last: both start at 1 s
    serve_on_fake_clock([FakeJob("a", 50, 10.0, 0.3), FakeJob("a", 50, 10.0, 0.4)], tmp_path, make_policy("fifo"),
                        slots="cpu:2", behaviour={"a": Behaviour(start_s=1.0, finish_s=0.5)}, tick_s=TICK_S)

    fidelity = replay_run(tmp_path)

    assert fidelity.settings.first_round == pytest.approx(0.0)
    assert fidelity.to_dict()["server_first_round_s"] == pytest.approx(-0.3)
    assert [r.real_queueing_s for r in fidelity.rows] == pytest.approx([0.7, 0.6])
    for row in fidelity.rows:
        assert row.sim_queueing_s == pytest.approx(row.real_queueing_s, abs=2 * TICK_S), row
        assert row.sim_jct_s == pytest.approx(row.real_jct_s, abs=2 * TICK_S), row


def test_start_ups_that_do_not_drift_are_charged_their_kinds_mean():
    # fast and slow start-ups in turn, 10 s apart: no moment is slower than another
    startups = [StartUp(10.0 * i, i, "a", "start_s", 1.0 if i % 2 else 3.0) for i in range(12)]
    measured = Measured({name: {} for name in COSTS} | {"start_s": {"a": Spread.of([s.seconds for s in startups])}},
                        [], startups)

    assert measured.best_window_s() == math.inf
    assert measured.slowness({i: i for i in range(12)}).at(np.array([55.0]), np.array([20])) == pytest.approx(1.0)


def test_a_job_still_starting_when_a_round_is_decided_replays_as_the_server_ran_it(tmp_path):
    # one slot, las over 5 s, rounds of 10 s decided 5 s ahead, 8 s to start. A (300 steps at 10/s)
    # from 0 s is still starting when the round at 20 s is decided (5 s): the server stretches its
    # lease to 20 s, and tells it so at its first lease call. B (20 steps) from 3 s is placed at
    # 15 s: A asks 1 s before 20 s, is told to stop, exits at 19.55 s; B runs, then A again.
    serve_on_fake_clock([FakeJob("a", 300, 10.0, 0.0), FakeJob("a", 20, 10.0, 3.0)], tmp_path,
                        make_policy("las", thresholds_gpu_s="5"), slots="cpu:1", round_s=10.0,
                        behaviour={"a": Behaviour(start_s=8.0, restart_s=8.0, lead_s=1.0, stop_s=0.5, finish_s=0.5)},
                        tick_s=TICK_S, policy_options={"thresholds_gpu_s": "5"})

    fidelity = replay_run(tmp_path)

    a, b = fidelity.rows
    assert b.real_queueing_s == pytest.approx(19.55 - 3.0)
    assert (a.real_preemptions, a.sim_preemptions) == (1, 1)
    for row in fidelity.rows:
        assert row.sim_jct_s == pytest.approx(row.real_jct_s, abs=2 * TICK_S), row


def test_a_run_shared_by_user_replays_shared_by_user(tmp_path):
    # two slots under fifo, rounds of 10 s; ann's three jobs take both slots at 0 s, bob submits
    # one at 1 s. Shared by user, bob's first job comes before ann's second: the round at 10 s
    # preempts it for bob's. The replay reads the server's share-by-user and does the same.
    jobs = [FakeJob("a", 300, 10.0, 0.0), FakeJob("a", 300, 10.0, 0.0), FakeJob("a", 300, 10.0, 0.0),
            FakeJob("a", 100, 10.0, 1.0, user="bob")]
    serve_on_fake_clock(jobs, tmp_path, make_policy("fifo"), slots="cpu:2", tick_s=TICK_S, share_by_user=True)

    fidelity = replay_run(tmp_path)

    assert fidelity.settings.share_by_user is True
    assert sum(r.real_preemptions for r in fidelity.rows) == 1
    bob = fidelity.rows[3]
    assert bob.real_queueing_s < 15.0  # started at the next round (10 s, and 2 s to start), not after ann's 30 s jobs
    for row in fidelity.rows:
        assert row.sim_jct_s == pytest.approx(row.real_jct_s, abs=2 * TICK_S), row
        assert row.sim_preemptions == row.real_preemptions, row


def test_a_qssf_run_ranked_by_the_job_files_own_estimates_replays_in_the_order_the_server_ran(tmp_path):
    """One slot under qssf, two jobs submitted together with no history: the second's job file says it
    takes 5 s, the first's 300 s. The server runs the second first (the first waits for it), and so
    must the replay, which reads the same estimates (without them the two tie and the first goes first)."""
    jobs = [FakeJob("a", 300, 10.0, 0.0, estimated_duration_s=300.0), FakeJob("a", 50, 10.0, 0.0, estimated_duration_s=5.0)]
    serve_on_fake_clock(jobs, tmp_path, make_policy("qssf"), behaviour={"a": Behaviour(start_s=2.0, finish_s=0.5)},
                        tick_s=TICK_S)

    long_job, short_job = replay_run(tmp_path).rows

    assert short_job.real_queueing_s == pytest.approx(0.0, abs=TICK_S) and long_job.real_queueing_s > 5.0
    assert (long_job.sim_queueing_s, short_job.sim_queueing_s) == pytest.approx(
        (long_job.real_queueing_s, short_job.real_queueing_s), abs=2 * TICK_S)
