"""Shortest remaining time first: remaining steps at the job's fastest runnable speed, as the round
sees it (where CPU cores limit a job, the speed its share of them gives: sim/simulator.py).

``durations="oracle"`` (the default) ranks by the true remaining steps; ``"predicted"`` by
what the history of finished jobs predicts is left (apportion.policies.durations).
"""

from __future__ import annotations

import numpy as np

from apportion.policies.durations import DurationOrdering


class Srtf(DurationOrdering):
    name = "srtf"

    def key_of(self, left_gpu_s: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        return left_gpu_s / num_gpus  # seconds at the fastest speed

    def rank_of(self, left_steps: np.ndarray, fastest: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        return np.divide(left_steps, fastest, out=np.full(len(left_steps), np.inf), where=fastest > 0)
