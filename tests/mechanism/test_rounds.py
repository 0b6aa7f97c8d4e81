"""The round mechanism: which jobs run this round, on which GPU type, given the allocation X."""

import numpy as np

from apportion.mechanism.rounds import RoundMechanism


def test_an_integral_allocation_runs_each_job_on_its_type():
    chosen = RoundMechanism().choose(
        share=np.array([[1.0, 0.0], [0.0, 1.0]]),
        received_fraction=np.zeros((2, 2)),
        num_gpus=np.array([1, 1]),
        capacity=np.array([1, 1]),
    )

    assert chosen.tolist() == [0, 1]


def test_a_job_with_no_share_waits():
    chosen = RoundMechanism().choose(
        share=np.array([[1.0, 0.0], [0.0, 0.0]]),
        received_fraction=np.zeros((2, 2)),
        num_gpus=np.array([1, 1]),
        capacity=np.array([1, 1]),
    )

    assert chosen.tolist() == [0, -1]


def test_three_jobs_sharing_one_gpu_take_turns():
    """X = 1/3 each on one GPU: over 3 rounds each job runs exactly once.

    Round 0: nobody has received anything, ties go to job 0. Round 1 (t=360): job 0 has
    received 360/360 = 1, the others 0, so job 1 rises. Round 2 (t=720): jobs 0 and 1 have
    0.5 each, job 2 has 0, so job 2 runs.
    """
    mechanism = RoundMechanism(round_s=360.0)
    share = np.full((3, 1), 1 / 3)
    time_on_type = np.zeros((3, 1))
    ran = []
    for r in range(3):
        now = r * mechanism.round_s
        received = time_on_type / max(now, 1e-9)  # as the simulator: time held / time in system
        chosen = mechanism.choose(share, received, np.array([1, 1, 1]), np.array([1]))
        assert np.count_nonzero(chosen >= 0) == 1
        job = int(np.flatnonzero(chosen >= 0)[0])
        ran.append(job)
        time_on_type[job, 0] += mechanism.round_s

    assert ran == [0, 1, 2]
    # and the rotation continues: round 3 is job 0's turn again (each has 1/3)
    received = time_on_type / (3 * mechanism.round_s)
    chosen = mechanism.choose(share, received, np.array([1, 1, 1]), np.array([1]))
    assert np.flatnonzero(chosen >= 0).tolist() == [0]


def test_time_shares_converge_to_the_allocation():
    """Two jobs on one GPU with X = 0.75 and 0.25: over 40 rounds they run 30 and 10 of them."""
    mechanism = RoundMechanism()
    share = np.array([[0.75], [0.25]])
    time_on_type = np.zeros((2, 1))
    for r in range(40):
        received = time_on_type / max(r * 360.0, 1e-9)
        chosen = mechanism.choose(share, received, np.array([1, 1]), np.array([1]))
        time_on_type[chosen >= 0, 0] += 360.0

    assert (time_on_type[:, 0] / 360.0).tolist() == [30.0, 10.0]


def test_an_integral_allocation_over_capacity_still_respects_capacity():
    # X says both 2-GPU jobs run on type 0, which has only 2 GPUs: one of them must wait
    chosen = RoundMechanism().choose(
        share=np.array([[1.0], [1.0]]),
        received_fraction=np.zeros((2, 1)),
        num_gpus=np.array([2, 2]),
        capacity=np.array([2]),
    )

    assert sorted(chosen.tolist()) == [-1, 0]


def test_a_job_never_gets_more_gpus_of_a_type_than_there_are():
    rng = np.random.default_rng(11)
    mechanism = RoundMechanism()
    for _ in range(300):
        n, types = int(rng.integers(1, 30)), int(rng.integers(1, 4))
        share = rng.uniform(0, 1, size=(n, types)) * (rng.uniform(size=(n, types)) < 0.7)
        share /= np.maximum(share.sum(axis=1, keepdims=True), 1.0)
        received = rng.uniform(0, 1, size=(n, types)) * (rng.uniform(size=(n, types)) < 0.5)
        num_gpus = rng.choice([1, 2, 4, 8], size=n)
        capacity = rng.integers(0, 12, size=types)

        chosen = mechanism.choose(share, received, num_gpus, capacity)

        running = chosen >= 0
        used = np.bincount(chosen[running], weights=num_gpus[running], minlength=types)
        assert np.all(used <= capacity)
        assert np.all(share[np.flatnonzero(running), chosen[running]] > 0)  # only where X gives time


def test_a_solver_noise_share_does_not_pull_a_job_off_its_type():
    """The max-min LP returns shares like [0, 5e-8, 1.0] (HiGHS is exact only to ~1e-7):
    the job should hold type 2 all the time. After a round there, it has received [0, 0, 1];
    the 5e-8 share on type 1 must not outrank the whole share it was given on type 2."""
    chosen = RoundMechanism().choose(
        share=np.array([[0.0, 5e-8, 1.0]]),
        received_fraction=np.array([[0.0, 0.0, 1.0]]),
        num_gpus=np.array([1]),
        capacity=np.array([2, 2, 5]),
    )

    assert chosen.tolist() == [2]
