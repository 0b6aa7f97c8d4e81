"""How much GPU time a job will need, learned online from the jobs that finished before it.

Helios (SC'21) found a job's GPU time predictable from the history of similar jobs: the same
user, job name and GPU count. ``DurationPredictor`` keeps, for each group of similar finished
jobs, the log GPU-seconds of its most recent ``recent`` members, and predicts a job's GPU time
from a ladder of groups, most specific first (user+name+GPUs, user+name, user, queue+GPUs,
queue, GPUs, everyone): starting from everyone's median, each level that has seen jobs pulls
the estimate towards its own median by n/(n + ``shrinkage``), so a group of one job moves it
half way and a group of fifty almost all the way. A level is skipped for a job whose feature
there is blank (a trace without users). The uncertainty is the same ladder over each group's
spread (its log GPU-seconds' interquartile range ÷ 1.349): the log standard deviation of a
lognormal around the median.

The predictor sees only what it is told: the simulator and the server tell it about a job when
it finishes, so a prediction never uses a job that had not finished by then. Groups are integer
ids (``groups``), computed once per job; ``observe`` and ``predict`` work on arrays of them. A
group recomputes its median and spread only when it is asked about after it gained a job, from
its recent values kept sorted between times (the few that came and went put in and taken out).

GPU time here is GPU-seconds at the job's fastest speed (steps × GPUs ÷ its fastest steps/s),
so that it does not depend on which GPU type a job happened to run on.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass
from itertools import repeat

import numpy as np

FEATURES = ("user", "name", "queue", "gpus", "hour")
LADDER: tuple[tuple[str, ...], ...] = (
    ("user", "name", "gpus"), ("user", "name"), ("user",), ("queue", "gpus"), ("queue",), ("gpus",), (),
)  # most specific first; () is every job
PRIOR_GPU_S = 3600.0  # the prediction with no history at all: one GPU-hour ...
PRIOR_LOG_SD = 2.0  # ... give or take a factor of e**2
MIN_LOG_SD = 0.1  # the least uncertainty a prediction admits (a group of identical jobs)
IQR_TO_SD = 1.349  # a normal's interquartile range over its standard deviation
KEEP_RECENT = 4  # a group keeps up to this many times ``recent`` values before it drops the older ones
RESORT_AFTER = 8  # a group that gained more values than this since its last summary is sorted afresh
# the rows of a group's entry in the predictor's table, each a [2] pair (median, spread) but the size
PULL, KEEP, CENTRE, SIZE = slice(0, 2), slice(2, 4), slice(4, 6), 6


@dataclass(frozen=True)
class Prediction:
    """Predicted GPU time of each job: a lognormal's median and log standard deviation."""

    gpu_s: np.ndarray  # [n] median GPU-seconds at the job's fastest speed
    log_sd: np.ndarray  # [n]
    level: np.ndarray  # [n] the most specific ladder level with history (index into levels), -1: none

    def __len__(self) -> int:
        return len(self.gpu_s)


