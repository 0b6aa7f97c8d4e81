"""Job sizes and durations drawn the way Gavel's job generator draws them (Narayanan et al., OSDI'20).

Gavel's generator (stanford-futuredata/gavel, scheduler/utils.py) describes its draws as
"Philly-derived"; they are coarser than apportion's own Philly fit:

- GPUs (its "scale factor"): 1, 2, 4, 8 with probabilities 0.70, 0.10, 0.15, 0.05;
- duration: with probability 0.2 a long job, 60 · 10^U(3, 4) s (16.7 h to 6.9 days), else
  60 · 10^U(1.5, 3) s (31.6 min to 16.7 h); log-uniform within each band.
"""

from __future__ import annotations

import numpy as np

GAVEL_GPU_COUNTS = np.array([1, 2, 4, 8])
GAVEL_GPU_COUNT_PROBABILITIES = np.array([0.70, 0.10, 0.15, 0.05])
LONG_JOB_PROBABILITY = 0.2
LONG_LOG10_MINUTES = (3.0, 4.0)  # 1,000 to 10,000 minutes
SHORT_LOG10_MINUTES = (1.5, 3.0)  # 31.6 to 1,000 minutes


def gavel_gpu_counts(rng: np.random.Generator, n: int, *, multi_gpu: bool = True) -> np.ndarray:
    """[n] GPUs per job: Gavel's 1/2/4/8 mix, or all 1 (``multi_gpu=False``, Gavel's default)."""
    draw = GAVEL_GPU_COUNTS[rng.choice(len(GAVEL_GPU_COUNTS), size=n, p=GAVEL_GPU_COUNT_PROBABILITIES)]
    return draw if multi_gpu else np.ones(n, dtype=draw.dtype)


def gavel_durations(rng: np.random.Generator, n: int) -> np.ndarray:
    """[n] seconds each job takes on its reference GPUs: 20% long, 80% short, log-uniform in each band."""
    long = rng.random(n) < LONG_JOB_PROBABILITY
    low = np.where(long, LONG_LOG10_MINUTES[0], SHORT_LOG10_MINUTES[0])
    high = np.where(long, LONG_LOG10_MINUTES[1], SHORT_LOG10_MINUTES[1])
    return 60.0 * 10.0 ** rng.uniform(low, high)
