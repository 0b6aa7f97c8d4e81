"""The simulator feeds the duration predictor with jobs as they finish, and nothing else: a job
is predicted from the jobs that had finished when the scheduler first saw it."""

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.durations import DurationPredictor
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim.simulator import Simulator

ONE_STEP_A_SECOND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1,), steps_per_s=np.ones((1, 1, 1)))


def test_each_job_is_predicted_only_from_the_jobs_finished_before_it_was_first_seen():
    """One v100, one step a second, qssf; rounds every 360 s; every job is ann's.

    Job 0 (1000 steps) starts at 0. Job 1 (20000 steps), submitted at 100, is first seen at 360,
    when no job has finished: it gets the prior, 3600 GPU-s, whatever job 0 and job 1 turn out to
    need (the two then take turns, and job 0 finishes before 5040). Job 2 (500 steps), submitted
    at 5000, is first seen at 5040, after job 0 finished: everyone (one job, 1000) pulls the prior
    half way, ann's one job half way again: 3600**(1/4) × 1000**(3/4) GPU-s. Job 1, not finished,
    is not in it.
    """
    jobs = JobTable.build(job_id=["j0", "j1", "j2"], submit_time_s=[0.0, 100.0, 5000.0], kind_names=["a"] * 3,
                          num_gpus=[1, 1, 1], total_steps=[1000.0, 20000.0, 500.0], user=["ann"] * 3, kinds=("a",))
    predictor = DurationPredictor((("user",), ()), shrinkage=1.0, prior_gpu_s=3600.0)
    simulator = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("qssf"),
                          predictor=predictor)

    result = simulator.run()

    assert result.finish_s[0] < 5040.0 < result.finish_s[1]
    first = simulator.history.first_gpu_s
    assert first[:2].tolist() == pytest.approx([3600.0, 3600.0])
    assert first[2] == pytest.approx(3600 ** 0.25 * 1000 ** 0.75)
    assert predictor.observed == 3  # all three, each once, as it finished


def test_a_policy_on_true_durations_gets_no_predictions():
    jobs = JobTable.build(job_id=["j0"], submit_time_s=[0.0], kind_names=["a"], num_gpus=[1], total_steps=[10.0],
                          kinds=("a",))
    for spec, options, predicts in (("srtf", {}, False), ("qssf", {"durations": "oracle"}, False),
                                    ("srtf", {"durations": "predicted"}, True)):
        simulator = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND,
                              make_policy(spec, **options))
        simulator.run()
        assert (simulator.history is not None) == predicts, (spec, options)


def short_and_long_history() -> DurationPredictor:
    """A history of 40 one-GPU jobs: 32 took 100 GPU-s and 8 took 20,000. Its quartiles are all 100:
    the lognormal is sure of 100 (log sd at its floor); the sample knows a fifth run 200 times longer."""
    predictor = DurationPredictor((("gpus",), ()))
    predictor.keep_samples()
    groups = predictor.groups(user=None, name=None, queue=None, num_gpus=np.ones(40, dtype=np.int64),
                              submit_time_s=np.zeros(40))
    predictor.observe(groups, np.where(np.arange(40) % 5 == 4, 20000.0, 100.0))
    return predictor


def test_a_job_past_its_groups_short_jobs_yields_to_new_ones_by_its_sample_not_by_its_lognormal():
    """One v100, one step a second, rounds every 360 s. A long job (20,000 GPU-s) starts at 0; ten
    100-GPU-s jobs arrive at 150. At the round at 360 the long job has done about 350 GPU-s. Its
    sample says a job of its group that did that much is one of the long ones (about 19,650 to go):
    the newcomers go first. The lognormal, sure of 100, believes a job past it has as much again to
    go, rounded up to a doubling of 100: 400, a quarter of that for a running job (the preemption
    margin), no more than a newcomer's 100: the long job keeps its GPU a round more, and every
    newcomer finishes 360 s later. Both start from the same history and learn from the same
    finishes."""
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(11)], submit_time_s=[0.0] + [150.0] * 10,
                          kind_names=["a"] * 11, num_gpus=[1] * 11, total_steps=[20000.0] + [100.0] * 10,
                          kinds=("a",))
    short_jct = {}
    for spec in ("qssf", "qssf:lognormal"):
        simulator = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy(spec),
                              predictor=short_and_long_history())
        result = simulator.run()
        short_jct[spec] = float(np.mean(result.finish_s[1:] - 150.0))

    assert short_jct["qssf:lognormal"] - short_jct["qssf"] == pytest.approx(360.0, abs=1.0)


