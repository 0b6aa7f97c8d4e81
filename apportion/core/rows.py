"""Reductions along the short axis of [jobs, types] arrays, a column at a time.

numpy reduces along the last axis of a narrow array (a handful of GPU types) 5-50 times slower
than it combines that many columns, and a round does several such reductions over every
active job. The results are the same: ``row_sum`` adds the columns in numpy's own order, which
is plain left to right below ``NARROW_SUM`` columns (pairwise from 8 on, so wider arrays go to
numpy).
"""

from __future__ import annotations

import numpy as np

NARROW_SUM = 7  # widest row numpy sums left to right
NARROW = 16  # widest array worth a column loop for the exact reductions


def row_sum(a: np.ndarray) -> np.ndarray:
    """``a.sum(axis=1)``, bit for bit."""
    if not 0 < a.shape[1] <= NARROW_SUM:
        return a.sum(axis=1)
    total = a[:, 0].copy()
    for column in range(1, a.shape[1]):
        total += a[:, column]
    return total


def row_any(a: np.ndarray) -> np.ndarray:
    """``a.any(axis=1)`` of a boolean array."""
    if not 0 < a.shape[1] <= NARROW:
        return a.any(axis=1)
    found = a[:, 0].copy()
    for column in range(1, a.shape[1]):
        found |= a[:, column]
    return found


def first_true(a: np.ndarray, *, none: int = 0) -> np.ndarray:
    """Each row's first True column of a boolean array, ``none`` where there is none
    (``none=0`` is ``np.argmax(a, axis=1)``)."""
    if not 0 < a.shape[1] <= NARROW:
        first = np.argmax(a, axis=1)
        return first if none == 0 else np.where(a.any(axis=1), first, none)
    first = np.full(a.shape[0], none, dtype=np.intp)
    for column in range(a.shape[1] - 1, -1, -1):
        first = np.where(a[:, column], column, first)
    return first
