"""What every generated workload shares: its size checked, and Poisson arrivals drawn (exponential
gaps at ``rate_per_hour``, the first job at 0)."""

from __future__ import annotations

import math

import numpy as np

from apportion.core.errors import InputError


def checked_size(source: str, jobs: int, rate_per_hour: float) -> int:
    """``jobs`` as an int; InputError naming the field when it or ``rate_per_hour`` is unusable."""
    if isinstance(jobs, bool) or int(jobs) != jobs or jobs < 1:
        raise InputError(source, f"must be a whole number >= 1, got {jobs!r}", field="jobs")
    if not (math.isfinite(rate_per_hour) and rate_per_hour > 0):
        raise InputError(source, f"must be a positive number, got {rate_per_hour!r}", field="rate_per_hour")
    return int(jobs)


def poisson_arrivals(rng: np.random.Generator, n: int, rate_per_hour: float) -> np.ndarray:
    """[n] submit times in seconds: 0, then exponential gaps of mean 3600 / ``rate_per_hour``."""
    gaps = rng.exponential(3600.0 / rate_per_hour, size=n - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))
