"""FIFO, and the whole-GPU allocation in rank order that every ordering policy shares."""

import numpy as np

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import allocate_in_order
from apportion.policies.fifo import Fifo


def view(submit, num_gpus, running_type=None, **columns) -> JobView:
    n = len(submit)
    defaults = dict(
        index=np.arange(n),
        submit_time_s=np.asarray(submit, dtype=float),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus),
        priority=np.ones(n),
        total_steps=np.full(n, 1000.0),
        steps_done=np.zeros(n),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object),
        now_s=100.0,
    )
    defaults.update(columns)
    return JobView(**defaults)


def cluster(*capacity) -> ClusterView:
    types = ("v100", "p100", "k80")[: len(capacity)]
    return ClusterView(types, np.asarray(capacity), np.full(len(capacity), np.nan))


def sequential(order, num_gpus, steps_per_s, capacity, *, agnostic=False, current_type=None):
    """The reference: each job in order takes its best type that still has room."""
    n, types = steps_per_s.shape
    share = np.zeros((n, types))
    left = list(capacity)
    for j in order:
        if agnostic:
            preference = list(range(types))
        else:  # fastest first, ties to the earlier type
            preference = sorted(range(types), key=lambda t: -steps_per_s[j, t])
        preference = [t for t in preference if steps_per_s[j, t] > 0]
        if current_type is not None and current_type[j] >= 0:
            preference = [current_type[j]] + [t for t in preference if t != current_type[j]]
        for t in preference:
            if left[t] >= num_gpus[j]:
                share[j, t] = 1.0
                left[t] -= num_gpus[j]
                break
    return share


def test_allocate_in_order_by_hand():
    # capacity v100:4, k80:4; all jobs are faster on v100 (type 0) except job 3
    steps = np.array([[4.0, 1.0], [4.0, 1.0], [4.0, 1.0], [1.0, 3.0], [4.0, 0.0]])
    share = allocate_in_order(np.arange(5), np.array([2, 4, 2, 1, 1]), steps, np.array([4, 4]))

    # job 0: v100 (2 left); job 1 (4) does not fit v100 -> k80 (0 left);
    # job 2: v100 (0 left); job 3 wants k80, full -> v100 full -> waits; job 4 only v100 -> waits
    assert share.tolist() == [[1, 0], [0, 1], [1, 0], [0, 0], [0, 0]]


def test_allocate_in_order_equals_the_sequential_loop_on_random_instances():
    rng = np.random.default_rng(2024)
    for case in range(600):
        n, types = int(rng.integers(1, 40)), int(rng.integers(2, 4))
        num_gpus = rng.choice([1, 2, 4, 8], size=n)
        steps = rng.uniform(0.5, 5.0, size=(n, types)) * (rng.uniform(size=(n, types)) < 0.8)
        if case % 5 == 0:
            steps = np.round(steps)  # ties between types
        capacity = rng.integers(0, 17, size=types)
        order = rng.permutation(n)
        current = None
        if case % 2:  # some jobs already run on one of their runnable types
            current = np.full(n, -1)
            for j in range(n):
                runnable = np.flatnonzero(steps[j] > 0)
                if len(runnable) and rng.uniform() < 0.4:
                    current[j] = rng.choice(runnable)
        agnostic = case % 3 == 0

        got = allocate_in_order(order, num_gpus, steps, capacity, agnostic=agnostic, current_type=current)
        want = sequential(order, num_gpus, steps, capacity, agnostic=agnostic, current_type=current)

        np.testing.assert_array_equal(got, want, err_msg=f"case {case}")
        assert np.all((got * num_gpus[:, None]).sum(axis=0) <= capacity)


def test_fifo_runs_jobs_in_submission_order_on_their_fastest_type():
    jobs = view(submit=[0, 10, 20], num_gpus=[1, 1, 1])
    steps = np.array([[3.0, 1.0], [3.0, 1.0], [3.0, 1.0]])
    share = Fifo().allocate(jobs, cluster(1, 1), ThroughputView(steps)).share

    # first job gets the fast v100, the second the slower p100, the third waits
    assert share.tolist() == [[1, 0], [0, 1], [0, 0]]


def test_fifo_never_preempts_a_running_job_for_a_later_one():
    # job 0 runs on the only GPU; job 1 arrives later
    jobs = view(submit=[0, 50], num_gpus=[1, 1], running_type=[0, -1])
    share = Fifo().allocate(jobs, cluster(1), ThroughputView(np.array([[1.0], [5.0]]))).share

    assert share.tolist() == [[1], [0]]


def test_fifo_does_not_preempt_even_for_an_earlier_waiting_job():
    # job 1 (2 GPUs) runs; job 0 (4 GPUs, submitted first) cannot fit beside it and must wait
    jobs = view(submit=[0, 50], num_gpus=[4, 2], running_type=[-1, 0])
    share = Fifo().allocate(jobs, cluster(4), ThroughputView(np.array([[1.0], [1.0]]))).share

    assert share.tolist() == [[0], [1]]


