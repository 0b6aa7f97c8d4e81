"""Static: each job rents the on-demand type cheapest for its whole run when it starts, and keeps it."""

from __future__ import annotations

import numpy as np

from apportion.policies.provisioning.view import RentalView, cheapest


class Static:
    name = "static"

    def choose(self, view: RentalView) -> np.ndarray:
        choice = view.held.copy()
        due = view.held < 0
        on_demand = view.usable & ~view.is_spot[None, :]
        choice[due] = cheapest(view, view.cost_to_finish, on_demand)[due]
        return choice
