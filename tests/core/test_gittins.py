"""The Gittins index of a predicted (lognormal) duration: shortest-first when the prediction is
sure, least-attained-service-first when it is wide."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from apportion.core.gittins import service_per_finish


def inverse_index(median: float, sd: float, done: float) -> float:
    """1 / the Gittins index worked out directly: the least, over the stretch's end b, of the
    expected service from ``done`` to b over the chance of finishing by then (both given ``done``:
    the integral of the survival function from ``done`` to b over the fall in it)."""
    law = stats.lognorm(s=sd, scale=median)

    def ratio(log_b: float) -> float:
        b = done + math.exp(log_b)
        service, _ = integrate.quad(law.sf, done, b, limit=200)
        return service / max(law.sf(done) - law.sf(b), 1e-300)

    grid = np.log(median) + np.linspace(-5.0, 5.0, 60)
    start = grid[int(np.argmin([ratio(x) for x in grid]))]
    return optimize.minimize_scalar(ratio, bounds=(start - 0.2, start + 0.2), method="bounded").fun


def one(median, sd, done):
    return float(service_per_finish(np.array([median]), np.array([sd]), np.array([done]))[0])


@pytest.mark.parametrize("sd, done", [(0.1, 0.0), (1.0, 0.0), (1.0, 250.0), (2.0, 0.0), (2.0, 500.0), (3.0, 125.0)])
def test_the_table_agrees_with_the_index_worked_out_directly(sd, done):
    """Median 1000 GPU-s; ``done`` sits on a quarter doubling of the median, where it is counted."""
    assert one(1000.0, sd, done) == pytest.approx(inverse_index(1000.0, sd, done), rel=0.02)


def test_a_sure_prediction_ranks_by_about_the_median_left():
    """Log sd 0.1: nothing done, about the median (1000); half done, about the half left."""
    assert one(1000.0, 0.1, 0.0) == pytest.approx(1000.0, rel=0.01)
    assert one(1000.0, 0.1, 500.0) == pytest.approx(505.0, rel=0.01)


def test_with_a_wide_prediction_the_job_that_did_less_ranks_first():
    """Log sd 3 (60 s and 10 hours alike): a job that has run without finishing is likely a long
    one, so 1 / its index grows with what it did, where a sure prediction's falls."""
    done = np.array([0.0, 125.0, 1000.0, 8000.0])
    wide = service_per_finish(np.full(4, 1000.0), np.full(4, 3.0), done)
    sure = service_per_finish(np.full(3, 1000.0), np.full(3, 0.1), done[:3])

    assert np.all(np.diff(wide) > 0)
    assert np.all(np.diff(sure) < 0)


def test_it_scales_with_the_median_and_counts_what_was_done_at_quarter_doublings():
    """Twice the median and twice the done: twice the rank. Between two quarter doublings of the
    median (1000 × 2**-2 = 250 and 1000 × 2**-1.75 = 297) the rank does not change."""
    assert one(2000.0, 2.0, 500.0) == pytest.approx(2 * one(1000.0, 2.0, 250.0))
    assert one(1000.0, 2.0, 250.0) == one(1000.0, 2.0, 290.0) != one(1000.0, 2.0, 298.0)
