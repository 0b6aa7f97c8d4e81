"""The received share a round ranks jobs by: the fraction of time a job has held each type.

Two clocks for it. ``"arrival"`` counts from the job's arrival: the fraction of its whole time in
the system it held each type. ``"allocation"`` is Gavel's rule: the fraction of the time since
the allocation last changed (Gavel's ``_reset_time_run_so_far`` at every re-solve), so that a job
that ran long under an old allocation is not held back under the new one.
"""

from __future__ import annotations

import numpy as np

RECEIVED_SINCE = ("arrival", "allocation")
DEFAULT_RECEIVED_SINCE = "allocation"  # on Philly's first 3,000 jobs, lower average JCT for every LP policy
IN_SYSTEM_FLOOR_S = 1e-9  # a job submitted this instant has been in the system this long


def check_received_since(received_since: str) -> str:
    """``received_since`` if it is one of ``RECEIVED_SINCE``; a ValueError naming it otherwise."""
    if received_since not in RECEIVED_SINCE:
        raise ValueError(f"received_since must be one of {', '.join(RECEIVED_SINCE)}, got '{received_since}'")
    return received_since


class ReceivedShare:
    """The received share of each job (and pair) on each type, from the seconds held so far.

    Under ``"allocation"`` it keeps, from the last reset, its time and the seconds each job had
    held each type alone then (and each pair of the allocation had run together); the planner
    resets it whenever the policy re-solves, which is whenever the job set changes, so the rows
    of a round are those of the reset.
    """

    def __init__(self, received_since: str = DEFAULT_RECEIVED_SINCE) -> None:
        self.since = check_received_since(received_since)
        self._reset_at_s = -np.inf
        self._alone_s: np.ndarray | None = None  # [n, T] time alone at the reset
        self._together_s: np.ndarray | None = None  # [P, T] pairs' time together at the reset

    def reset(self, now_s: float, time_alone_s: np.ndarray, together_s: np.ndarray | None = None) -> None:
        """The allocation changed now: count received time afresh from here."""
        if self.since == "allocation":
            self._reset_at_s = now_s
            self._alone_s = time_alone_s.copy()
            self._together_s = None if together_s is None else together_s.copy()

    def in_system(self, now_s: float, submit_time_s: np.ndarray) -> np.ndarray:
        """[n] seconds each job's share is counted over: since its arrival, or since the reset if later."""
        return np.maximum(now_s - np.maximum(submit_time_s, self._reset_at_s), IN_SYSTEM_FLOOR_S)

    def jobs(self, now_s: float, submit_time_s: np.ndarray, time_alone_s: np.ndarray) -> np.ndarray:
        """[n, T] fraction of its counted time each job has held each type alone."""
        held = time_alone_s if self._alone_s is None else time_alone_s - self._alone_s
        return held / self.in_system(now_s, submit_time_s)[:, None]

    def pairs(self, in_system: np.ndarray, pairs: np.ndarray, together_s: np.ndarray) -> np.ndarray:
        """[P, T] fraction of the shorter counted time of its two jobs each pair has run together."""
        held = together_s if self._together_s is None else together_s - self._together_s
        return held / np.minimum(in_system[pairs[:, 0]], in_system[pairs[:, 1]])[:, None]
