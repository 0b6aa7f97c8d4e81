"""How urgent a job is when only the spread of its length is known: its Gittins index.

A predicted duration is a lognormal (a median and a log standard deviation), not a number. When
it is sure, the job that will finish soonest is the one with the least left (shortest first);
when it is wide (a virtual cluster's every 8-GPU job predicted alike, 60-s and 10-hour ones),
what a job has done says more than the prediction: a job that has run a while without finishing
is likely a long one, so the jobs that have done least go first (least attained service, as
Tiresias does with no prediction at all). The Gittins index is the ordering that is best between
the two for the average completion time (Gittins, 1989; Tiresias, NSDI'19, ranks by it given
the distribution of job sizes): the chance that a job finishes within the next stretch of
service, over the service that stretch is expected to take, at the stretch where that is best.
Its inverse, ``service_per_finish``, is GPU-seconds, ranks as what is left does (least first),
and is about the median left for a sure prediction.

For a median of ``m`` the index scales as 1/m, so it is worked out once, for a median of 1, on
a table over the log standard deviation and what a job did, in quarter doublings of its GPU time
from 1/1024 of the median (what it did is counted at those points only: its rank changes there
and nowhere between, where the ordering policies revisit it). A row of the table is worked out
the first time a log sd near it is asked about (0.2 s of CPU; ranking 3,000 jobs then 0.5 ms).
"""

from __future__ import annotations

import math

import numpy as np

LOWEST_DOUBLING = -10  # GPU time below the median × 2**-10 counts as none
HIGHEST_DOUBLING = 40  # above the median × 2**40, as that
DONE_STEP = 0.25  # what a job did is counted at the median × 2**(LOWEST_DOUBLING + DONE_STEP × j)
SD_STEP = 0.05
SD_GRID = np.round(np.arange(0.05, 5.0 + SD_STEP / 2, SD_STEP), 10)  # log sds tabulated (wider ones: 5)
POINTS_PER_DOUBLING = 16  # the grid of service the index's stretches end on, and its integral is taken over
GRID_FROM, GRID_TO = -64, 80  # that grid's span, in doublings of the median


def service_per_finish(median: np.ndarray, log_sd: np.ndarray, done: np.ndarray) -> np.ndarray:
    """[n] 1 / the Gittins index of jobs whose length is lognormal around ``median`` with ``log_sd``,
    each having done ``done`` (the same units as ``median``), counted at the median × a power of 2."""
    median = np.maximum(np.asarray(median, dtype=np.float64), 1e-9)
    column = doubling_column(median, done)
    sd = np.clip(np.asarray(log_sd, dtype=np.float64), SD_GRID[0], SD_GRID[-1])
    where = (sd - SD_GRID[0]) / SD_STEP
    low = np.minimum(np.floor(where).astype(np.int64), len(SD_GRID) - 2)
    part = where - low
    log_table = _rows(np.concatenate((low, low + 1)))
    log_key = log_table[low, column] * (1.0 - part) + log_table[low + 1, column] * part
    return median * np.exp(log_key)


def doubling_column(median: np.ndarray, done: np.ndarray) -> np.ndarray:
    """[n] the table's column for what each job did: 0 for less than the median × 2**LOWEST_DOUBLING,
    else 1 + the DONE_STEPs past that (the last column beyond HIGHEST_DOUBLING)."""
    done = np.maximum(np.asarray(done, dtype=np.float64), 0.0)
    with np.errstate(divide="ignore"):
        steps = np.floor(np.log2(done / median) / DONE_STEP + 1e-9)
    lowest, highest = LOWEST_DOUBLING / DONE_STEP, HIGHEST_DOUBLING / DONE_STEP
    return (np.clip(steps, lowest - 1, highest) - (lowest - 1)).astype(np.int64)


_TABLE = np.full((len(SD_GRID), 2 + int(round((HIGHEST_DOUBLING - LOWEST_DOUBLING) / DONE_STEP))), np.nan)


def _rows(rows: np.ndarray) -> np.ndarray:
    """The table of log(1 / index) for a median of 1 [sds, columns], with ``rows`` worked out."""
    for row in np.unique(rows):
        if np.isnan(_TABLE[row, 0]):
            _TABLE[row] = np.log(_inverse_index(float(SD_GRID[row])))
    return _TABLE