def test_a_sample_holds_only_the_jobs_finished_by_the_round_that_reads_it():
    """Twelve one-GPU jobs of 100 to 1,200 steps on two v100s; at every round qssf sees, its jobs'
    sample (everyone's: the only group) holds exactly the GPU times of the jobs finished by then."""
    steps = [100.0 * (i + 1) for i in range(12)]
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(12)], submit_time_s=[60.0 * i for i in range(12)],
                          kind_names=["a"] * 12, num_gpus=[1] * 12, total_steps=steps, kinds=("a",))
    predictor = DurationPredictor(((),))
    predictor.keep_samples(least=1)
    policy = make_policy("qssf")
    seen = []
    allocate = policy.allocate
    policy.allocate = lambda view, *rest: seen.append((view.now_s, predictor.samples.sample(0).tolist())) or \
        allocate(view, *rest)
    result = Simulator(jobs, parse_cluster_shorthand("v100:2"), ONE_STEP_A_SECOND, policy, predictor=predictor).run()

    assert any(0 < len(sample) < 12 for _, sample in seen)  # read while some jobs had finished and some not
    for now, sample in seen:
        assert sample == sorted(steps[i] for i in range(12) if result.finish_s[i] <= now)


def test_a_jobs_estimate_is_corrected_only_by_the_estimates_of_jobs_finished_before_it_was_seen():
    """One v100, one step a second, qssf; rounds every 360 s. Job 0 (1000 steps, estimated at 2000)
    starts at 0. Job 1 (20000 steps, estimated at 40000), first seen at 360, before any job finished:
    its estimate as it is, give or take the prior's factor of e. Job 2 (500 steps, estimated at 1000),
    first seen at 5040 after job 0 finished twice as short as estimated: the bias -log 2 shrunk by
    1/2, a factor 2**-0.5; job 1's own ratio, not known until it finishes, is not in it."""
    jobs = JobTable.build(job_id=["j0", "j1", "j2"], submit_time_s=[0.0, 100.0, 5000.0], kind_names=["a"] * 3,
                          num_gpus=[1, 1, 1], total_steps=[1000.0, 20000.0, 500.0], kinds=("a",),
                          estimated_steps=[2000.0, 40000.0, 1000.0])
    predictor = DurationPredictor()
    simulator = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("qssf"),
                          predictor=predictor)

    result = simulator.run()

    assert result.finish_s[0] < 5040.0 < result.finish_s[1]
    history = simulator.history
    assert history.first_gpu_s.tolist() == pytest.approx([2000.0, 40000.0, 1000.0 * 2 ** -0.5])
    assert history.first_log_sd[:2].tolist() == pytest.approx([1.0, 1.0])
    assert predictor.estimates.seen == 3  # each job's ratio, once, as it finished


def test_in_a_trace_with_users_each_users_estimates_are_corrected_by_their_own_record():
    """One v100, one step a second, qssf. mallory's first two jobs (1000 steps each) say 10 s; ann's
    (100 steps) say 100: exact. Then both submit again, at 10,000. Read by everyone's record (half
    100 × too short, half exact: × 10**0.8), mallory's next "10 s" would be 63 GPU-s and ann's "100 s"
    630; each read by their own, shrunk towards everyone's by 2/3, mallory's is 398 and ann's 185:
    ann's runs first (ranked by the median left, so that the spreads do not count)."""
    jobs = JobTable.build(job_id=[f"j{k}" for k in range(6)], submit_time_s=[0.0, 0.0, 0.0, 0.0, 10000.0, 10000.0],
                          kind_names=["a"] * 6, num_gpus=[1] * 6, total_steps=[1000.0, 100.0] * 3, kinds=("a",),
                          user=["mallory", "ann"] * 3, estimated_steps=[10.0, 100.0] * 3)

    result = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("qssf:median-left")).run()

    assert result.finish_s[5] < result.finish_s[4]
    assert result.finish_s[5] == pytest.approx(10000.0 + 360.0 - 10000.0 % 360.0 + 100.0)


