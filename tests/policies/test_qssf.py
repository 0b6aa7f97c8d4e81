"""QSSF: the job with the least predicted remaining GPU service runs first, whole gangs at a time;
and srtf and finish-time fairness on predicted durations."""

from dataclasses import replace

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.policies.qssf import Qssf

SURE = 0.1  # log sd: the predictor is sure of these jobs


def view(num_gpus, predicted_gpu_s, *, total_steps=None, steps_done=None, running_type=None,
         log_sd=SURE) -> JobView:
    n = len(num_gpus)
    return JobView(
        index=np.arange(n), submit_time_s=np.arange(n, dtype=float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus), priority=np.ones(n),
        total_steps=np.full(n, 1e9) if total_steps is None else np.asarray(total_steps, dtype=float),
        steps_done=np.zeros(n) if steps_done is None else np.asarray(steps_done, dtype=float),
        attained_service_s=np.zeros(n), first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "", dtype=object), user=np.full(n, "", dtype=object), now_s=0.0,
        predicted_gpu_s=np.asarray(predicted_gpu_s, dtype=float), predicted_log_sd=np.full(n, log_sd),
    )


def gpus(count: int) -> ClusterView:
    return ClusterView(("v100",), np.array([count]), np.full(1, np.nan))


def one_step_a_second(jobs: JobView) -> ThroughputView:
    """n GPUs do n steps a second: a step is one GPU-second on any job."""
    return ThroughputView(jobs.num_gpus[:, None].astype(float))


# A: 2 GPUs, 1000 GPU-s predicted (500 s); B: 1 GPU, 900 GPU-s (900 s); C: 1 GPU, 300 GPU-s (300 s)
SIZES, PREDICTED = [2, 1, 1], [1000.0, 900.0, 300.0]