def _inverse_index(sd: float) -> np.ndarray:
    """[columns] 1 / the Gittins index of a lognormal of median 1 and log sd ``sd``, for nothing done
    and for the median × 2**k done, k = LOWEST_DOUBLING … HIGHEST_DOUBLING by DONE_STEP.

    From what is done, ``a``: the best over the grid's points ``b > a`` of the chance to finish by
    ``b`` (1 - S(b)/S(a), S the survival function) over the expected service until then (the
    integral of S(t)/S(a) from a to b, by the trapezoid rule on the grid, in log t)."""
    from scipy.special import log_ndtr

    steps = np.arange(GRID_FROM * POINTS_PER_DOUBLING, GRID_TO * POINTS_PER_DOUBLING + 1)
    log_t = steps * (math.log(2.0) / POINTS_PER_DOUBLING)
    log_survival = log_ndtr(-log_t / sd)
    done_at = np.arange(_TABLE.shape[1] - 1) * DONE_STEP + LOWEST_DOUBLING
    starts = np.concatenate(([0], np.round((done_at - GRID_FROM) * POINTS_PER_DOUBLING).astype(np.int64)))
    ahead = np.arange(len(steps))[None, :] > starts[:, None]  # the stretch's ends b > a
    # S(t)/S(a) from each start on (0 before it), and the integral of S/S(a) up to each point
    ratio = np.where(ahead | (np.arange(len(steps))[None, :] == starts[:, None]),
                     np.exp(np.minimum(log_survival[None, :] - log_survival[starts, None], 0.0)), 0.0)
    integrand = ratio * np.exp(log_t)[None, :]
    pieces = 0.5 * (integrand[:, 1:] + integrand[:, :-1]) * (math.log(2.0) / POINTS_PER_DOUBLING)
    pieces[~ahead[:, 1:]] = 0.0
    service = np.concatenate((np.zeros((len(starts), 1)), np.cumsum(pieces, axis=1)), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        index = np.where(ahead, (1.0 - ratio) / service, 0.0)
    best = index.max(axis=1)
    best[0] = max(best[0], 1e-300)
    return 1.0 / np.maximum(best, 1e-300)


# The index over a sample of finished jobs' GPU time (Tiresias's empirical form): what a job did is
# counted at quarter doublings of a GPU-second (column 0: less than one GPU-second, counted as none;
# column 1 + k: from 2**(k × SAMPLE_STEP) GPU-s), so its rank changes there and nowhere between
SAMPLE_STEP = 0.25
SAMPLE_COLUMNS = 1 + int(48 / SAMPLE_STEP)  # up to 2**48 GPU-s
# fewer of the sample's jobs than this longer than what a job did: the index over them is noise (one
# left: the job is believed all but done as it nears it); it is believed to have as much again to go
# at least (least attained service's belief)
SAMPLE_TAIL = 5


def sample_column(done: np.ndarray) -> np.ndarray:
    """[n] the column of ``sample_keys`` that counts what each job did (GPU-seconds)."""
    done = np.maximum(np.nan_to_num(np.asarray(done, dtype=np.float64), nan=0.0), 0.0)
    with np.errstate(divide="ignore"):
        steps = np.floor(np.log2(np.maximum(done, 1e-300)) / SAMPLE_STEP + 1e-9)
    return np.where(done < 1.0, 0, np.clip(steps, 0, SAMPLE_COLUMNS - 2) + 1).astype(np.int64)


def sample_checkpoints(done: np.ndarray, ahead: int, unit: np.ndarray | float = 1.0) -> np.ndarray:
    """[n, ahead] the next ``ahead`` amounts of work past ``done`` [n] at which a key read off
    ``sample_keys`` may change: ``unit`` × each quarter doubling from 1 on (the columns of ``sample_column``
    for work counted in ``unit``s)."""
    unit = np.broadcast_to(np.asarray(unit, dtype=np.float64), np.shape(done))
    done = np.maximum(np.asarray(done, dtype=np.float64), 1e-300)
    passed = np.maximum(np.ceil(np.log2(done / unit) / SAMPLE_STEP + 1e-9), 0.0)
    return unit[:, None] * np.exp2(SAMPLE_STEP * (passed[:, None] + np.arange(ahead)))


def sample_column_done() -> np.ndarray:
    """[columns] the GPU time each column counts a job as having done (0, then 1, 2**0.25, …)."""
    return np.concatenate(([0.0], np.exp2(np.arange(SAMPLE_COLUMNS - 1) * SAMPLE_STEP)))


def sample_keys(sample: np.ndarray) -> np.ndarray:
    """[columns] 1 / the Gittins index of a job whose GPU time is drawn from ``sample`` (sorted
    GPU-seconds of finished jobs like it), having done each column's GPU time.

    A job that did ``a`` finishes like the sample's jobs longer than ``a``; the stretch of service
    that is best to ask for ends at one of them, ``x_j``: the index is the best over j of the
    share of them that end by ``x_j`` over the service they take until then, on average
    (theirs up to ``x_j`` less ``a``, and ``x_j - a`` from each longer one). With prefix sums,
    every column at once. A job that did more than the whole sample is believed to have as much
    again to go (least attained service's belief): its own GPU time; so is one that did more than
    all but ``SAMPLE_TAIL`` of it, at least."""
    x = np.asarray(sample, dtype=np.float64)
    k = len(x)
    done = sample_column_done()
    if not k:
        return np.maximum(done, 1.0)
    out = np.maximum(done, 1.0)  # past the whole sample
    within = np.flatnonzero(done < x[-1])  # the columns with some of the sample longer: worked out
    done = done[within]
    total = np.concatenate(([0.0], np.cumsum(x)))  # total[j]: the sum of the j shortest
    live = np.searchsorted(x, done, side="right")  # [columns] the first sample longer than what was done
    j = np.arange(k)
    ahead = j[None, :] >= live[:, None]  # [columns, k] the stretch's end x_j is past what was done
    ended = j[None, :] + 1 - live[:, None]  # how many end by x_j (of those past ``a``)
    service = (total[None, 1:] - total[live][:, None] - ended * done[:, None]
               + (k - 1 - j)[None, :] * (x[None, :] - done[:, None]))
    with np.errstate(divide="ignore", invalid="ignore"):
        per_finish = np.where(ahead, service / ended, np.inf)
    keys = per_finish.min(axis=1)
    keys = np.where(k - live < SAMPLE_TAIL, np.maximum(keys, done), keys)
    out[within] = np.maximum(keys, 1e-9)
    return out
