"""The Gavel-shaped synthetic workload: Gavel's 1/2/4/8 mix and two duration bands, seeded."""

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.synthetic import generate_workload


def gavel(n=20_000, seed=0, shape="gavel"):
    return generate_workload(jobs=n, rate_per_hour=5, throughputs=builtin_throughputs(), seed=seed, shape=shape)


def v100_duration_s(jobs) -> np.ndarray:
    """Each job's duration on its own GPU count of v100s: steps / steps/s there."""
    table = builtin_throughputs().at_scales(jobs.num_gpus)
    v100 = table.gpu_types.index("v100")
    scale = np.searchsorted(np.asarray(table.scales), jobs.num_gpus)
    return jobs.total_steps / table.steps_per_s[jobs.kind, v100, scale]


def test_gpu_counts_are_gavels_mix():
    """Gavel: 70% one GPU, 10% two, 15% four, 5% eight (3 standard errors at 20,000 jobs ≈ 1%)."""
    jobs = gavel()
    share = [(jobs.num_gpus == g).mean() for g in (1, 2, 4, 8)]

    np.testing.assert_allclose(share, [0.70, 0.10, 0.15, 0.05], atol=0.01)


def test_durations_fall_in_gavels_two_bands():
    """20% long, 10^3 to 10^4 minutes; 80% short, 10^1.5 to 10^3 minutes, log-uniform in each."""
    minutes = v100_duration_s(gavel()) / 60.0

    assert minutes.min() >= 10**1.5 - 1e-6 and minutes.max() <= 10**4 + 1e-6
    long = minutes > 1000
    assert long.mean() == pytest.approx(0.2, abs=0.01)
    # log-uniform: the middle of each band in log10 splits it in halves
    assert (minutes[long] > 10**3.5).mean() == pytest.approx(0.5, abs=0.03)
    assert (minutes[~long] > 10**2.25).mean() == pytest.approx(0.5, abs=0.02)


def test_multi_gpu_jobs_get_only_kinds_that_run_at_their_size():
    jobs = gavel(2_000)
    table = builtin_throughputs().at_scales(jobs.num_gpus)
    v100 = table.gpu_types.index("v100")
    scale = np.searchsorted(np.asarray(table.scales), jobs.num_gpus)
    rate = table.steps_per_s[jobs.kind, v100, scale]

    assert np.all(np.isfinite(rate) & (rate > 0))
    assert len(np.unique(jobs.kind[jobs.num_gpus == 1])) == len(builtin_throughputs().kinds)


def test_one_gpu_variant_keeps_arrivals_and_durations():
    """gavel-1gpu draws the same numbers and only sets every job to one GPU."""
    mixed, single = gavel(2_000), gavel(2_000, shape="gavel-1gpu")

    assert np.all(single.num_gpus == 1)
    np.testing.assert_array_equal(single.submit_time_s, mixed.submit_time_s)
    np.testing.assert_allclose(v100_duration_s(single), v100_duration_s(mixed), rtol=1e-12)


def test_same_seed_same_workload_other_seed_another():
    a, b, c = gavel(500, seed=1), gavel(500, seed=1), gavel(500, seed=2)

    for column in ("submit_time_s", "kind", "num_gpus", "total_steps"):
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column))
    assert not np.array_equal(a.total_steps, c.total_steps)


def test_the_philly_shape_is_the_default_and_unchanged():
    table = builtin_throughputs()
    default = generate_workload(jobs=300, rate_per_hour=8, throughputs=table, seed=0)
    philly = generate_workload(jobs=300, rate_per_hour=8, throughputs=table, seed=0, shape="philly")

    np.testing.assert_array_equal(default.total_steps, philly.total_steps)


def test_unknown_shape_is_an_error():
    with pytest.raises(InputError, match="unknown shape 'alibaba'"):
        gavel(10, shape="alibaba")
