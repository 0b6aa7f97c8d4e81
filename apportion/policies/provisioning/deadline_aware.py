"""Deadline-aware (Can't Be Late, NSDI'24): spot while the deadline's slack allows, on-demand once it does not.

A job with a deadline stays on spot (waiting, unbilled, while no spot type is usable) only if,
were it to make no progress this round, it could still restart on on-demand next round and
finish in time: ``deadline − now − round ≥ worst restart + remaining / on-demand speed`` for its
fastest on-demand type. Otherwise it moves to the cheapest on-demand type that still finishes by
the deadline (the fastest if none does) and stays there to the end. Jobs without a deadline
behave as under spot-with-fallback.
"""

from __future__ import annotations

import numpy as np

from apportion.policies.provisioning.spot_fallback import SpotFallback, spot_allowed
from apportion.policies.provisioning.view import RentalView, cheapest


class DeadlineAware:
    name = "deadline-aware"

    def __init__(self, cooldown_s: float = 3600.0) -> None:
        self.cooldown_s = cooldown_s
        self.without_deadline = SpotFallback(cooldown_s)

    def choose(self, view: RentalView) -> np.ndarray:
        choice = self.without_deadline.choose(view)
        has_deadline = np.isfinite(view.deadline_s)
        if not has_deadline.any():
            return choice
        on_demand = view.usable & ~view.is_spot[None, :]
        with np.errstate(divide="ignore"):
            from_nothing = np.where(on_demand, view.worst_restart_s + view.remaining_steps[:, None] / view.speed, np.inf)
        time_left = view.deadline_s - view.now_s
        at_risk = time_left - view.round_s < from_nothing.min(axis=1)
        held_on_demand = (view.held >= 0) & ~view.is_spot[np.maximum(view.held, 0)]

        finish = view.time_to_finish
        in_time = on_demand & (finish <= time_left[:, None])
        safe = cheapest(view, view.cost_to_finish, in_time)
        fastest = np.argmin(np.where(on_demand, finish, np.inf), axis=1)
        fastest = np.where(on_demand.any(axis=1), fastest, -1)
        switch = np.where(safe >= 0, safe, fastest)

        spot = cheapest(view, view.cost_to_finish, spot_allowed(view, self.cooldown_s))
        on_spot = (view.held >= 0) & ~held_on_demand
        relaxed = np.where(on_spot, view.held, spot)  # keep a spot instance until preempted; none usable: wait

        deadline_choice = np.where(held_on_demand, view.held, np.where(at_risk, switch, relaxed))
        return np.where(has_deadline, deadline_choice, choice)
