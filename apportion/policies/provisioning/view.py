"""What a provisioning policy sees each round: the active jobs against the market's instance types.

Arrays over the round's active jobs [a] and the market's types [K]. A policy answers with one
type per job (-1: hold nothing this round); the replay charges whatever a change costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class RentalView:
    now_s: float
    round_s: float
    rows: np.ndarray  # [a] JobTable rows
    held: np.ndarray  # [a] the type each job holds, -1 none
    chosen_at_s: np.ndarray  # [a] when that choice was made (-inf where none)
    speed: np.ndarray  # [a, K] steps/s of each job on each type's instances (0: cannot run there)
    instances: np.ndarray  # [a, K] instances of the type the job needs for its GPUs
    price_per_hour: np.ndarray  # [K] dollars per instance-hour now (NaN: not offered)
    is_spot: np.ndarray  # [K] bool
    remaining_steps: np.ndarray  # [a]
    overhead_s: np.ndarray  # [a, K] seconds without progress from now on that type (start, restart, transfer)
    move_usd: np.ndarray  # [a, K] dollars moving the job's checkpoint there (egress)
    deadline_s: np.ndarray  # [a] absolute, NaN where none
    worst_restart_s: float  # the most a restart anywhere costs: restart plus a checkpoint's transfer
    last_preempted_s: np.ndarray  # [K] each type's last preemption so far, -inf where none

    @cached_property
    def usable(self) -> np.ndarray:
        """[a, K] types offered now on which the job can run."""
        return (self.speed > 0) & ~np.isnan(self.price_per_hour)[None, :]

    @cached_property
    def time_to_finish(self) -> np.ndarray:
        """[a, K] seconds from now to the job's end were it to hold that type from now on; inf where unusable."""
        with np.errstate(divide="ignore"):
            return np.where(self.usable, self.overhead_s + self.remaining_steps[:, None] / self.speed, np.inf)

    @cached_property
    def cost_to_finish(self) -> np.ndarray:
        """[a, K] dollars to finish on that type at today's price, the move and the seconds without progress
        included; inf where unusable."""
        per_s = self.instances * np.nan_to_num(self.price_per_hour, nan=0.0)[None, :] / 3600.0
        usable = self.usable
        return np.where(usable, np.where(usable, self.time_to_finish, 0.0) * per_s + self.move_usd, np.inf)


def cheapest(view: RentalView, cost: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """[a] the allowed type of least cost per job, the one held where it is as cheap; -1 where none is allowed."""
    masked = np.where(allowed, cost, np.inf)
    best = np.argmin(masked, axis=1)
    lowest = masked[np.arange(len(best)), best]
    holding = view.held >= 0
    held_cost = np.where(holding, masked[np.arange(len(best)), np.maximum(view.held, 0)], np.inf)
    best = np.where(holding & (held_cost <= lowest), view.held, best)
    return np.where(np.isfinite(lowest), best, -1)
