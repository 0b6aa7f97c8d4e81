"""Spot with fallback: a job rents the spot type cheapest to finish it and keeps it until it is preempted.
A spot type preempted in the last ``cooldown_s`` is avoided; with none left a job falls back to the
cheapest on-demand type, and goes back to spot at the first round one is usable again."""

from __future__ import annotations

import numpy as np

from apportion.policies.provisioning.view import RentalView, cheapest


def spot_allowed(view: RentalView, cooldown_s: float) -> np.ndarray:
    """[a, K] usable spot types not preempted in the last ``cooldown_s``."""
    calm = view.now_s - view.last_preempted_s >= cooldown_s
    return view.usable & (view.is_spot & calm)[None, :]


class SpotFallback:
    name = "spot-fallback"

    def __init__(self, cooldown_s: float = 3600.0) -> None:
        self.cooldown_s = cooldown_s

    def choose(self, view: RentalView) -> np.ndarray:
        choice = view.held.copy()
        on_spot = (view.held >= 0) & view.is_spot[np.maximum(view.held, 0)]
        due = ~on_spot
        cost = view.cost_to_finish
        spot = cheapest(view, cost, spot_allowed(view, self.cooldown_s))
        fallback = cheapest(view, cost, view.usable & ~view.is_spot[None, :])
        choice[due] = np.where(spot >= 0, spot, fallback)[due]
        return choice
