"""Row reductions over [jobs, types] arrays give exactly numpy's answers, a column at a time."""

import numpy as np
import pytest

from apportion.core.rows import first_true, row_any, row_sum


def test_each_row_s_first_true_type_or_none():
    holds = np.array([[False, True, True], [False, False, False], [True, False, True]])
    assert first_true(holds).tolist() == [1, 0, 0]  # argmax's rule: 0 where none
    assert first_true(holds, none=-1).tolist() == [1, -1, 0]
    assert row_any(holds).tolist() == [True, False, True]


def test_row_sums_add_left_to_right():
    shares = np.array([[0.5, 0.25, 0.25], [0.0, 0.0, 0.0], [1e-17, 1.0, -1.0]])
    assert row_sum(shares).tolist() == [1.0, 0.0, 0.0]  # (1e-17 + 1) - 1: numpy's order


@pytest.mark.parametrize("types", [1, 2, 3, 5, 7, 8, 12, 20])
def test_the_same_as_numpy_bit_for_bit_at_any_width(types):
    rng = np.random.default_rng(types)
    values = rng.random((500, types)) * 10.0 ** rng.uniform(-9, 9, (500, types))
    flags = rng.random((500, types)) > 0.8
    assert np.array_equal(row_sum(values), values.sum(axis=1))
    assert np.array_equal(row_any(flags), flags.any(axis=1))
    assert np.array_equal(first_true(flags), np.argmax(flags, axis=1))
    assert np.array_equal(first_true(flags, none=-1), np.where(flags.any(axis=1), np.argmax(flags, axis=1), -1))


def test_no_jobs_gives_empty_answers():
    empty = np.zeros((0, 3))
    assert row_sum(empty).shape == (0,)
    assert row_any(empty > 0).shape == (0,)
    assert first_true(empty > 0, none=-1).shape == (0,)
