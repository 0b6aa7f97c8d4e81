"""The privacy model: budgets under ε-δ and Rényi accounting, what fits, dominant shares."""

import math

import numpy as np
import pytest

from apportion.core.privacy import Blocks, Claims, dominant_share, fits, rdp_budget


def claims_of(rows, columns=2):
    """Claims from [(block indices, demand per column), ...]."""
    start = np.cumsum([0] + [len(blocks) for blocks, _ in rows])
    block = np.array([b for blocks, _ in rows for b in blocks], dtype=np.int64)
    demand = np.array([d for blocks, d in rows for _ in blocks], dtype=float).reshape(-1, columns)
    return Claims(start, block, demand, np.ones(len(rows)))


def test_an_eps_delta_budget_is_its_epsilon_and_delta():
    blocks = Blocks(np.array(["a", "b"], dtype=object), np.zeros(2), np.array([1.0, 2.0]), np.array([1e-6, 0.0]))
    assert blocks.budget.tolist() == [[1.0, 1e-6], [2.0, 0.0]]
    assert not blocks.rdp


def test_a_renyi_budget_subtracts_ln_one_over_delta_over_alpha_minus_one():
    # δ = e⁻¹: ln(1/δ) = 1; ε 1.5 leaves 1.5 − 1/(2−1) = 0.5 at α=2 and 1.5 − 1/3 at α=4
    budget = rdp_budget(np.array([1.5]), np.array([math.exp(-1)]), np.array([2.0, 4.0]))
    assert budget[0] == pytest.approx([0.5, 1.5 - 1 / 3])


def test_a_renyi_budget_is_never_negative():
    assert rdp_budget(np.array([0.1]), np.array([1e-6]), np.array([2.0]))[0, 0] == 0.0


def test_under_eps_delta_a_claim_fits_only_with_room_for_both_epsilon_and_delta():
    room = np.array([[0.5, 1e-6]])
    claims = claims_of([([0], [0.5, 0.0]), ([0], [0.4, 2e-6]), ([0], [0.6, 0.0])])
    assert fits(room, claims, np.arange(3), rdp=False).tolist() == [True, False, False]


def test_under_renyi_a_claim_fits_when_one_order_has_room_on_every_block_it_reads():
    # two blocks, orders (2, 4); block 0 has room only at α=2, block 1 at both
    room = np.array([[0.5, 0.1], [0.5, 1.0]])
    claims = claims_of([
        ([0, 1], [0.4, 0.9]),  # α=2 fits on both blocks (0.4 ≤ 0.5): granted at α=2
        ([1], [0.6, 0.9]),     # α=2 does not fit (0.6 > 0.5), α=4 does (0.9 ≤ 1.0)
        ([0, 1], [0.6, 0.05]),  # α=2 too big (0.6 > 0.5); α=4 fits both blocks (0.05 ≤ 0.1, ≤ 1.0)
        ([0, 1], [0.6, 0.5]),  # α=2 too big everywhere, α=4 too big on block 0 (0.5 > 0.1)
    ], columns=2)
    assert fits(room, claims, np.arange(4), rdp=True).tolist() == [True, True, True, False]


def test_a_renyi_claim_may_not_use_one_order_on_one_block_and_another_on_the_next():
    room = np.array([[0.5, 0.0], [0.0, 0.5]])  # block 0: room at α=2 only; block 1: at α=4 only
    claims = claims_of([([0, 1], [0.1, 0.1])], columns=2)
    assert fits(room, claims, np.arange(1), rdp=True).tolist() == [False]


def test_the_dominant_share_is_the_largest_share_of_any_block_read():
    budget = np.array([[1.0, 1e-6], [2.0, 1e-6]])
    claims = claims_of([([0, 1], [0.5, 0.0]), ([1], [0.1, 0.0])])
    assert dominant_share(claims, budget, rdp=False).tolist() == pytest.approx([0.5, 0.05])
