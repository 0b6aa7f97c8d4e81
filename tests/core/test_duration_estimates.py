"""A job's own estimate of its GPU time, corrected by how wrong the finished jobs' estimates were."""

import math

import numpy as np
import pytest

from apportion.core.duration_estimates import EstimateBias
from apportion.core.durations import DurationPredictor


def one_group_predictor() -> tuple[DurationPredictor, np.ndarray]:
    predictor = DurationPredictor((("gpus",), ()))
    predictor.keep_samples(least=1)
    groups = predictor.groups(user=None, name=None, queue=None, num_gpus=np.ones(12, dtype=np.int64),
                              submit_time_s=np.zeros(12))
    return predictor, groups


@pytest.mark.parametrize("n", [1, 3, 9])
def test_estimates_always_twice_too_long_are_halved_as_far_as_n_jobs_allow(n):
    """n jobs finished, each estimated at twice what it took: every log ratio is -log 2, so the bias is
    -log 2 × n/(n+1) and the spread 0, pulled from the prior 1.0 by (n-1)/n: 1/n left (floor 0.1)."""
    predictor, groups = one_group_predictor()
    took = np.array([50.0, 400.0, 70.0, 1000.0, 20.0, 300.0, 90.0, 60.0, 5000.0])[:n]
    predictor.observe(groups[:n], took, 2.0 * took)

    prediction = predictor.predict(groups[n:n + 2], np.array([800.0, np.nan]))

    assert prediction.gpu_s[0] == pytest.approx(800.0 * math.exp(-math.log(2.0) * n / (n + 1)))
    assert prediction.log_sd[0] == pytest.approx(max(1.0 / n, 0.1))
    assert prediction.estimated.tolist() == [True, False]
    # the job with an estimate is ranked by its own lognormal, the other by its group's sample
    assert prediction.sample_group[0] == -1 and prediction.sample_group[1] >= 0
    # without an estimate: the ladder, as before
    assert prediction.gpu_s[1] == pytest.approx(predictor.predict(groups[n + 1:n + 2]).gpu_s[0])


def test_before_any_estimate_was_checked_an_estimate_is_taken_as_it_is_with_the_prior_spread():
    predictor, groups = one_group_predictor()
    predictor.observe(groups[:3], np.array([10.0, 20.0, 30.0]))  # finished jobs without estimates teach no bias

    prediction = predictor.predict(groups[3:4], np.array([500.0]))

    assert prediction.gpu_s.tolist() == pytest.approx([500.0])
    assert prediction.log_sd.tolist() == pytest.approx([1.0])


def test_the_spread_of_the_ratios_is_the_uncertainty():
    """Ratios 1/2, 1, 2, 4, 8 (log2: -1 … 3): median 2, quartiles 1 and 4, so the spread is
    log(4) / 1.349; five jobs shrink the bias by 5/6 and pull the spread 4/5 of the way from 1.0."""
    bias = EstimateBias()
    estimated = np.full(5, 100.0)
    bias.observe(estimated * np.exp2([-1.0, 0.0, 1.0, 2.0, 3.0]), estimated)

    gpu_s, log_sd = bias.correct(np.array([100.0]))

    assert gpu_s[0] == pytest.approx(100.0 * 2.0 ** (5 / 6))
    assert log_sd[0] == pytest.approx(0.8 * math.log(4.0) / 1.349 + 0.2 * 1.0)


def test_only_the_most_recent_ratios_count():
    bias = EstimateBias(recent=4)
    bias.observe(np.full(6, 300.0), np.full(6, 100.0))  # 3 × too short, long ago
    bias.observe(np.full(4, 100.0), np.full(4, 100.0))  # right, lately
    assert bias.correct(np.array([100.0]))[0][0] == pytest.approx(100.0)


def two_user_predictor(jobs: int) -> tuple[DurationPredictor, np.ndarray, np.ndarray]:
    """A predictor whose ladder has a user level, and the groups of ``jobs`` jobs of alice then as many of bob."""
    predictor = DurationPredictor()
    users = np.array(["alice"] * jobs + ["bob"] * jobs, dtype=object)
    groups = predictor.groups(user=users, name=None, queue=None, num_gpus=np.ones(2 * jobs, dtype=np.int64),
                              submit_time_s=np.zeros(2 * jobs))
    return predictor, groups[:jobs], groups[jobs:]


@pytest.mark.parametrize("n", [1, 3, 9])
def test_a_users_estimates_always_twice_too_long_are_halved_as_far_as_their_own_n_jobs_allow(n):
    """Bob's estimates were exact on 40 jobs, so the cluster's correction is 0; alice's were each twice
    what her job took: her median log ratio is -log 2, shrunk towards the cluster's 0 by n/(n+1)."""
    predictor, alice, bob = two_user_predictor(40)
    took = np.linspace(50.0, 5000.0, 40)
    predictor.observe(bob, took, took)
    predictor.observe(alice[:n], took[:n], 2.0 * took[:n])

    gpu_s, _ = predictor.predict_gpu_s(np.stack([alice[0], bob[0]]), np.array([800.0, 800.0]))

    assert gpu_s[0] == pytest.approx(800.0 * 2.0 ** (-n / (n + 1)))
    assert gpu_s[1] == pytest.approx(800.0)  # bob's read as his own record says: exact


def test_a_liars_estimates_are_read_as_theirs_and_leave_an_honest_users_as_they_were():
    """Alice says every job takes a hundredth of what it does; bob is honest; carol has finished none.
    Read alone, alice's lies would make the cluster's correction × ~100 for everyone; per user, hers
    are stretched by nearly all of it, bob's are read by his own exact record, and carol's as given."""
    predictor = DurationPredictor()
    users = np.array(["alice"] * 30 + ["bob"] * 9 + ["carol"], dtype=object)
    groups = predictor.groups(user=users, name=None, queue=None, num_gpus=np.ones(40, dtype=np.int64),
                              submit_time_s=np.zeros(40))
    alice, bob, carol = groups[:30], groups[30:39], groups[39:]
    took = np.full(30, 1000.0)
    predictor.observe(bob, took[:9], took[:9])
    predictor.observe(alice, took, took / 100.0)
    assert math.exp(predictor.estimates.learnt()[0]) > 50  # everyone's ratios: mostly alice's

    gpu_s, log_sd = predictor.predict_gpu_s(np.stack([alice[0], bob[0], carol[0]]), np.array([10.0, 1000.0, 1000.0]))

    assert gpu_s[0] > 500.0  # her 10 s is read as most of the 1,000 s her jobs take
    assert gpu_s[1:].tolist() == pytest.approx([1000.0, 1000.0])
    assert log_sd[2] == pytest.approx(predictor.estimates.prior_log_sd)  # carol's: as given, the prior's spread


def test_without_users_every_estimate_is_read_by_the_cluster_wide_correction():
    predictor, groups = one_group_predictor()  # its ladder has no user level
    predictor.observe(groups[:4], np.full(4, 300.0), np.full(4, 100.0))
    assert predictor.users_of(groups) is None
    gpu_s, _ = predictor.predict_gpu_s(groups[4:5], np.array([100.0]))
    assert gpu_s[0] == pytest.approx(100.0 * 3.0 ** (4 / 5))


def test_a_users_own_ratios_are_bounded_to_the_most_recent():
    bias = EstimateBias(recent=4)
    users = np.zeros(10, dtype=np.int64)
    bias.observe(np.full(10, 300.0), np.full(10, 100.0), users)
    assert len(bias._users[0].values()) == 4
