"""greedy_fill: walk items in order, take each one that still fits."""

import numpy as np

from apportion.core.packing import greedy_fill


def first_fit(sizes, capacity):
    """The plain loop greedy_fill must agree with."""
    take, left = [], capacity
    for size in sizes:
        fits = size <= left
        take.append(fits)
        left -= size if fits else 0
    return take


def test_a_hand_worked_case():
    # capacity 8: take 4 (4 left), skip 8, take 2 (2 left), skip 4, take 1 (1 left), take 1 (0 left), skip 1
    sizes = np.array([4, 8, 2, 4, 1, 1, 1])

    assert greedy_fill(sizes, 8).tolist() == [True, False, True, False, True, True, False]


def test_nothing_fits_in_nothing_and_nothing_is_taken_from_nothing():
    assert greedy_fill(np.array([1, 2]), 0).tolist() == [False, False]
    assert greedy_fill(np.array([], dtype=np.int64), 5).tolist() == []
    assert greedy_fill(np.array([9, 9]), 8).tolist() == [False, False]


def test_agrees_with_the_plain_loop_on_many_random_cases():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(0, 40))
        sizes = rng.choice([1, 2, 4, 8, 3, 16], size=n)
        capacity = int(rng.integers(0, 50))

        assert greedy_fill(sizes, capacity).tolist() == first_fit(sizes.tolist(), capacity), (sizes, capacity)
