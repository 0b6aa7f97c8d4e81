"""LAS (Tiresias' discretised 2D-LAS): jobs with less attained GPU-time run first."""

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.las import Las


def view(submit, num_gpus, attained, running_type=None) -> JobView:
    n = len(submit)
    return JobView(
        index=np.arange(n),
        submit_time_s=np.asarray(submit, dtype=float),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus),
        priority=np.ones(n),
        total_steps=np.full(n, 1e6),
        steps_done=np.zeros(n),
        attained_service_s=np.asarray(attained, dtype=float),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object),
        now_s=0.0,
    )


ONE_GPU = ClusterView(("v100",), np.array([1]), np.array([np.nan]))
RATES = ThroughputView(np.ones((2, 1)))


def test_queue_levels_are_cut_at_1_and_10_gpu_hours():
    las = Las()

    assert las.queue_level(np.array([0.0, 3599.0, 3600.0, 35999.0, 36000.0, 1e9])).tolist() == [0, 0, 1, 1, 2, 2]


def test_within_a_queue_the_earlier_job_keeps_running():
    # job 0 has run 1800 GPU-s (still under 1 GPU-hour); job 1 just arrived: same queue, job 0 first
    jobs = view([0, 1000], [1, 1], [1800.0, 0.0], running_type=[0, -1])

    assert Las().allocate(jobs, ONE_GPU, RATES).share[:, 0].tolist() == [1, 0]


def test_a_job_past_the_1_gpu_hour_threshold_drops_below_a_new_arrival():
    jobs = view([0, 1000], [1, 1], [3600.0, 0.0], running_type=[0, -1])

    assert Las().allocate(jobs, ONE_GPU, RATES).share[:, 0].tolist() == [0, 1]


def test_next_change_is_the_time_to_the_next_threshold():
    # a 2-GPU job at 1800 GPU-s reaches 3600 GPU-s after (3600 - 1800) / 2 = 900 s;
    # a 1-GPU job at 3000 GPU-s would take 600 s, but it is not running
    jobs = view([0, 1], [2, 1], [1800.0, 3000.0])

    assert Las().next_change_s(jobs, np.array([True, False])) == pytest.approx(900.0)
    assert Las().next_change_s(jobs, np.array([True, True])) == pytest.approx(600.0)


def test_next_change_uses_the_next_threshold_up_and_is_never_past_the_last():
    # a 4-GPU job at 2 GPU-hours is in queue 1; it reaches 10 GPU-hours in (36000 - 7200) / 4 = 7200 s
    jobs = view([0, 1], [4, 1], [7200.0, 36000.0])

    assert Las().next_change_s(jobs, np.array([True, False])) == pytest.approx(7200.0)
    assert Las().next_change_s(jobs, np.array([False, True])) == np.inf
    assert Las().next_change_s(jobs, np.array([False, False])) == np.inf


def test_custom_thresholds():
    las = Las(thresholds_gpu_s=(100.0,))
    jobs = view([0, 1], [1, 1], [150.0, 10.0], running_type=[0, -1])

    assert las.allocate(jobs, ONE_GPU, RATES).share[:, 0].tolist() == [0, 1]
    assert las.next_change_s(jobs, np.array([False, True])) == pytest.approx(90.0)