def test_estimates_let_qssf_run_first_a_short_job_its_group_cannot_tell_from_a_long_one():
    """One v100, one step a second. Two one-GPU jobs of the same queue arrive at 0, the long one
    (10,000 steps) first: by queue and GPU count they are alike, and qssf runs the long one first
    until what it did makes it look long (the prior is wide), so the short one ends after 5,000 s.
    Their own estimates (8,000 and 200 s, rough but in the right order) put the short one first."""
    def replay(estimates):
        jobs = JobTable.build(job_id=["long", "short"], submit_time_s=[0.0, 0.0], kind_names=["a"] * 2,
                              num_gpus=[1, 1], total_steps=[10000.0, 100.0], queue=["vc"] * 2, kinds=("a",),
                              estimated_steps=estimates)
        return Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("qssf")).run()

    alike, told = replay(None), replay([8000.0, 200.0])

    assert alike.finish_s[1] > 5000.0
    assert told.finish_s[1] == pytest.approx(100.0) and told.finish_s[0] == pytest.approx(360.0 + 10000.0)  # from the next round


def test_estimated_jobs_are_ranked_by_the_ratios_of_the_jobs_finished_by_the_round_that_reads_them():
    """Twelve one-GPU jobs, each estimated at 100 steps, of 100 to 1,200 steps, on two v100s; at every
    round qssf sees, the estimated jobs' ratios hold exactly those of the jobs finished by then, and
    the view gives each job's own estimate."""
    steps = [100.0 * (i + 1) for i in range(12)]
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(12)], submit_time_s=[60.0 * i for i in range(12)],
                          kind_names=["a"] * 12, num_gpus=[1] * 12, total_steps=steps, kinds=("a",),
                          estimated_steps=[100.0] * 12)
    predictor = DurationPredictor(((),))
    policy = make_policy("qssf:estimate-ratios")
    seen = []
    allocate = policy.allocate
    policy.allocate = lambda view, *rest: seen.append(
        (view.now_s, view.estimate_ratios.sample().tolist(), view.estimated_gpu_s.tolist())) or allocate(view, *rest)
    result = Simulator(jobs, parse_cluster_shorthand("v100:2"), ONE_STEP_A_SECOND, policy, predictor=predictor).run()

    assert any(0 < len(sample) < 12 for _, sample, _ in seen)
    for now, sample, estimated in seen:
        assert sample == sorted(steps[i] / 100.0 for i in range(12) if result.finish_s[i] <= now)
        assert estimated and set(estimated) == {100.0}
    assert predictor.estimate_ratios.seen == 12


def test_with_enough_ratios_a_job_that_outlives_its_estimate_yields_to_new_estimated_ones():
    """One v100, one step a second. The history: 40 jobs whose estimates were right for 32 and 200 times
    short for 8 (every estimate 100). A job estimated at 100 that takes 20,000 starts at 0; ten jobs
    estimated (rightly) at 100 arrive at 150. By the ratios (qssf:estimate-ratios), at the round at 360
    the long job is one of the 200-times ones: the newcomers go first. By its lognormal (the ratios'
    quartiles are all 1: sure of 100: qssf's default) it keeps its GPU a round more, and every newcomer finishes 360 s later."""
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(11)], submit_time_s=[0.0] + [150.0] * 10,
                          kind_names=["a"] * 11, num_gpus=[1] * 11, total_steps=[20000.0] + [100.0] * 10,
                          kinds=("a",), estimated_steps=[100.0] * 11)
    short_jct = {}
    for spec in ("qssf:estimate-ratios", "qssf"):
        predictor = short_and_long_history()
        predictor.keep_estimate_ratios()
        groups = predictor.groups(user=None, name=None, queue=None, num_gpus=np.ones(40, dtype=np.int64),
                                  submit_time_s=np.zeros(40))
        predictor.observe(groups, np.where(np.arange(40) % 5 == 4, 20000.0, 100.0), np.full(40, 100.0))
        result = Simulator(jobs, parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy(spec),
                           predictor=predictor).run()
        short_jct[spec] = float(np.mean(result.finish_s[1:] - 150.0))

    assert short_jct["qssf"] - short_jct["qssf:estimate-ratios"] == pytest.approx(360.0, abs=1.0)
