"""The market's arrays: what holding an instance costs between two times, and its preemptions."""

import numpy as np
import pytest

from apportion.core.market import ON_DEMAND, SPOT, Market


def two_types(**extra) -> Market:
    """A $2/h on-demand type and a spot type at $1/h for an hour, then $0.5/h; spot preempted at 5400 s."""
    return Market(
        name=np.array(["a", "a"], dtype=object), cloud=np.array(["aws", "aws"], dtype=object),
        region=np.array(["us-east-1", "us-east-1"], dtype=object), gpu_type=np.array(["v100", "v100"], dtype=object),
        gpus=np.array([1, 1]), market=np.array([ON_DEMAND, SPOT]), times_s=np.array([0.0, 3600.0]),
        price_per_hour=np.array([[2.0, 2.0], [1.0, 0.5]]), preempt_type=np.array([1]), preempt_s=np.array([5400.0]),
        **extra,
    )


def test_cost_integrates_the_price_steps():
    market = two_types()
    # spot from 1800 s to 7200 s: half an hour at $1 and an hour at $0.5
    assert market.cost(np.array([1]), np.array([1800.0]), np.array([7200.0])) == pytest.approx([1.0])
    # the last step lasts forever
    assert market.cost(np.array([0]), np.array([0.0]), np.array([36000.0])) == pytest.approx([20.0])


def test_next_preemption_is_the_first_in_the_window_of_that_type():
    market = two_types()
    assert list(market.next_preemption(np.array([1, 1, 0]), 0.0, 7200.0)) == [5400.0, 5400.0, np.inf]
    assert market.next_preemption(np.array([1]), 5400.0, 9000.0)[0] == np.inf  # the window is (after, until]
    assert market.next_preemption(np.array([1]), 0.0, 5000.0)[0] == np.inf


def test_prices_at_a_time_are_the_step_in_force():
    assert list(two_types().prices_at(3599.0)) == [2.0, 1.0]
    assert list(two_types().prices_at(3600.0)) == [2.0, 0.5]


def test_columns_must_agree():
    with pytest.raises(ValueError, match="price_per_hour has shape"):
        Market(name=np.array(["a"]), cloud=np.array(["aws"]), region=np.array(["r"]), gpu_type=np.array(["v100"]),
               gpus=np.array([1]), market=np.array([0]), times_s=np.array([0.0]), price_per_hour=np.ones((1, 2)))
