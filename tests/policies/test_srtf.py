"""SRTF: the job with the least time left, at its fastest speed, runs first."""

import numpy as np

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.srtf import Srtf


def view(submit, num_gpus, total_steps, steps_done, running_type=None) -> JobView:
    n = len(submit)
    return JobView(
        index=np.arange(n),
        submit_time_s=np.asarray(submit, dtype=float),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus),
        priority=np.ones(n),
        total_steps=np.asarray(total_steps, dtype=float),
        steps_done=np.asarray(steps_done, dtype=float),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object),
        now_s=0.0,
    )


ONE_GPU = ClusterView(("v100", "k80"), np.array([1, 0]), np.full(2, np.nan))


def test_rank_is_remaining_steps_over_the_fastest_speed():
    # job 0: 1000 left at best 10/s = 100 s; job 1: 300 left at best 1/s = 300 s;
    # job 2: 900 of 1000 done, 100 left at best 2/s = 50 s; job 3 runs nowhere = inf
    jobs = view([0, 1, 2, 3], [1, 1, 1, 1], [1000, 300, 1000, 10], [0, 0, 900, 0])
    steps = np.array([[10.0, 2.0], [1.0, 0.5], [1.0, 2.0], [0.0, 0.0]])

    key = Srtf().rank_key(jobs, ThroughputView(steps))

    assert key.tolist() == [100.0, 300.0, 50.0, np.inf]


def test_the_shortest_job_gets_the_one_gpu():
    jobs = view([0, 1, 2], [1, 1, 1], [1000, 300, 1000], [0, 0, 900])
    steps = np.array([[10.0, 0.0], [1.0, 0.0], [2.0, 0.0]])

    share = Srtf().allocate(jobs, ONE_GPU, ThroughputView(steps)).share

    assert share[:, 0].tolist() == [0, 0, 1]  # job 2: 50 s left


def test_a_shorter_newcomer_preempts_a_running_job():
    # job 0 runs with 500 s left; job 1 arrives needing 100 s: SRTF is preemptive
    jobs = view([0, 60], [1, 1], [1000, 100], [500, 0], running_type=[0, -1])
    share = Srtf().allocate(jobs, ONE_GPU, ThroughputView(np.array([[1.0, 0.0], [1.0, 0.0]]))).share

    assert share[:, 0].tolist() == [0, 1]


def test_ties_go_to_the_earlier_submission():
    jobs = view([5, 0], [1, 1], [100, 100], [0, 0])
    share = Srtf().allocate(jobs, ONE_GPU, ThroughputView(np.array([[1.0, 0.0], [1.0, 0.0]]))).share

    assert share[:, 0].tolist() == [0, 1]


def test_a_job_pushed_off_its_type_moves_to_a_free_one_instead_of_waiting():
    """Current behaviour, worth knowing: job 0 (long) runs on the v100; job 1 (short) arrives
    and is ranked first, so it takes the v100 (its fastest). Job 0 cannot keep its type and
    takes the free k80 rather than wait: an ordering policy does migrate a displaced job."""
    two_types = ClusterView(("v100", "k80"), np.array([1, 1]), np.full(2, np.nan))
    jobs = view([0, 60], [1, 1], [10000, 100], [0, 0], running_type=[0, -1])
    steps = np.array([[2.0, 1.0], [2.0, 1.0]])

    share = Srtf().allocate(jobs, two_types, ThroughputView(steps)).share

    assert share.tolist() == [[0, 1], [1, 0]]
