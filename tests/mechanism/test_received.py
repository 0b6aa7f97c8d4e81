"""The received share counted from arrival or, as Gavel counts it, from the last change of allocation
(the planner's side, where the two rules pick different jobs: tests/mechanism/test_round_planner.py)."""

from __future__ import annotations

import numpy as np
import pytest

from apportion.mechanism.received import ReceivedShare


def test_a_new_allocation_counts_afresh_from_its_time():
    received = ReceivedShare("allocation")
    received.reset(1000.0, np.array([[300.0, 0.0], [0.0, 700.0]]))

    share = received.jobs(1200.0, np.array([0.0, 1100.0]), np.array([[400.0, 0.0], [0.0, 750.0]]))

    # A since the reset: 100 of 200 s on the first type; B arrived after it: 50 of its 100 s on the second
    np.testing.assert_allclose(share, [[0.5, 0.0], [0.0, 0.5]])


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="received_since must be one of arrival, allocation, got 'deploy'"):
        ReceivedShare("deploy")
