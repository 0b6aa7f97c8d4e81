"""Where the PNG plots' and report.html's time axes end: one rule for both."""

from types import SimpleNamespace

import numpy as np

from apportion.report import html, plots
from apportion.report.series import end_s


def replay(finish_s, decisions_s):
    timeline = np.array([[t, 0, 0, 0] for t in decisions_s], dtype=float).reshape(-1, 4)
    return SimpleNamespace(finish_s=np.array(finish_s, dtype=float), timeline=timeline)


def test_the_time_axis_ends_at_the_last_finish_or_the_last_decision_if_later():
    assert end_s(replay([10.0, np.nan, 30.0], [0.0, 20.0])) == 30.0
    assert end_s(replay([10.0, np.nan], [0.0, 45.0])) == 45.0  # a job still waiting when the replay stopped
    assert end_s(replay([np.nan], [])) == 0.0


def test_both_reports_end_their_time_axes_by_the_same_rule():
    assert html.end_s is plots.end_s is end_s