def test_fifo_lets_a_smaller_later_job_use_gpus_the_first_cannot():
    jobs = view(submit=[0, 10], num_gpus=[8, 2])
    share = Fifo().allocate(jobs, cluster(4), ThroughputView(np.array([[1.0], [1.0]]))).share

    assert share.tolist() == [[0], [1]]


# One v100 (type 0) and one k80 (type 1); the kind runs 5 steps/s on a v100 and 1 on a k80.
V100_K80 = np.array([[5.0, 1.0]])


def test_a_long_job_on_a_k80_moves_to_a_free_v100():
    """1000 steps left: 1000 s on the k80, 200 s + 10 s restart on the v100: it moves."""
    jobs = view(submit=[0], num_gpus=[1], running_type=[1])
    share = Fifo(restart_cost_s=10.0).allocate(jobs, cluster(1, 1), ThroughputView(V100_K80)).share

    assert share.tolist() == [[1, 0]]


def test_a_job_close_to_done_stays_where_it_is():
    """10 steps left: 10 s on the k80, 2 s + 10 s restart on the v100: moving would lose 2 s."""
    jobs = view(submit=[0], num_gpus=[1], running_type=[1], steps_done=np.array([990.0]))
    share = Fifo(restart_cost_s=10.0).allocate(jobs, cluster(1, 1), ThroughputView(V100_K80)).share

    assert share.tolist() == [[0, 1]]


def test_the_running_job_moves_before_a_waiting_one_takes_the_v100():
    """FIFO order decides who gets the freed v100: the earlier, running job; the waiting one
    starts on the k80 it leaves."""
    jobs = view(submit=[0, 50], num_gpus=[1, 1], running_type=[1, -1])
    share = Fifo().allocate(jobs, cluster(1, 1), ThroughputView(np.repeat(V100_K80, 2, axis=0))).share

    assert share.tolist() == [[1, 0], [0, 1]]


def test_a_move_never_pushes_out_a_job_that_keeps_running():
    """The v100 is held by a later running job: the earlier job stays on its k80."""
    jobs = view(submit=[0, 50], num_gpus=[1, 1], running_type=[1, 0])
    share = Fifo().allocate(jobs, cluster(1, 1), ThroughputView(np.repeat(V100_K80, 2, axis=0))).share

    assert share.tolist() == [[0, 1], [1, 0]]


def test_a_move_needs_room_for_the_whole_gang():
    """A 2-GPU job on k80s does not move to one free v100 (of two, the other held)."""
    jobs = view(submit=[0, 50], num_gpus=[2, 1], running_type=[1, 0])
    share = Fifo().allocate(jobs, cluster(2, 2), ThroughputView(np.repeat(V100_K80, 2, axis=0))).share

    assert share.tolist() == [[0, 1], [1, 0]]


def test_an_infinite_restart_cost_never_moves_a_job():
    jobs = view(submit=[0], num_gpus=[1], running_type=[1])
    share = Fifo(restart_cost_s=float("inf")).allocate(jobs, cluster(1, 1), ThroughputView(V100_K80)).share

    assert share.tolist() == [[0, 1]]


def test_agnostic_fifo_takes_the_first_type_with_room():
    jobs = view(submit=[0, 1], num_gpus=[1, 1])
    steps = np.array([[1.0, 9.0], [1.0, 9.0]])
    share = Fifo(agnostic=True).allocate(jobs, cluster(1, 1), ThroughputView(steps)).share

    assert share.tolist() == [[1, 0], [0, 1]]


def test_fifo_returns_rows_for_the_view_jobs():
    jobs = view(submit=[0, 1], num_gpus=[1, 1], index=np.array([7, 9]))
    allocation = Fifo().allocate(jobs, cluster(2), ThroughputView(np.ones((2, 1))))

    assert allocation.job_index.tolist() == [7, 9]
    assert allocation.is_integral()


def test_head_of_line_fifo_starts_no_job_behind_one_that_waits():
    """4 GPUs; A (submitted first) runs on 2; B (second) wants 4, C (third) wants 1. apportion's
    fifo starts C on a free GPU while B waits; Helios's (``fifo:head-of-line``) keeps C behind B."""
    from apportion.policies import make_policy

    jobs = view([0.0, 1.0, 2.0], [2, 4, 1], running_type=[0, -1, -1])
    speeds = ThroughputView(np.ones((3, 1)))

    backfills = make_policy("fifo").allocate(jobs, cluster(4), speeds).share
    strict = make_policy("fifo:head-of-line").allocate(jobs, cluster(4), speeds).share

    assert backfills[:, 0].tolist() == [1, 0, 1]
    assert strict[:, 0].tolist() == [1, 0, 0]


def test_a_job_too_large_for_the_cluster_does_not_hold_the_line():
    """4 GPUs; B wants 8 (it can never run here), C wants 1: C starts even in a strict queue."""
    from apportion.policies import make_policy

    jobs = view([0.0, 1.0], [8, 1])

    share = make_policy("fifo:head-of-line").allocate(jobs, cluster(4), ThroughputView(np.ones((2, 1)))).share

    assert share[:, 0].tolist() == [0, 1]
