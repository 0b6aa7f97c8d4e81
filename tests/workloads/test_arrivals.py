"""Both generated workloads (synthetic, elastic) check their size and draw arrivals the same way."""

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.workloads.arrivals import checked_size, poisson_arrivals
from apportion.workloads.elastic_workload import generate_elastic_workload


@pytest.mark.parametrize("jobs, rate, field", [(0, 10.0, "jobs"), (2.5, 10.0, "jobs"), (True, 10.0, "jobs"),
                                               (5, 0.0, "rate_per_hour"), (5, float("nan"), "rate_per_hour")])
def test_a_bad_size_or_rate_names_the_field(jobs, rate, field):
    with pytest.raises(InputError, match=field):
        checked_size("some workload", jobs, rate)


def test_arrivals_start_at_zero_and_come_a_mean_gap_apart():
    submit = poisson_arrivals(np.random.default_rng(0), 20_000, rate_per_hour=36.0)
    assert submit[0] == 0.0 and np.all(np.diff(submit) >= 0)
    assert np.diff(submit).mean() == pytest.approx(100.0, rel=0.03)


def test_the_elastic_workload_arrives_as_the_shared_draw_says():
    jobs = generate_elastic_workload(jobs=30, rate_per_hour=12.0, seed=4)
    assert np.array_equal(jobs.submit_time_s, poisson_arrivals(np.random.default_rng(4), 30, 12.0))