def test_the_least_service_first_fills_three_gpus_with_the_two_one_gpu_jobs():
    """Service first: C (300), B (900), then A (1000) needs 2 GPUs and 1 is left: A waits."""
    jobs = view(SIZES, PREDICTED)

    share = Qssf().allocate(jobs, gpus(3), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [0, 1, 1]


def test_srtf_on_the_same_predictions_runs_the_wide_job_instead():
    """Time first: C (300 s), A (500 s: 1000 GPU-s on 2 GPUs) takes the other two, B (900 s) waits."""
    jobs = view(SIZES, PREDICTED)

    share = make_policy("srtf", durations="predicted").allocate(jobs, gpus(3), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [1, 0, 1]


def test_a_newcomer_with_less_service_left_preempts_a_running_job():
    """D runs: 5000 predicted, 1000 done, about 4000 left; E arrives predicted at 500: E takes the GPU."""
    jobs = view([1, 1], [5000.0, 500.0], steps_done=[1000.0, 0.0], running_type=[0, -1])

    share = Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [0, 1]


def test_a_job_that_outlives_its_prediction_falls_behind_a_fresh_one():
    """F was predicted at 100 GPU-s (log sd 1) but has done 1600 (100 × 16): past its prediction
    it is believed to have 100 × 32 = 3200 to go, more than 4 × G's whole prediction of 300 (a
    running job keeps its GPUs against a newcomer believed to need no less than a quarter of
    what it has left): G goes first."""
    jobs = view([1, 1], [100.0, 300.0], steps_done=[1600.0, 0.0], running_type=[0, -1], log_sd=1.0)

    share = Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [0, 1]


def test_a_running_job_keeps_its_gpus_against_a_newcomer_not_much_shorter():
    """D runs, 5000 predicted, 3000 done: about 2000 left. E arrives predicted at 600, more than a
    quarter of 2000: D keeps the GPU. At 400 (less than a quarter) E would take it."""
    keeps = view([1, 1], [5000.0, 600.0], steps_done=[3000.0, 0.0], running_type=[0, -1])
    loses = view([1, 1], [5000.0, 400.0], steps_done=[3000.0, 0.0], running_type=[0, -1])

    assert Qssf().allocate(keeps, gpus(1), one_step_a_second(keeps)).share[:, 0].tolist() == [1, 0]
    assert Qssf().allocate(loses, gpus(1), one_step_a_second(loses)).share[:, 0].tolist() == [0, 1]


def test_a_job_far_past_a_confident_prediction_no_longer_outranks_new_jobs_like_it():
    """H was predicted at 70 GPU-s (log sd 0.18) and has done 3,600; I, just arrived, is predicted
    at 70 too. The lognormal alone would leave H about 20 s and run it first; past its prediction
    it has 3,600 to go: I goes first."""
    jobs = view([1, 1], [70.0, 70.0], steps_done=[3600.0, 0.0], running_type=[0, -1], log_sd=0.18)

    share = Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [0, 1]


def test_helios_non_preemptive_qssf_lets_a_running_job_finish():
    """The case above (D runs, 5000 predicted, 1000 done; E arrives predicted at 500), under
    Helios's QSSF, which never preempts: D keeps the GPU, E waits, and nothing is to be revisited."""
    jobs = view([1, 1], [5000.0, 500.0], steps_done=[1000.0, 0.0], running_type=[0, -1])
    policy = make_policy("qssf:non-preemptive")

    share = policy.allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [1, 0]
    assert policy.next_change_s(jobs, np.array([True, False])) == float("inf")


def test_helios_qssf_is_a_strict_queue_in_predicted_order():
    """4 GPUs; R runs on 2. Waiting: X wants 4 GPUs for 100 GPU-s, Y 1 GPU for 500. By predicted
    service X is first but does not fit in the 2 free GPUs: the non-preemptive qssf starts Y beside
    it, Helios's (non-preemptive, head of line) keeps Y waiting behind X."""
    jobs = view([2, 4, 1], [9000.0, 100.0, 500.0], steps_done=[10.0, 0.0, 0.0], running_type=[0, -1, -1])

    fills = make_policy("qssf:non-preemptive").allocate(jobs, gpus(4), one_step_a_second(jobs)).share
    helios = make_policy("qssf:non-preemptive:head-of-line").allocate(jobs, gpus(4), one_step_a_second(jobs)).share

    assert fills[:, 0].tolist() == [1, 0, 1]
    assert helios[:, 0].tolist() == [1, 0, 0]


def test_the_oracle_ranks_by_the_true_remaining_steps_not_the_prediction():
    """True work: A 200 steps × 2 GPUs = 400 GPU-s, B 900, C 600: A and C fit (3 GPUs), B waits;
    the predictions (which would put B before A) are not looked at."""
    jobs = view(SIZES, PREDICTED, total_steps=[200.0, 900.0, 600.0])

    share = Qssf(durations="oracle").allocate(jobs, gpus(3), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [1, 0, 1]


def test_past_its_prediction_a_running_job_is_ranked_again_when_it_would_fall_behind():
    """Ranked by the median left (``qssf:median-left``): job 0 (1 GPU, predicted 1000, log sd 1)
    runs and job 1 (predicted 300) waits: 300 is not under a quarter of job 0's 1000, so job 0
    keeps running. At its prediction, unfinished, it is believed to have 2000 left, a quarter of
    which (500) is behind job 1's 300. So the next change is when job 0 has done 1000 GPU-s, 1000 s
    from now."""
    jobs = view([1, 1], [1000.0, 300.0], steps_done=[10.0, 0.0], running_type=[0, -1], log_sd=1.0)
    policy = make_policy("qssf:median-left")
    share = policy.allocate(jobs, gpus(1), one_step_a_second(jobs)).share
    assert share[:, 0].tolist() == [1, 0]

    assert policy.next_change_s(jobs, np.array([True, False])) == pytest.approx(990.0)


WIDE = 3.0  # log sd: a prediction that cannot tell a 60-s job from a 10-hour one


def test_a_job_with_a_wide_prediction_yields_to_a_newcomer_once_it_has_run_an_eighth_of_it():
    """J and K are predicted alike, 8000 GPU-s with log sd 3 (a queue's every job of that width).
    J has run 1000 (an eighth) unfinished. Ranked by the median left, J has about 7000 to go
    against K's 8000 and keeps the GPU. Ranked by the Gittins index, J's 1000 done without
    finishing makes it likely one of the long ones: 1 / its index is 0.92 × 8000 = 7,330 GPU-s,
    K's, having done nothing, 0.087 × 8000 = 700 (most such jobs end early), under a quarter of
    J's: K goes first, as least-attained-service would have it."""
    jobs = view([1, 1], [8000.0, 8000.0], steps_done=[1000.0, 0.0], running_type=[0, -1], log_sd=WIDE)

    by_index = Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share
    by_median = make_policy("qssf:median-left").allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert by_index[:, 0].tolist() == [0, 1]
    assert by_median[:, 0].tolist() == [1, 0]


def test_a_sure_prediction_ranks_by_the_service_left_as_the_median_does():
    """The same two jobs with a sure prediction (log sd 0.1): J, an eighth done, has about 7000
    left and K 8000; the index agrees with the median (a sure job's index is about 1 / what is
    left), and J keeps its GPU."""
    jobs = view([1, 1], [8000.0, 8000.0], steps_done=[1000.0, 0.0], running_type=[0, -1], log_sd=SURE)

    share = Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share

    assert share[:, 0].tolist() == [1, 0]


def test_a_running_job_with_a_wide_prediction_is_ranked_again_when_it_would_fall_behind():
    """J (predicted 8000, log sd 3) runs with 100 done; K, predicted alike, waits (1 / its index:
    700). What J did counts at quarter doublings of 8000 × 2**-10; a quarter of J's rank first
    passes 700 at 8000 × 2**-5.25 = 210 done (1 / the index there: 2,962 GPU-s; at 2**-5.5, 2,707):
    the policy asks to be run again 110 s from now, and then K goes first."""
    jobs = view([1, 1], [8000.0, 8000.0], steps_done=[100.0, 0.0], running_type=[0, -1], log_sd=WIDE)
    policy = Qssf()
    assert policy.allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == [1, 0]

    assert policy.next_change_s(jobs, np.array([True, False])) == pytest.approx(8000 * 2**-5.25 - 100)
    for done, runs in ((209.0, [1, 0]), (211.0, [0, 1])):
        later = view([1, 1], [8000.0, 8000.0], steps_done=[done, 0.0], running_type=[0, -1], log_sd=WIDE)
        assert Qssf().allocate(later, gpus(1), one_step_a_second(later)).share[:, 0].tolist() == runs


def test_the_durations_option_is_checked_and_named():
    assert make_policy("srtf", durations="predicted").durations == "predicted"
    assert make_policy("srtf").durations == "oracle" and make_policy("qssf").durations == "predicted"
    assert make_policy("finish-time-fairness", durations="predicted").durations == "predicted"
    with pytest.raises(ValueError, match="--durations must be one of predicted, oracle, got 'guess'"):
        make_policy("qssf", durations="guess")


def test_finish_time_fairness_on_predicted_durations_solves_for_the_predicted_work():
    """Three one-GPU jobs, a v100 and a k80, all truly 3000 steps from done. Predicted, nothing done
    yet, a job's steps to go are its predicted GPU-seconds at its fastest speed: 30000 × 4,
    1000 × 2 and 3000 × 3. The allocation is the one for that work, not for the truth."""
    jobs = view([1, 1, 1], [30000.0, 1000.0, 3000.0], total_steps=[3000.0] * 3)
    jobs = replace(jobs, submit_time_s=np.array([0.0, 5000.0, 9000.0]), now_s=10000.0)
    cluster = ClusterView(("v100", "k80"), np.array([1, 1]), np.full(2, np.nan))
    speeds = ThroughputView(np.array([[4.0, 1.0], [2.0, 1.0], [3.0, 1.0]]))

    predicted = make_policy("finish-time-fairness", durations="predicted").allocate(jobs, cluster, speeds).share
    believed = replace(jobs, total_steps=np.array([120000.0, 2000.0, 9000.0]))
    as_if_true = make_policy("finish-time-fairness").allocate(believed, cluster, speeds).share
    truth = make_policy("finish-time-fairness").allocate(jobs, cluster, speeds).share

    assert predicted == pytest.approx(as_if_true, abs=1e-6)
    assert np.abs(predicted - truth).max() > 0.05


def with_sample(jobs: JobView, values) -> JobView:
    """``jobs``, each ranked by one group's sample of finished jobs' GPU-seconds, ``values``."""
    from apportion.core.duration_samples import DurationSamples

    samples = DurationSamples(least=1)
    samples.observe(np.zeros((len(values), 1), dtype=np.int64), values)
    return replace(jobs, sample_group=np.zeros(len(jobs), dtype=np.int64), duration_samples=samples)


def test_ranked_by_a_sample_a_running_job_yields_to_one_believed_to_need_less_than_half():
    """The group's jobs took 100 or 1,000 GPU-s, half each. L runs with 256 done: only the
    1,000s are left in its sample (744 to go). A newcomer's rank (1 / its index) is 200: a
    fresh job of the group asks for 100, which half finish, at 100 each. Less than half of 744:
    it goes first (the lognormal's margin, a quarter, would keep L: 186). With 700 done, counted
    at 2**9.25 = 609 GPU-s (391 to go), L keeps its GPU: 200 is more than half of 391."""
    sample = [100.0] * 10 + [1000.0] * 10
    for done, runs in ((256.0, [0, 1]), (700.0, [1, 0])):
        jobs = with_sample(view([1, 1], [5000.0, 5000.0], steps_done=[done, 0.0], running_type=[0, -1]), sample)
        assert Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == runs, done


def with_ratios(jobs: JobView, estimated, ratios, *, least: int = 1) -> JobView:
    """``jobs`` with their own estimates and the finished estimated jobs' ``ratios`` actual ÷ estimate."""
    from apportion.core.estimate_ratios import EstimateRatios

    sample = EstimateRatios(least=least)
    sample.observe(100.0 * np.asarray(ratios, dtype=float), np.full(len(ratios), 100.0))
    return replace(jobs, estimated_gpu_s=np.asarray(estimated, dtype=float), estimate_ratios=sample)


def test_past_its_estimate_a_running_job_is_believed_one_of_the_estimates_ten_times_short():
    """Three of four estimates were right, one ten times short. L, estimated at 100, runs with 150
    done (counted at 100 × 2**0.5): it is the ten-times one, 859 to go (429 with the margin of a
    half). A newcomer estimated
    at 300 asks for 300 × 4/3 = 400: it goes first (``estimate_ratios``). By its lognormal (100, sure:
    the default and ``lognormal``) L has about as much again to go as it did, a quarter of that with
    the lognormal's margin: L keeps its GPU. So it does below the 20 ratios the sample needs."""
    ratios = [1.0, 1.0, 1.0, 10.0] * 5
    base = view([1, 1], [100.0, 300.0], steps_done=[150.0, 0.0], running_type=[0, -1])
    jobs = with_ratios(base, [100.0, 300.0], ratios)
    few = with_ratios(base, [100.0, 300.0], ratios[:19], least=20)

    ratios = Qssf(estimate_ratios=True)
    assert ratios.rank_key(jobs, one_step_a_second(jobs)).tolist() == pytest.approx([1000.0 - 100.0 * 2 ** 0.5, 400.0])
    assert ratios.allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == [0, 1]
    assert Qssf().allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == [1, 0]  # the default
    assert Qssf(lognormal=True).allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == [1, 0]
    assert ratios.allocate(few, gpus(1), one_step_a_second(few)).share[:, 0].tolist() == [1, 0]


def test_ranked_by_the_ratios_a_running_job_is_ranked_again_where_it_would_fall_behind():
    """The same ratios; L (estimated at 100) runs with 10 done and keeps its GPU against a newcomer
    estimated at 300 (400): short of its estimate it ranks about 100 ÷ 2. At 100 done it is one of
    the ten-times ones (900 to go): it is ranked again then, 90 s on, and not before."""
    ratios = [1.0, 1.0, 1.0, 10.0] * 5
    base = view([1, 1], [100.0, 300.0], steps_done=[10.0, 0.0], running_type=[0, -1])
    jobs = with_ratios(base, [100.0, 300.0], ratios)
    policy = Qssf(estimate_ratios=True)

    assert policy.allocate(jobs, gpus(1), one_step_a_second(jobs)).share[:, 0].tolist() == [1, 0]
    at = policy.next_change_s(jobs, np.array([True, False]))
    assert at == pytest.approx(90.0)  # at 100 GPU-s done (its estimate): counted as one of the ten-times ones


@pytest.mark.parametrize("spec", ["qssf:lognormal:estimate-ratios", "qssf:median-left:estimate-ratios",
                                  "qssf:non-preemptive:estimate-ratios"])
def test_the_estimates_ratios_are_refused_beside_a_form_that_ranks_by_no_index(spec):
    with pytest.raises(ValueError, match="cannot be combined"):
        make_policy(spec)