class DurationPredictor:
    """Online grouped estimate of jobs' GPU time from the jobs finished so far."""

    def __init__(self, levels: tuple[tuple[str, ...], ...] = LADDER, *, recent: int = 50,
                 shrinkage: float = 1.0, prior_gpu_s: float = PRIOR_GPU_S,
                 prior_log_sd: float = PRIOR_LOG_SD) -> None:
        unknown = sorted({f for level in levels for f in level} - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown job feature '{unknown[0]}' (known: {', '.join(FEATURES)})")
        if recent < 1 or not shrinkage > 0 or not prior_gpu_s > 0 or not prior_log_sd > 0:
            raise ValueError("recent must be >= 1, and shrinkage, prior_gpu_s and prior_log_sd > 0")
        self.levels = tuple(tuple(level) for level in levels)
        self.recent = int(recent)
        self.shrinkage = float(shrinkage)
        self.prior_log = math.log(prior_gpu_s)
        self.prior_log_sd = float(prior_log_sd)
        self._prior = np.array([self.prior_log, self.prior_log_sd])[:, None]
        # a group's id is unique over all levels; per level: its key -> its id
        self._ids: list[dict[tuple, int]] = [{} for _ in self.levels]
        # per id: the group's log GPU-seconds, oldest first, of which the last ``recent`` count (older
        # ones are dropped in bulk, now and then); and those last ones sorted as they were when the
        # group's entry was last computed, with how many values it had then (-1: sort them afresh)
        self._recent: list[list | None] = []
        self._sorted: list[list | None] = []
        self._sorted_upto: list[int] = []
        # per id, and a sentinel at the end for id -1 (a group of no jobs): a column of the table (the
        # group's pulls, what they leave, its median and spread, its size: rows PULL, KEEP, CENTRE,
        # SIZE), and whether it gained jobs since it was computed
        self._table = _empty_table(1)
        self._stale = np.zeros(1, dtype=bool)
        self.observed = 0  # finished jobs seen

    @property
    def level_names(self) -> tuple[str, ...]:
        """Each level as words: ``user+name+gpus``, …, ``all``."""
        return tuple("+".join(level) or "all" for level in self.levels)

    def groups(self, *, user, name, queue, num_gpus, submit_time_s) -> np.ndarray:
        """[n, levels] each job's group id at each level, -1 where a feature it needs is blank.

        ``user``, ``name``, ``queue``: strings ("" or None: unknown); ``num_gpus``; ``submit_time_s``
        (its hour of the day, counted from 0 s, is the ``hour`` feature). Unseen groups get new ids.
        """
        gpus = np.asarray(num_gpus, dtype=np.int64)
        n = len(gpus)
        columns = {
            "user": _text(user, n), "name": _text(name, n), "queue": _text(queue, n), "gpus": gpus,
            "hour": (np.asarray(submit_time_s, dtype=np.float64) // 3600 % 24).astype(np.int64),
        }
        coded: dict[str, tuple[np.ndarray, int]] = {}  # each feature: its values' codes, and how many
        out = np.full((n, len(self.levels)), -1, dtype=np.int64)
        # the features' values together as one code, and which are blank, by leading features
        prefixes: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {(): (np.zeros(n, dtype=np.int64),
                                                                               np.zeros(n, dtype=bool))}
        for k, level in enumerate(self.levels):
            for end in range(1, len(level) + 1):
                if level[:end] in prefixes:
                    continue
                feature = level[end - 1]
                if feature not in coded:
                    coded[feature] = _codes(columns[feature])
                codes, count = coded[feature]
                combined, blank = prefixes[level[:end - 1]]
                if columns[feature].dtype == object:
                    blank = blank | (columns[feature] == "")
                prefixes[level[:end]] = np.unique(combined * count + codes, return_inverse=True)[1].reshape(-1), blank
            combined, blank = prefixes[level]
            rows = np.flatnonzero(~blank)
            if not len(rows):
                continue
            _, first, inverse = np.unique(combined[rows], return_index=True, return_inverse=True)
            keys = list(zip(*(columns[f][rows[first]].tolist() for f in level))) if level else [()]
            out[rows, k] = self._ids_of(k, keys)[inverse.reshape(-1)]
        return out

    def observe(self, groups: np.ndarray, gpu_s: np.ndarray) -> None:
        """Learn from finished jobs, oldest first: their group ids (from ``groups``) and the
        GPU-seconds each took. A group recomputes its median and spread when next asked about."""
        logs = np.log(np.maximum(np.asarray(gpu_s, dtype=np.float64), 1.0))
        groups = np.asarray(groups, dtype=np.int64).reshape(len(logs), len(self.levels))
        if np.isnan(logs.sum()):  # a job whose GPU time is not known teaches nothing
            known = ~np.isnan(logs)
            logs, groups = logs[known], groups[known]
        logs = logs.tolist()
        recent, most, upto = self._recent, self.recent, self._sorted_upto
        keep = KEEP_RECENT * most
        for column in groups.T.tolist():
            for gid, value in zip(column, logs):
                if gid < 0:
                    continue
                values = recent[gid]
                if values is None:
                    recent[gid] = [value]
                else:
                    values.append(value)
                    if len(values) > keep:
                        del values[:-most]
                        upto[gid] = -1
        self._stale[groups.ravel()] = True
        self._stale[-1] = False  # id -1: no group
        self.observed += len(logs)

    def predict(self, groups: np.ndarray) -> Prediction:
        """The GPU time of jobs with these group ids, from what has been observed so far, and the
        most specific level with history of each."""
        groups = np.asarray(groups, dtype=np.int64).reshape(-1, len(self.levels))
        gpu_s, log_sd = self.predict_gpu_s(groups)
        known = self._table[SIZE, groups] > 0
        return Prediction(gpu_s, log_sd, np.where(known.any(axis=1), np.argmax(known, axis=1), -1))

    def predict_gpu_s(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs with group ids
        ``groups`` ([n, levels]): ``predict`` without the levels, in the fewest array operations.

        From the prior through every level, most general first, each pulling the estimate
        towards its median by n/(n + shrinkage): in closed form, a weighted sum of the levels'
        medians and the prior, the weights products of the pulls."""
        stale = self._stale[groups]  # -1 reads the sentinel at the end: never stale
        if stale.any():
            self._refresh(np.unique(groups[stale]))
        table = self._table[:, groups]  # [rows, n, levels]; the sentinel for no group
        pull, keep = table[PULL], table[KEEP]  # each [2, n, levels]: of the median, of the spread
        left = np.cumprod(keep, axis=2)  # [..., k]: what levels 0..k (the more specific) leave
        log_median, log_sd = left[..., -1] * self._prior + np.sum(pull * (left / keep) * table[CENTRE],
                                                                           axis=2)
        return np.exp(log_median), np.maximum(log_sd, MIN_LOG_SD)

    def _ids_of(self, k: int, keys: list[tuple]) -> np.ndarray:
        """The ids of level ``k``'s groups with these keys, new ids for new keys."""
        known = self._ids[k]
        start = len(self._recent)
        if known:
            ids = np.fromiter(map(known.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
            new = np.flatnonzero(ids < 0)
            ids[new] = np.arange(start, start + len(new))
            known.update(zip(map(keys.__getitem__, new.tolist()), ids[new].tolist()))
        else:
            ids = np.arange(start, start + len(keys))
            new = ids
            known.update(zip(keys, range(start, start + len(keys))))
        if len(new):
            self._recent.extend([None] * len(new))
            self._sorted.extend([None] * len(new))
            self._sorted_upto.extend([-1] * len(new))
            if len(self._recent) + 1 > self._table.shape[1]:  # the last column stays a sentinel: id -1
                grow = max(len(self._recent) + 1 - self._table.shape[1], self._table.shape[1])
                self._table = np.hstack([self._table, _empty_table(grow)])
                self._stale = np.concatenate([self._stale, np.zeros(grow, dtype=bool)])
        return ids

    def _refresh(self, ids: np.ndarray) -> None:
        """Recompute the table's entries of groups ``ids`` from their recent jobs. A group's recent
        values stay sorted from one time to the next: the few that came and went since are put in
        and taken out (a full sort when many did)."""
        recent, ordered_of, upto, most, shrinkage = self._recent, self._sorted, self._sorted_upto, self.recent, \
            self.shrinkage
        entries = []
        for gid in ids.tolist():
            values, then = recent[gid], upto[gid]
            now = len(values)
            if then < 0 or now - then > RESORT_AFTER:
                ordered = ordered_of[gid] = sorted(values[-most:])
            else:
                ordered = ordered_of[gid]
                if now > most:  # those gone from the most recent
                    for value in values[then - most if then > most else 0:now - most]:
                        del ordered[bisect_left(ordered, value)]
                for value in values[then:]:
                    insort(ordered, value)
            upto[gid] = now
            size, median, spread = _summary(ordered)
            of_median = size / (size + shrinkage)
            of_spread = (size - 1) / (size - 1 + shrinkage)
            entries.append((of_median, of_spread, 1.0 - of_median, 1.0 - of_spread, median, spread, size))
        self._table[:, ids] = np.array(entries).T
        self._stale[ids] = False


def _empty_table(columns: int) -> np.ndarray:
    """Table entries of groups that have seen no job: no pull (all kept), median and spread 0."""
    table = np.zeros((7, columns))
    table[KEEP] = 1.0
    return table


def gpu_seconds(steps: np.ndarray, num_gpus: np.ndarray, fastest_steps_per_s: np.ndarray) -> np.ndarray:
    """GPU-seconds that ``steps`` take on ``num_gpus`` GPUs at ``fastest_steps_per_s`` (NaN where 0)."""
    steps = np.asarray(steps, dtype=np.float64)
    fastest = np.asarray(fastest_steps_per_s, dtype=np.float64)
    return np.divide(steps * np.asarray(num_gpus, dtype=np.float64), fastest, out=np.full(steps.shape, np.nan),
                     where=fastest > 0)


def remaining_gpu_s(predicted_gpu_s: np.ndarray, log_sd: np.ndarray, done_gpu_s: np.ndarray) -> np.ndarray:
    """The median GPU-seconds still to go of jobs whose GPU time is lognormal around
    ``predicted_gpu_s`` (log standard deviation ``log_sd``), given each has done ``done_gpu_s``.

    Well short of its prediction, a job has about the prediction minus what it did left; past
    it, the median of the distribution's tail beyond what it did, which grows as it runs on:
    a job that outlives its prediction is taken to be a long one, as least-attained-service
    would, instead of being put first for ever.
    """
    predicted = np.maximum(predicted_gpu_s, 1e-9)
    done = np.maximum(done_gpu_s, 0.0)
    left = predicted - done
    started = np.flatnonzero(done > 0)  # a job that did nothing has its whole prediction left
    if len(started):
        from scipy.special import log_ndtr, ndtri_exp

        sd = np.maximum(np.asarray(log_sd)[started], MIN_LOG_SD)
        total = predicted[started]
        done = done[started]
        z_done = np.log(done / total) / sd
        # the total t whose tail probability is half the tail beyond what is done: S(t) = S(done) / 2
        z_total = -ndtri_exp(log_ndtr(-z_done) - math.log(2.0))
        left[started] = total * np.exp(sd * z_total) - done
    return np.maximum(left, 0.0)


def _summary(ordered: list[float]) -> tuple[int, float, float]:
    """Count, median and spread (interquartile range ÷ 1.349) of sorted values; quantiles are
    interpolated between neighbours, as numpy's are."""
    count = len(ordered)
    if count == 1:
        return 1, ordered[0], 0.0
    last = count - 1
    at = 0.5 * last
    i = int(at)
    median = ordered[i] + (at - i) * (ordered[i + 1] - ordered[i])
    at = 0.25 * last
    i = int(at)
    low = ordered[i] + (at - i) * (ordered[i + 1] - ordered[i])
    at = 0.75 * last
    i = int(at)
    high = ordered[i] + (at - i) * (ordered[min(i + 1, last)] - ordered[i])
    return count, median, (high - low) / IQR_TO_SD


def _text(values, n: int) -> np.ndarray:
    """A column of strings, "" for missing (None, NaN or no column at all)."""
    if values is None:
        return np.full(n, "", dtype=object)
    out = np.asarray(values, dtype=object)
    if len(out) != n:
        raise ValueError(f"a feature column has {len(out)} values, expected {n}")
    listed = out.tolist()
    if set(map(type, listed)) <= {str}:
        return out
    return np.array(["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in listed], dtype=object)


def _codes(column: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's code (0, 1, … in order of first appearance), and how many codes there are:
    np.unique's inverse without sorting Python objects."""
    if column.dtype != object:
        _, inverse = np.unique(column, return_inverse=True)
        return inverse.reshape(-1), int(inverse.max(initial=-1)) + 1
    code: dict = {}
    values = column.tolist()
    for value in values:
        if value not in code:
            code[value] = len(code)
    return np.fromiter(map(code.__getitem__, values), dtype=np.int64, count=len(values)), len(code)
