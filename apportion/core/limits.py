"""Bounds on a job's size that every reader of jobs enforces (trace CSV, job files, the API).

They are far beyond any real job, and low enough that counts stay exact in int64 and float64
and that virtual time stays a number a person can read: a row past them is a typo or a unit
mistake, and is rejected with a message instead of overflowing later.
"""

from __future__ import annotations

YEAR_S = 365.25 * 24 * 3600.0

MAX_GPUS = 2**20  # GPUs one job may ask for (1,048,576)
MAX_STEPS = 2**53  # total steps: the largest count that float64 still holds exactly
MAX_DURATION_S = 10 * YEAR_S  # how long a job runs, and its deadline after submission
MAX_SUBMIT_TIME_S = 100 * YEAR_S  # a submit time (leaves room for Unix timestamps until 2070)


def describe_seconds(seconds: float) -> str:
    """``315,576,000 s (10 years)``: a bound in seconds, readable."""
    return f"{seconds:,.0f} s ({seconds / YEAR_S:g} years)"
