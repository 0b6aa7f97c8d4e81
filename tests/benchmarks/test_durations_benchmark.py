"""The per-VC durations benchmark's own accounting: where qssf with estimates loses to the oracle, and
the estimates believed exactly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy" / "durations.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("durations_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_extra_jct_is_summed_by_how_wrong_each_estimate_was_and_adds_up_to_the_averages_difference(bench):
    """Four jobs: one estimated 4x too short (10 s sooner than the oracle), two within 2x (+2 s, -2 s),
    one 10x too long (+30 s): per job of the four, -2.5, 0 and +7.5 s; together the 5 s by which the
    averages differ."""
    extra = np.array([-10.0, 2.0, -2.0, 30.0])
    bands = bench.extra_by_error(extra, np.array([0.25, 1.5, 0.6, 10.0]))
    assert bands == {"over 2x too short": {"jobs": 1, "avg_jct_s": -2.5},
                     "within 2x": {"jobs": 2, "avg_jct_s": 0.0},
                     "over 2x too long": {"jobs": 1, "avg_jct_s": 7.5}}
    assert sum(b["avg_jct_s"] for b in bands.values()) == pytest.approx(extra.mean())


def test_a_job_that_did_not_finish_in_one_replay_is_left_out_of_the_bands(bench):
    bands = bench.extra_by_error(np.array([4.0, np.nan]), np.array([1.0, 3.0]))
    assert bands["within 2x"] == {"jobs": 1, "avg_jct_s": 4.0} and bands["over 2x too long"]["jobs"] == 0


def test_estimates_taken_as_true_are_read_as_they_are_whatever_the_finished_jobs_say(bench):
    """Estimates always 2x too long: the corrected one learns to halve them, the one taken as true does not."""
    corrected, as_true = bench.EstimateBias(), bench.TakenAsTrue()
    for bias in (corrected, as_true):
        bias.observe(np.full(40, 100.0), np.full(40, 200.0), np.zeros(40, dtype=np.int64))
    assert corrected.correct(np.array([200.0]))[0][0] == pytest.approx(200.0 * 2 ** -(40 / 41), rel=1e-6)
    gpu_s, log_sd = as_true.correct(np.array([200.0]))
    assert gpu_s.tolist() == [200.0] and log_sd.tolist() == [as_true.min_log_sd]
