"""The service a job receives for holding GPUs: GPU-seconds, and time alone or together."""

import numpy as np

from apportion.mechanism.service import held_service, pair_together_s


def test_seconds_alone_count_only_while_a_job_does_not_share_its_gpus():
    gpu_s, alone_s, together_s = held_service(np.array([100.0, 100.0, 30.0]), np.array([4, 1, 1]),
                                              np.array([True, False, True]))

    assert gpu_s.tolist() == [400.0, 100.0, 30.0]
    assert alone_s.tolist() == [100.0, 0.0, 30.0]
    assert together_s.tolist() == [0.0, 100.0, 0.0]


def test_one_attempt_is_counted_with_plain_numbers_by_the_same_rule():
    assert held_service(12.5, 2, True) == (25.0, 12.5, 0.0)
    assert held_service(12.5, 1, False) == (12.5, 0.0, 12.5)


def test_a_pair_ran_together_only_while_both_held_the_gpu():
    assert pair_together_s(np.array([100.0, 40.0]), np.array([60.0, 90.0])).tolist() == [60.0, 40.0]
