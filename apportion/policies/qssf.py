"""Quasi-shortest-service-first (Helios, SC'21): the least predicted remaining GPU service first.

A job's service is GPU time: GPUs × seconds at its fastest speed. Ranking by what is left of
it, rather than by time alone (srtf), puts a short wide job behind a long narrow one that
holds fewer GPUs for less GPU time. It is preemptive (a new job predicted to need less service
goes ahead of a running one) and gang-aware: a job gets all its GPUs at once, in rank order,
and smaller jobs further down fill what a large one leaves. With ``durations="predicted"``
(the default) what is left comes from the history of finished jobs
(apportion.policies.durations); ``"oracle"`` uses the true remaining steps.

A prediction is a spread, not a number: with ``durations="predicted"`` a job is ranked by the
Gittins index over its group's recent finished jobs (apportion.core.duration_samples: what jobs
like it that did as much went on to need), or, for a job of no group with 20 such jobs, over its
lognormal prediction (apportion.core.gittins): least predicted service first where the history is
sure, least attained service first where it is wide (a queue's every 8-GPU job alike). ``lognormal``
(``qssf:lognormal``) ranks every job by its lognormal's index (the form before the samples);
``median_left`` (``qssf:median-left``) by the predicted median left alone. A job with its own
estimate is ranked by its corrected lognormal (apportion.core.duration_estimates); with
``estimate_ratios`` (``qssf:estimate-ratios``), once 20 estimated jobs have finished, by its estimate
× the index over their ratios actual ÷ estimate (apportion.core.estimate_ratios), which holds heavy
error tails a lognormal cannot (on Philly with Helios-like estimates no better: docs/durations.md).

Helios's own QSSF is not preemptive and is a strict queue: ``non_preemptive``
(``qssf:non-preemptive``) lets a started job run to its end, ranking only the waiting jobs by
their predicted service; ``head_of_line`` (``qssf:head-of-line``) starts no waiting job behind one
that cannot start yet. Both together (``qssf:non-preemptive:head-of-line``) are Helios's form.
"""

from __future__ import annotations

import numpy as np

from apportion.policies.base import DEFAULT_RESTART_COST_S
from apportion.policies.durations import DurationOrdering


class Qssf(DurationOrdering):
    name = "qssf"

    def __init__(self, *, durations: str = "predicted", non_preemptive: bool = False, head_of_line: bool = False,
                 median_left: bool = False, lognormal: bool = False, estimate_ratios: bool = False,
                 agnostic: bool = False,
                 restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        super().__init__(durations=durations, agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.by_index = not (median_left or non_preemptive)  # Helios's form ranks by its prediction
        self.by_sample = self.by_index and not lognormal
        self.by_ratios = self.by_sample and bool(estimate_ratios)
        self.non_preemptive = bool(non_preemptive)
        self.head_of_line = bool(head_of_line)

    def key_of(self, left_gpu_s: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        return left_gpu_s
