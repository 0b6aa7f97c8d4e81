"""Estimated jobs ranked by their own estimate × the Gittins index over how wrong the finished jobs'
estimates were (actual ÷ estimate), not by a lognormal that cannot hold heavy error tails."""

import numpy as np
import pytest

from apportion.core.durations import DurationPredictor
from apportion.core.estimate_ratios import EstimateRatios


def told(ratios, *, least: int = 4) -> EstimateRatios:
    sample = EstimateRatios(least=least)
    estimated = np.full(len(ratios), 100.0)
    sample.observe(estimated * np.asarray(ratios, dtype=float), estimated)
    return sample


def test_ratios_one_one_one_ten_rank_a_fresh_job_at_four_thirds_of_its_estimate_and_nine_times_past_it():
    """Ratios {1, 1, 1, 10}, estimate 100. Fresh: asking for 100 finishes 3 of 4 for 4 × 100 of
    service: 133.3 a finish. Having done 100, it is the one that takes 10 ×: 900 to go."""
    sample = told([1.0, 1.0, 1.0, 10.0])

    keys = sample.keys(np.array([100.0, 100.0, 1000.0]), np.array([0.0, 100.0, 0.0]))

    assert keys.tolist() == pytest.approx([100.0 * 4 / 3, 900.0, 1000.0 * 4 / 3])  # scales with the estimate


def test_below_least_ratios_there_is_no_rank_and_the_sample_is_not_ready():
    sample = told([1.0] * 19, least=20)

    assert not sample.ready
    assert np.isnan(sample.keys(np.array([100.0]), np.array([0.0]))).all()
    sample.observe(np.array([np.nan, 100.0]), np.array([100.0, np.nan]))  # no ratio without both
    assert sample.seen == 19
    sample.observe(np.array([100.0]), np.array([100.0]))
    assert sample.ready and sample.keys(np.array([100.0]), np.array([0.0]))[0] == pytest.approx(100.0)


def test_the_sample_keeps_the_most_recent_window_and_the_index_follows_it():
    sample = EstimateRatios(window=4, least=1)
    sample.observe(np.full(4, 1000.0), np.full(4, 100.0))  # four 10×
    assert sample.keys(np.array([100.0]), np.array([0.0]))[0] == pytest.approx(1000.0)
    sample.observe(np.full(6, 100.0), np.full(6, 100.0))  # then six 1×: the 10× ones have left it
    assert sample.sample().tolist() == [1.0] * 4
    assert sample.keys(np.array([100.0]), np.array([0.0]))[0] == pytest.approx(100.0)


def test_the_predictor_keeps_ratios_once_asked_and_only_of_jobs_told_finished_with_an_estimate():
    predictor = DurationPredictor(((),))
    groups = predictor.groups(user=None, name=None, queue=None, num_gpus=np.ones(3, dtype=np.int64),
                              submit_time_s=np.zeros(3))
    predictor.observe(groups[:1], np.array([50.0]), np.array([100.0]))  # before: not kept
    ratios = predictor.keep_estimate_ratios()
    predictor.observe(groups[1:], np.array([300.0, 70.0]), np.array([100.0, np.nan]))

    assert predictor.keep_estimate_ratios() is ratios
    assert ratios.seen == 1 and ratios.sample().tolist() == [3.0]


def test_checkpoints_are_where_a_jobs_key_can_change():
    sample = told([1.0, 1.0, 1.0, 10.0])
    estimated, done = np.array([100.0]), np.array([30.0])
    at = EstimateRatios.checkpoints(estimated, done, 8)[0]

    assert (at > done[0]).all() and np.all(np.diff(at) > 0)
    before, after = sample.keys(np.full(8, 100.0), at * (1 - 1e-9)), sample.keys(np.full(8, 100.0), at)
    between = sample.keys(np.full(7, 100.0), np.sqrt(at[:-1] * at[1:]))
    assert between.tolist() == pytest.approx(after[:-1].tolist())  # no change between two checkpoints
    assert sample.keys(np.array([100.0]), done)[0] == pytest.approx(before[0])
