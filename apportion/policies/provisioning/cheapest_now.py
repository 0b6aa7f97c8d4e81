"""Cheapest now: every ``interval_s`` (each round with 0, daily with 86,400) a job moves to the type,
on-demand or spot, that finishes it for the fewest dollars at today's prices, its move included."""

from __future__ import annotations

import numpy as np

from apportion.policies.provisioning.view import RentalView, cheapest


class CheapestNow:
    def __init__(self, interval_s: float = 0.0) -> None:
        self.interval_s = interval_s
        self.name = "cheapest-now" if interval_s == 0 else f"cheapest-now:every-{interval_s:g}s"

    def choose(self, view: RentalView) -> np.ndarray:
        choice = view.held.copy()
        due = (view.held < 0) | (view.now_s - view.chosen_at_s >= self.interval_s)
        choice[due] = cheapest(view, view.cost_to_finish, view.usable)[due]
        return choice
