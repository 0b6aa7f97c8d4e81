"""How wrong jobs' own estimates turned out to be, kept as a sample, and the Gittins index over it.

``EstimateBias`` (apportion.core.duration_estimates) sums the ratios actual ÷ estimate up in a
lognormal; real estimates' errors have heavier tails than a lognormal holds (Helios's: a tenth of
jobs off by 11 to 101 times), so a job that outlives its estimate is believed all but done. The
index over the ratios themselves (as ``DurationSamples`` ranks by a group's GPU times) says what
the estimated jobs that did as much, for their estimate, went on to need.

The index is scale-equivariant: a job whose GPU time is its estimate ``E`` × a ratio drawn from the
sample, having done ``d``, has 1 / index = ``E`` × the sample's at ``d ÷ E``. The ratios are kept
× ``SCALE`` (so that 2**-20 … 2**28 land on ``sample_keys``'s columns of quarter doublings from one
GPU-second on) and a job's key is the column of ``d ÷ E × SCALE``, × ``E ÷ SCALE``. The table is
worked out again when ``REFRESH`` of the sample is new. Only finished jobs are told (the simulator
tells each as it finishes), so a job is ranked only by jobs that finished before it is ranked.
"""

from __future__ import annotations

import numpy as np

from apportion.core.duration_estimates import MIN_GPU_S, RecentValues, finished_ratios
from apportion.core.gittins import sample_checkpoints, sample_column, sample_keys

WINDOW = 500  # the most recent finished jobs with an estimate kept
LEAST = 20  # from this many on, an estimated job is ranked by the sample (before: by its lognormal)
REFRESH = 0.05  # the index is worked out again once this share of the sample is new ...
REFRESH_LEAST = 2  # ... and at least this many ratios
SCALE = 2.0 ** 20  # a ratio × SCALE is what the index's table counts in GPU-seconds
LOWEST, HIGHEST = 2.0 ** -20, 2.0 ** 27  # ratios are kept within these


class EstimateRatios:
    """The recent finished jobs' actual ÷ estimated GPU time, and the index of estimated jobs over them."""

    def __init__(self, *, window: int = WINDOW, least: int = LEAST) -> None:
        if window < 1 or least < 1:
            raise ValueError("window and least must be >= 1")
        self.window, self.least = int(window), int(least)
        self._ratios = RecentValues(self.window)
        self._worked_at = -1  # ``seen`` when ``_keys`` was worked out (-1: never)
        self._keys = np.zeros(0)

    @property
    def ready(self) -> bool:
        """Whether enough ratios were seen to rank estimated jobs by them."""
        return self.seen >= self.least

    def observe(self, gpu_s: np.ndarray, estimated_gpu_s: np.ndarray) -> None:
        """Finished jobs, oldest first: the GPU-seconds each took and its estimate (NaN: none, left out)."""
        self._ratios.add(np.clip(finished_ratios(gpu_s, estimated_gpu_s), LOWEST, HIGHEST))

    @property
    def seen(self) -> int:
        """Finished jobs with an estimate told so far."""
        return self._ratios.seen

    def sample(self) -> np.ndarray:
        """The sorted ratios of the most recent finished jobs with an estimate (at most ``window``)."""
        return np.sort(self._ratios.values())

    def keys(self, estimated_gpu_s: np.ndarray, done_gpu_s: np.ndarray) -> np.ndarray:
        """[n] 1 / the Gittins index (GPU-seconds) of jobs with these estimates that did ``done_gpu_s``:
        the estimate × the sample's index at what they did for it; NaN while not ``ready``."""
        estimated = np.maximum(np.asarray(estimated_gpu_s, dtype=np.float64), MIN_GPU_S)
        if not self.ready:
            return np.full(len(estimated), np.nan)
        kept = min(self.seen, self.window)
        if self.seen - self._worked_at >= max(REFRESH_LEAST, REFRESH * kept):
            self._keys = sample_keys(self.sample() * SCALE)
            self._worked_at = self.seen
        done = np.maximum(np.nan_to_num(np.asarray(done_gpu_s, dtype=np.float64), nan=0.0), 0.0)
        return self._keys[sample_column(done / estimated * SCALE)] * (estimated / SCALE)

    @staticmethod
    def checkpoints(estimated_gpu_s: np.ndarray, done_gpu_s: np.ndarray, ahead: int) -> np.ndarray:
        """[n, ahead] the next ``ahead`` GPU times past ``done_gpu_s`` at which each job's key may
        change: its estimate ÷ SCALE × each quarter doubling (the columns of ``sample_column``)."""
        unit = np.maximum(np.asarray(estimated_gpu_s, dtype=np.float64), MIN_GPU_S) / SCALE
        return sample_checkpoints(done_gpu_s, ahead, unit)
