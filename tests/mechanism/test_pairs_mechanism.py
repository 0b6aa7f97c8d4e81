"""The round mechanism with space sharing: a job runs alone or in one pair, never twice."""

import numpy as np

from apportion.mechanism.pairs import choose_with_pairs


def test_the_pair_that_received_least_runs_and_its_jobs_are_not_run_again():
    """Jobs 0, 1, 2 on one type with two GPUs. Pair (0, 1) was owed most; job 0 may also run
    alone, but it is already busy in the pair, so job 2 takes the other GPU."""
    share = np.array([[0.2], [0.0], [0.5]])
    received = np.array([[0.2], [0.0], [0.5]])
    pair_jobs = np.array([[0, 1]])
    pair_share = np.array([[0.8]])
    pair_received = np.array([[0.0]])

    chosen, pair_chosen = choose_with_pairs(share, received, pair_jobs, pair_share, pair_received,
                                            np.ones(3, dtype=np.int64), np.array([2]))

    assert pair_chosen.tolist() == [0]
    assert chosen.tolist() == [0, 0, 0]


def test_capacity_counts_a_pair_once_and_a_job_in_two_pairs_runs_in_one():
    """One GPU; job 1 is in two pairs. Only one unit fits: the one owed the most."""
    share = np.zeros((3, 1))
    pair_jobs = np.array([[0, 1], [1, 2]])
    pair_share = np.array([[0.5], [0.5]])
    pair_received = np.array([[0.4], [0.1]])

    chosen, pair_chosen = choose_with_pairs(share, share, pair_jobs, pair_share, pair_received,
                                            np.ones(3, dtype=np.int64), np.array([1]))

    assert pair_chosen.tolist() == [-1, 0]
    assert chosen.tolist() == [-1, 0, 0]
