"""What every solve shares: its error type, and turning solver output into clean time shares."""

from __future__ import annotations

import numpy as np

from apportion.core.rows import row_sum

NOISE = 1e-6  # HiGHS's feasibility tolerance is ~1e-7; smaller shares are rounding, not time


class SolveError(RuntimeError):
    """HiGHS did not return an optimal solution."""


def clean_shares(share: np.ndarray) -> np.ndarray:
    """Shares below solver tolerance become 0, and each row sums to at most 1."""
    share = np.where(share < NOISE, 0.0, np.minimum(share, 1.0))
    total = row_sum(share)[:, None]
    return np.where(total > 1.0, share / np.maximum(total, 1.0), share)
