"""Sequential first-fit in priority order, done in a few vectorised passes.

Shared by the ordering policies and the round mechanism, so it sits below both."""

from __future__ import annotations

import numpy as np


def greedy_fill(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Which items to take, walking ``sizes`` in order and taking each one that still fits.

    Same answer as the plain loop; each pass takes the longest prefix that fits, then drops
    the first item that did not (capacity only shrinks, so it never will fit).
    """
    take = np.zeros(len(sizes), dtype=bool)
    candidates = np.arange(len(sizes))
    remaining = int(capacity)
    while remaining > 0 and len(candidates):
        candidates = candidates[sizes[candidates] <= remaining]
        if not len(candidates):
            break
        cumulative = np.cumsum(sizes[candidates])
        fitting = int(np.searchsorted(cumulative, remaining, side="right"))
        take[candidates[:fitting]] = True
        remaining -= int(cumulative[fitting - 1])
        candidates = candidates[fitting + 1 :]
    return take
