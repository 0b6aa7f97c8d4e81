"""Finish-time fairness's warm model against the same LP solved cold, over rounds with arrivals,
departures and progress."""

from __future__ import annotations

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.finish_time_fairness import FinishTimeFairness


def jobs_view(index, gpus, total, done, submit, now):
    n = len(index)
    return JobView(
        index=np.asarray(index), submit_time_s=np.asarray(submit, float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(gpus), priority=np.ones(n), total_steps=np.asarray(total, float),
        steps_done=np.asarray(done, float), attained_service_s=np.zeros(n), first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1), queue=np.full(n, "", dtype=object), user=np.full(n, "", dtype=object),
        now_s=now,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_model_reaches_the_cold_optimum_round_after_round(seed):
    rng = np.random.default_rng(seed)
    num_jobs = 80
    speeds = rng.uniform(0.2, 1.0, size=(1, 3)) * rng.lognormal(0.0, 0.5, size=(num_jobs, 3))
    speeds[rng.random((num_jobs, 3)) < 0.1] = 0.0  # some jobs cannot run on some types
    speeds[:, 0] = np.maximum(speeds[:, 0], 0.1)
    gpus = rng.choice([1, 1, 1, 2, 4], num_jobs)
    total = rng.uniform(1e3, 2e4, num_jobs)
    submit = np.sort(rng.uniform(0, 20_000, num_jobs))
    done = np.zeros(num_jobs)
    cluster = ClusterView(("v100", "p100", "k80"), np.array([6.0, 5.0, 4.0]), np.full(3, np.nan))
    warm, cold = FinishTimeFairness(), FinishTimeFairness()
    runs = 0
    for now in np.arange(1_000.0, 30_000.0, 1_500.0):
        active = np.flatnonzero((submit <= now) & (done < total))
        if not len(active):
            continue
        jobs = jobs_view(active, gpus[active], total[active], done[active], submit[active], now)
        throughputs = ThroughputView(speeds[active])
        value = throughputs.normalised(cluster.capacity)
        got = warm.solve(jobs, cluster, throughputs, value)
        want = cold.solve_cold(jobs, cluster, throughputs, value)
        assert warm.worst_ratio == cold.worst_ratio
        assert (value * got.share).sum() == pytest.approx((value * want.share).sum(), rel=1e-9, abs=1e-12)
        done[active] = np.minimum(total[active], done[active] + 1_500.0 * (got.share * speeds[active]).sum(axis=1))
        runs += 1
    assert runs >= 10
    assert warm._model is not None and (~warm._model.live).any()  # departures were retired in place


def test_a_job_whose_speeds_change_gets_new_columns():
    cluster = ClusterView(("v100",), np.array([1.0]), np.full(1, np.nan))
    jobs = jobs_view([0, 1], [1, 1], [300, 200], [0, 100], [100, 0], 100.0)
    warm, cold = FinishTimeFairness(), FinishTimeFairness()
    for steps in (np.array([[1.0], [2.0]]), np.array([[1.0], [3.0]])):
        throughputs = ThroughputView(steps)
        value = throughputs.normalised(cluster.capacity)
        warm.solve(jobs, cluster, throughputs, value)
        cold.solve_cold(jobs, cluster, throughputs, value)
        assert warm.worst_ratio == cold.worst_ratio
