"""The synthetic generator: seeded, and shaped like the Philly trace."""

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.synthetic import GPU_COUNT_PROBABILITIES, generate_workload


def throughputs() -> ThroughputTable:
    """Two kinds that scale linearly on v100 (duration = steps / (rate x GPUs)); one that cannot run there."""
    nan = np.nan
    return ThroughputTable(
        kinds=("fast/bs1", "slow/bs1", "k80only/bs1"),
        gpu_types=("k80", "v100"),
        scales=(1, 2, 4, 8),
        steps_per_s=np.array(
            [
                [[1.0, 2.0, 4.0, 8.0], [4.0, 8.0, 16.0, 32.0]],
                [[0.5, 1.0, 2.0, 4.0], [2.0, 4.0, 8.0, 16.0]],
                [[1.0, 2.0, 4.0, 8.0], [nan, nan, nan, nan]],
            ]
        ),
    )


def durations(jobs) -> np.ndarray:
    """Recover each job's duration on v100: steps / (one-GPU rate x GPUs)."""
    one_v100 = np.array([4.0, 2.0, np.nan])
    return jobs.total_steps / (one_v100[jobs.kind] * jobs.num_gpus)


def test_same_seed_same_workload_other_seed_another():
    a = generate_workload(jobs=500, rate_per_hour=30, throughputs=throughputs(), seed=3)
    b = generate_workload(jobs=500, rate_per_hour=30, throughputs=throughputs(), seed=3)
    c = generate_workload(jobs=500, rate_per_hour=30, throughputs=throughputs(), seed=4)

    for column in ("submit_time_s", "kind", "num_gpus", "total_steps"):
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column))
    assert not np.array_equal(a.total_steps, c.total_steps)


def test_columns_look_as_documented():
    jobs = generate_workload(jobs=1000, rate_per_hour=30, throughputs=throughputs())

    assert list(jobs.job_id[:2]) == ["job-000001", "job-000002"]
    assert jobs.job_id[-1] == "job-001000"
    assert jobs.submit_time_s[0] == 0.0
    assert jobs.kinds == throughputs().kinds
    assert set(jobs.kind.tolist()) == {0, 1}  # never the kind with no v100 number
    assert set(jobs.user.tolist()) == {""} and set(jobs.queue.tolist()) == {""}
    assert np.all(jobs.priority == 1.0)


def test_100k_jobs_follow_the_stated_distributions():
    jobs = generate_workload(jobs=100_000, rate_per_hour=120, throughputs=throughputs(), seed=0)

    # GPU counts: Philly's 1:76,627 2:1,818 4:1,870 8:1,643, renormalised (93.5% single-GPU)
    share = np.array([np.mean(jobs.num_gpus == g) for g in (1, 2, 4, 8)])
    np.testing.assert_allclose(share, GPU_COUNT_PROBABILITIES, atol=0.003)
    assert share[0] == pytest.approx(76_627 / 81_958, abs=0.003)

    # durations: lognormal with median 1,144 s and p90 11,265 s, clipped to [60 s, 30 days]
    seconds = durations(jobs)
    assert np.median(seconds) == pytest.approx(1_144, rel=0.03)
    assert np.percentile(seconds, 90) == pytest.approx(11_265, rel=0.05)
    assert seconds.min() >= 60 - 1e-6 and seconds.max() <= 30 * 86_400 + 1e-3

    # arrivals: Poisson at 120 jobs/hour, so gaps average 30 s
    assert np.mean(np.diff(jobs.submit_time_s)) == pytest.approx(30, rel=0.02)


@pytest.mark.parametrize(
    "arguments, field",
    [({"jobs": 0, "rate_per_hour": 1}, "jobs"), ({"jobs": 10, "rate_per_hour": 0}, "rate_per_hour")],
)
def test_bad_arguments(arguments, field):
    with pytest.raises(InputError) as caught:
        generate_workload(throughputs=throughputs(), **arguments)
    assert caught.value.field == field


def test_unknown_reference_type_lists_the_known_ones():
    with pytest.raises(InputError, match=r"known: k80, v100"):
        generate_workload(jobs=10, rate_per_hour=1, throughputs=throughputs(), reference_gpu_type="a100")
