"""Jobs' own estimates of their GPU time, corrected by how wrong such estimates turned out to be.

A job may come with an estimate of its duration (a user's guess, a time limit, an external
estimator's output, such as Helios's LightGBM): about that one job, it says more than any group
of jobs like it. Estimates are biased (users ask for time limits well beyond what their jobs
take) and noisy, so ``EstimateBias`` learns both from the jobs that finished with an estimate:
the log ratio log(actual ÷ estimate) of the most recent ``recent`` of them. A job's prediction
is its estimate × e**bias, the bias that ratios' median shrunk towards 0 by n / (n + shrinkage);
its log standard deviation is their spread (interquartile range ÷ 1.349) pulled from
``prior_log_sd`` by (n − 1) / (n − 1 + shrinkage), as the predictor's ladder pulls a group's
(apportion.core.durations). It learns only what it is told, when a job finishes.
"""

from __future__ import annotations

import math

import numpy as np

PRIOR_LOG_SD = 1.0  # how far off an estimate is believed to be before any has been checked: a factor of e
IQR_TO_SD = 1.349  # a normal's interquartile range over its standard deviation
MIN_GPU_S = 1.0  # an estimate or a GPU time under one GPU-second counts as one


def finished_ratios(gpu_s: np.ndarray, estimated_gpu_s: np.ndarray) -> np.ndarray:
    """[m] actual ÷ estimated GPU time of the finished jobs that have both (NaN: none, left out), in order."""
    actual = np.asarray(gpu_s, dtype=np.float64)
    estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
    both = np.isfinite(actual) & np.isfinite(estimated)
    return np.maximum(actual[both], MIN_GPU_S) / np.maximum(estimated[both], MIN_GPU_S)


class RecentValues:
    """The last ``size`` values told, in a ring: the finite memory of finished jobs a learner keeps."""

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._values = np.zeros(self.size)  # the ``seen``-th value at ``seen % size``
        self.seen = 0  # values told so far

    def add(self, values: np.ndarray) -> None:
        """Values, oldest first."""
        values = np.asarray(values, dtype=np.float64)
        kept = values[-self.size:]
        at = (self.seen + len(values) - len(kept) + np.arange(len(kept))) % self.size
        self._values[at] = kept
        self.seen += len(values)

    def values(self) -> np.ndarray:
        """The kept values (at most ``size``), in no particular order."""
        return self._values[:min(self.seen, self.size)]


class EstimateBias:
    """The recent finished jobs' log(actual ÷ estimate), and the correction they make to an estimate."""

    def __init__(self, *, recent: int = 50, shrinkage: float = 1.0, prior_log_sd: float = PRIOR_LOG_SD,
                 min_log_sd: float = 0.1) -> None:
        if recent < 1 or not shrinkage > 0 or not prior_log_sd > 0:
            raise ValueError("recent must be >= 1, and shrinkage and prior_log_sd > 0")
        self.recent, self.shrinkage = int(recent), float(shrinkage)
        self.prior_log_sd, self.min_log_sd = float(prior_log_sd), float(min_log_sd)
        self._ratios = RecentValues(self.recent)  # log(actual ÷ estimate) of the finished jobs with one
        self._learnt: tuple[float, float] | None = (0.0, self.prior_log_sd)  # (bias, log sd); None: stale

    def observe(self, gpu_s: np.ndarray, estimated_gpu_s: np.ndarray) -> None:
        """Finished jobs, oldest first: the GPU-seconds each took and its estimate (NaN: none, left out)."""
        ratios = finished_ratios(gpu_s, estimated_gpu_s)
        if len(ratios):
            self._ratios.add(np.log(ratios))
            self._learnt = None

    @property
    def seen(self) -> int:
        """Finished jobs with an estimate told so far."""
        return self._ratios.seen

    def learnt(self) -> tuple[float, float]:
        """(log bias, log standard deviation) an estimate is corrected by, from the ratios so far."""
        if self._learnt is None:
            ratios = self._ratios.values()
            n = len(ratios)
            low, median, high = np.percentile(ratios, [25, 50, 75])
            bias = n / (n + self.shrinkage) * median
            pull = (n - 1) / (n - 1 + self.shrinkage)
            self._learnt = (float(bias), float(pull * (high - low) / IQR_TO_SD + (1.0 - pull) * self.prior_log_sd))
        return self._learnt

    def correct(self, estimated_gpu_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs with these estimates."""
        bias, log_sd = self.learnt()
        estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
        return estimated * math.exp(bias), np.full(len(estimated), max(log_sd, self.min_log_sd))
