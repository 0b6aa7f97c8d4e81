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


class EstimateBias:
    """The recent finished jobs' log(actual ÷ estimate), and the correction they make to an estimate."""

    def __init__(self, *, recent: int = 50, shrinkage: float = 1.0, prior_log_sd: float = PRIOR_LOG_SD,
                 min_log_sd: float = 0.1) -> None:
        if recent < 1 or not shrinkage > 0 or not prior_log_sd > 0:
            raise ValueError("recent must be >= 1, and shrinkage and prior_log_sd > 0")
        self.recent, self.shrinkage = int(recent), float(shrinkage)
        self.prior_log_sd, self.min_log_sd = float(prior_log_sd), float(min_log_sd)
        self._ratios = np.zeros(self.recent)  # a ring: the ``seen``-th ratio at ``seen % recent``
        self.seen = 0  # finished jobs with an estimate told so far
        self._learnt: tuple[float, float] | None = (0.0, self.prior_log_sd)  # (bias, log sd); None: stale

    def observe(self, gpu_s: np.ndarray, estimated_gpu_s: np.ndarray) -> None:
        """Finished jobs, oldest first: the GPU-seconds each took and its estimate (NaN: none, left out)."""
        actual = np.asarray(gpu_s, dtype=np.float64)
        estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
        both = np.isfinite(actual) & np.isfinite(estimated)
        if not both.any():
            return
        ratios = np.log(np.maximum(actual[both], 1.0) / np.maximum(estimated[both], 1.0))[-self.recent:]
        told = int(both.sum())
        at = (self.seen + told - len(ratios) + np.arange(len(ratios))) % self.recent
        self._ratios[at] = ratios
        self.seen += told
        self._learnt = None

    def learnt(self) -> tuple[float, float]:
        """(log bias, log standard deviation) an estimate is corrected by, from the ratios so far."""
        if self._learnt is None:
            n = min(self.seen, self.recent)
            low, median, high = np.percentile(self._ratios[:n], [25, 50, 75])
            bias = n / (n + self.shrinkage) * median
            pull = (n - 1) / (n - 1 + self.shrinkage)
            self._learnt = (float(bias), float(pull * (high - low) / IQR_TO_SD + (1.0 - pull) * self.prior_log_sd))
        return self._learnt

    def correct(self, estimated_gpu_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs with these estimates."""
        bias, log_sd = self.learnt()
        estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
        return estimated * math.exp(bias), np.full(len(estimated), max(log_sd, self.min_log_sd))
