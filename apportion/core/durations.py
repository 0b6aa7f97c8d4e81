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
ids (``groups``), computed once per job; ``observe`` and ``predict`` work on arrays of them, a
whole batch of jobs in a fixed number of array operations: each group keeps its recent values in
a ring of its own in one flat array, and recomputes its median and spread only when it is asked
about after it gained a job, all such groups at once (one sort of a [groups, recent] window).

A job may come with its own estimate (a user's guess, a time limit, an external estimator's):
that is its most specific information, and it is predicted from it alone, corrected by how wrong
the estimates of the jobs finished so far were, and by how wrong its own user's were, where the
ladder has a ``user`` level (apportion.core.duration_estimates); a job without one walks the ladder.

GPU time here is GPU-seconds at the job's fastest speed (steps × GPUs ÷ its fastest steps/s),
so that it does not depend on which GPU type a job happened to run on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from apportion.core.duration_estimates import EstimateBias
from apportion.core.estimate_ratios import EstimateRatios
from apportion.core.duration_samples import LEAST, WINDOW, DurationSamples

FEATURES = ("user", "name", "queue", "gpus", "hour")
LADDER: tuple[tuple[str, ...], ...] = (
    ("user", "name", "gpus"), ("user", "name"), ("user",), ("queue", "gpus"), ("queue",), ("gpus",), (),
)  # most specific first; () is every job
PRIOR_GPU_S = 3600.0  # the prediction with no history at all: one GPU-hour ...
PRIOR_LOG_SD = 2.0  # ... give or take a factor of e**2
MIN_LOG_SD = 0.1  # the least uncertainty a prediction admits (a group of identical jobs)
IQR_TO_SD = 1.349  # a normal's interquartile range over its standard deviation
QUARTILES = np.array([0.25, 0.5, 0.75])
# the rows of a group's entry in the predictor's table, each a [2] pair (median, spread) but the size
PULL, KEEP, CENTRE, SIZE = slice(0, 2), slice(2, 4), slice(4, 6), 6


@dataclass(frozen=True)
class Prediction:
    """Predicted GPU time of each job: a lognormal's median and log standard deviation."""

    gpu_s: np.ndarray  # [n] median GPU-seconds at the job's fastest speed
    log_sd: np.ndarray  # [n]
    level: np.ndarray  # [n] the most specific ladder level with history (index into levels), -1: none
    # [n] the group whose sample of finished jobs ranks each job (``DurationPredictor.samples``), -1: none;
    # None when the predictor keeps no samples
    sample_group: np.ndarray | None = None
    # [n] bool: predicted from the job's own estimate (then ``level`` is the ladder's, unused); None: no estimates
    estimated: np.ndarray | None = None

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
        # per level: groups given ids by a first ``groups`` but not yet put in that map (only a later one needs
        # them): each call's codes, rows (None: all), feature columns and first id
        self._unkeyed: list[list[tuple]] = [[] for _ in self.levels]
        self._groups = 0  # ids given so far
        # the groups' recent log GPU-seconds: each group a ring of ``_capacity`` values from ``_start`` in
        # ``_values`` (as many as it has jobs, up to ``recent``; more if it is told more), of which it
        # has filled the first ``_seen`` (all, once it has seen more than it keeps: the oldest make way)
        self._values = np.zeros(self.recent)  # at least ``recent`` beyond the last ring: a window can be read
        self._used = 0
        # per id, and a sentinel at the end for id -1 (a group of no jobs): where its ring is, how many
        # values it has seen; a column of the table (the group's pulls, what they leave, its median and
        # spread, its size: rows PULL, KEEP, CENTRE, SIZE), and whether it gained jobs since it was computed
        self._start = np.zeros(1, dtype=np.int64)
        self._capacity = np.zeros(1, dtype=np.int64)
        self._room = np.zeros(1, dtype=np.int64)  # the capacity, or no limit once it holds ``recent``
        self._seen = np.zeros(1, dtype=np.int64)
        self._table = _empty_table(1)
        self._stale = np.zeros(1, dtype=bool)
        self.observed = 0  # finished jobs seen
        self.samples: DurationSamples | None = None  # each group's recent GPU times, once ``keep_samples``
        # how wrong the finished jobs' own estimates were: what corrects a job's estimate
        self.estimates = EstimateBias(recent=self.recent, shrinkage=self.shrinkage, min_log_sd=MIN_LOG_SD)
        self.estimate_ratios: EstimateRatios | None = None  # their recent ratios as a sample, once kept
        # the ladder's level of users alone: a job's group there is its user, whose estimates are corrected apart
        self._user_level = self.levels.index(("user",)) if ("user",) in self.levels else None
        # what a group's entry takes from how many values it keeps (1 … ``recent``): where its quartiles lie
        # in its sorted values (between ``_below`` and ``_above``, ``_fraction`` of the way), its pulls and
        # what they leave, its size; and the offsets of a window's rows
        last = np.arange(-1, self.recent)[:, None]
        at = last * QUARTILES
        self._below = at.astype(np.int64)
        self._above = np.minimum(self._below + 1, np.maximum(last, 0))
        self._fraction = at - self._below
        size = np.arange(self.recent + 1, dtype=np.float64)
        of = np.stack((size, size - 1.0))  # of the median, of the spread
        with np.errstate(divide="ignore", invalid="ignore"):  # a group of no values is never computed
            pull = of / (of + self.shrinkage)
        self._of_size = _empty_table(self.recent + 1)
        self._of_size[PULL], self._of_size[KEEP], self._of_size[SIZE] = pull, 1.0 - pull, size
        self._columns = np.arange(self.recent)
        self._rows = np.zeros((0, 1), dtype=np.int64)

    def keep_samples(self, window: int = WINDOW, least: int = LEAST) -> DurationSamples:
        """From now on also keep each group's last ``window`` GPU times as a sample
        (apportion.core.duration_samples), for ranking by the Gittins index over them."""
        if self.samples is None:
            self.samples = DurationSamples(window=window, least=least)
        return self.samples

    def keep_estimate_ratios(self) -> EstimateRatios:
        """From now on also keep the finished jobs' actual ÷ estimated GPU time as a sample
        (apportion.core.estimate_ratios), for ranking estimated jobs by the Gittins index over it."""
        if self.estimate_ratios is None:
            self.estimate_ratios = EstimateRatios()
        return self.estimate_ratios

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
        known = self._groups
        coded: dict[str, tuple[np.ndarray, int]] = {}  # each feature: its values' codes, and how many
        out = np.full((n, len(self.levels)), -1, dtype=np.int64)
        # the features' values together as one code (0, 1, … each used), and which are blank, by leading features
        prefixes: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray | None]] = {(): (np.zeros(n, dtype=np.int64),
                                                                                      None)}
        for k, level in enumerate(self.levels):
            for end in range(1, len(level) + 1):
                if level[:end] in prefixes:
                    continue
                feature = level[end - 1]
                if feature not in coded:
                    coded[feature] = _codes(columns[feature])
                codes, count = coded[feature]
                combined, blank = prefixes[level[:end - 1]]
                if columns[feature].dtype == object and (columns[feature] == "").any():
                    blank = columns[feature] == "" if blank is None else blank | (columns[feature] == "")
                prefixes[level[:end]] = _dense(combined * count + codes), blank
            combined, blank = prefixes[level]
            rows = None if blank is None else np.flatnonzero(~blank)
            if rows is not None:
                if not len(rows):
                    continue
                combined = _dense(combined[rows])
            if self._ids[k] or self._unkeyed[k]:  # this level has groups: by their keys, new ids for new ones
                self._key(k)
                everyone = np.arange(n) if rows is None else rows
                _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
                keys = list(zip(*(columns[f][everyone[first]].tolist() for f in level))) if level else [()]
                ids = self._ids_of(k, keys)[inverse.reshape(-1)]
            else:  # the level's first groups: ids in the order of their codes, keyed when next asked
                start = self._new_ids(int(combined.max()) + 1)
                self._unkeyed[k].append((combined, rows, [columns[f] for f in level], start))
                ids = start + combined
            if rows is None:
                out[:, k] = ids
            else:
                out[rows, k] = ids
        if self._groups > known:  # a ring for each new group, as long as it has jobs here (up to ``recent``)
            members = np.bincount(out[out >= known] - known, minlength=self._groups - known)
            self._place(np.arange(known, self._groups), np.minimum(members, self.recent))
        return out

    def observe(self, groups: np.ndarray, gpu_s: np.ndarray, estimated_gpu_s: np.ndarray | None = None) -> None:
        """Learn from finished jobs, oldest first: their group ids (from ``groups``) and the
        GPU-seconds each took (and each one's own estimate, NaN: none). A group recomputes its median
        and spread when next asked about."""
        logs = np.log(np.maximum(np.asarray(gpu_s, dtype=np.float64), 1.0))
        groups = np.asarray(groups, dtype=np.int64).reshape(len(logs), len(self.levels))
        if estimated_gpu_s is not None:
            self.estimates.observe(gpu_s, estimated_gpu_s, self.users_of(groups))
            if self.estimate_ratios is not None:
                self.estimate_ratios.observe(gpu_s, estimated_gpu_s)
        if self.samples is not None:
            self.samples.observe(groups, gpu_s)
        if not math.isfinite(logs.sum()):  # a job whose GPU time is not known teaches nothing
            known = np.isfinite(logs)
            logs, groups = logs[known], groups[known]
        told = len(logs)
        self.observed += told
        # each (group, value) pair by group, stably: a job has one group a level, so a group's values
        # stay in the order told; the blank ones (-1) come first and are left out
        ids = groups.ravel()
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        values = logs[order // len(self.levels)]
        blank = int(np.searchsorted(ids, 0))
        if blank:
            ids, values = ids[blank:], values[blank:]
        # each value's place in its group's history: the values the group had seen, then those of this
        # batch before it
        seq = self._seen[ids] + (np.arange(len(ids)) - np.searchsorted(ids, ids))
        if (seq >= self._room[ids]).any():  # more jobs than a group's ring holds: a longer one
            self._outgrown(ids, seq)
        np.maximum.at(self._seen, ids, seq + 1)
        capacity = self._capacity[ids]
        if told > self.recent:  # a group may have been told more than it keeps: only its last ones count
            kept = seq >= self._seen[ids] - capacity
            ids, values, seq, capacity = ids[kept], values[kept], seq[kept], capacity[kept]
        self._values[self._start[ids] + seq % capacity] = values
        self._stale[ids] = True

    def predict(self, groups: np.ndarray, estimated_gpu_s: np.ndarray | None = None) -> Prediction:
        """The GPU time of jobs with these group ids (and their own estimates, NaN: none), from what
        has been observed so far, and the most specific level with history of each. A job with an
        estimate is ranked by its prediction, not by a group's sample (``sample_group`` -1)."""
        groups = np.asarray(groups, dtype=np.int64).reshape(-1, len(self.levels))
        gpu_s, log_sd = self.predict_gpu_s(groups, estimated_gpu_s)
        known = self._table[SIZE, groups] > 0
        estimated = None if estimated_gpu_s is None else np.isfinite(np.asarray(estimated_gpu_s, dtype=np.float64))
        sample_group = None if self.samples is None else self.samples.choose(groups)
        if sample_group is not None and estimated is not None:
            sample_group[estimated] = -1
        return Prediction(gpu_s, log_sd, np.where(known.any(axis=1), np.argmax(known, axis=1), -1), sample_group,
                          estimated)

    def predict_gpu_s(self, groups: np.ndarray,
                      estimated_gpu_s: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs with group ids
        ``groups`` ([n, levels]): ``predict`` without the levels, in the fewest array operations.
        A job with its own estimate (``estimated_gpu_s``, NaN: none) is predicted from it alone.

        From the prior through every level, most general first, each pulling the estimate
        towards its median by n/(n + shrinkage): in closed form, a weighted sum of the levels'
        medians and the prior, the weights products of the pulls."""
        stale = self._stale[groups]  # -1 reads the sentinel at the end: never stale
        if stale.any():
            self._refresh(groups[stale])
        table = self._table[:SIZE, groups]  # [rows, n, levels]; the sentinel for no group
        pull, keep = table[PULL], table[KEEP]  # each [2, n, levels]: of the median, of the spread
        left = np.multiply.accumulate(keep, axis=2)  # [..., k]: what levels 0..k (the more specific) leave
        terms = np.divide(left, keep)
        terms *= pull
        terms *= table[CENTRE]
        log_median, log_sd = left[..., -1] * self._prior + np.add.reduce(terms, axis=2)
        gpu_s, log_sd = np.exp(log_median), np.maximum(log_sd, MIN_LOG_SD)
        if estimated_gpu_s is not None:
            estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
            given = np.isfinite(estimated)
            if given.any():
                gpu_s[given], log_sd[given] = self.correct_estimates(groups[given], estimated[given])
        return gpu_s, log_sd

    def users_of(self, groups: np.ndarray) -> np.ndarray | None:
        """[n] each job's user, as its group id at the ladder's ``user`` level (-1: none); None when the
        ladder has no such level (then every job counts as one user's)."""
        if self._user_level is None:
            return None
        return np.asarray(groups, dtype=np.int64).reshape(-1, len(self.levels))[:, self._user_level]

    def correct_estimates(self, groups: np.ndarray, estimated_gpu_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs (group ids ``groups``) with
        these estimates: each corrected by how wrong its user's and everyone's finished estimates were."""
        return self.estimates.correct(estimated_gpu_s, self.users_of(groups))

    def ranked_estimates(self, groups: np.ndarray, estimated_gpu_s: np.ndarray) -> np.ndarray:
        """[n] jobs' estimates (NaN: none) as the index over everyone's ratios actual ÷ estimate is to read
        them (``estimate_ratios``): stretched by how much more wrong each one's user's estimates were than
        everyone's, so that one user's lies are that user's to pay for."""
        return np.asarray(estimated_gpu_s, dtype=np.float64) * self.estimates.user_factor(self.users_of(groups))

    def _ids_of(self, k: int, keys: list[tuple]) -> np.ndarray:
        """The ids of level ``k``'s groups with these keys, new ids for new keys."""
        known = self._ids[k]
        ids = np.fromiter(map(known.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        new = np.flatnonzero(ids < 0)
        ids[new] = np.arange(self._new_ids(len(new)), self._groups)
        known.update(zip(map(keys.__getitem__, new.tolist()), ids[new].tolist()))
        return ids

    def _key(self, k: int) -> None:
        """Put level ``k``'s groups given ids without their keys (a first ``groups``) in its key -> id map."""
        for codes, rows, features, start in self._unkeyed[k]:
            _, first = np.unique(codes, return_index=True)
            if rows is not None:
                first = rows[first]
            keys = zip(*(feature[first].tolist() for feature in features)) if features else [()]
            self._ids[k].update(zip(keys, range(start, start + len(first))))
        self._unkeyed[k] = []

    def _new_ids(self, count: int) -> int:
        """The first of ``count`` new group ids, each with an empty column."""
        start = self._groups
        self._groups += count
        if self._groups + 1 > len(self._stale):  # the last column stays a sentinel: id -1
            grow = max(self._groups + 1 - len(self._stale), len(self._stale))
            self._table = np.hstack([self._table, _empty_table(grow)])
            self._stale = np.concatenate([self._stale, np.zeros(grow, dtype=bool)])
            self._start, self._capacity, self._room, self._seen = (
                np.concatenate([column, np.zeros(grow, dtype=np.int64)])
                for column in (self._start, self._capacity, self._room, self._seen))
        return start

    def _place(self, ids: np.ndarray, capacity: np.ndarray) -> None:
        """New rings of ``capacity`` values for groups ``ids``, after the last one; what a group had
        seen moves along (a ring that grows was never full: it had no more values than it holds)."""
        starts = self._used + np.cumsum(capacity) - capacity
        self._used += int(capacity.sum())
        if self._used + self.recent > len(self._values):
            self._values = np.concatenate([self._values, np.zeros(max(self._used + self.recent - len(self._values),
                                                                      len(self._values)))])
        for gid in ids[self._seen[ids] > 0].tolist():  # only a ring that grows
            seen, was, now = self._seen[gid], self._start[gid], starts[np.searchsorted(ids, gid)]
            self._values[now:now + seen] = self._values[was:was + seen]
        self._start[ids], self._capacity[ids] = starts, capacity
        self._room[ids] = np.where(capacity < self.recent, capacity, np.iinfo(np.int64).max)

    def _outgrown(self, ids: np.ndarray, seq: np.ndarray) -> None:
        """Longer rings for the groups that will have seen more values (``seq``: each value's place
        in its group's history) than their rings hold: twice as long, or as many, up to ``recent``."""
        over = seq >= self._room[ids]
        outgrown = np.unique(ids[over])
        needed = np.zeros(len(self._seen), dtype=np.int64)
        np.maximum.at(needed, ids[over], seq[over] + 1)
        self._place(outgrown, np.minimum(np.maximum(2 * self._capacity[outgrown], needed[outgrown]), self.recent))

    def _refresh(self, ids: np.ndarray) -> None:
        """Recompute the table's entries of groups ``ids`` (some may repeat) from their recent jobs:
        all at once, each group's values a row of one window, sorted, its quartiles interpolated
        between neighbours as numpy's are."""
        count = np.minimum(self._seen[ids], self._capacity[ids])  # the values each group keeps, >= 1
        window = self._values[self._start[ids][:, None] + self._columns]
        window[self._columns >= count[:, None]] = np.inf  # past a group's values: sorted last, never read
        window.sort(axis=1)
        if len(ids) > len(self._rows):
            self._rows = np.arange(2 * len(ids))[:, None] * self.recent
        rows = self._rows[:len(ids)]
        window = window.ravel()
        low = window[rows + self._below[count]]
        quartile = low + self._fraction[count] * (window[rows + self._above[count]] - low)
        entries = self._of_size[:, count]
        entries[CENTRE] = quartile[:, 1], (quartile[:, 2] - quartile[:, 0]) / IQR_TO_SD
        self._table[:, ids] = entries
        self._stale[ids] = False


def _empty_table(columns: int) -> np.ndarray:
    """Table entries of groups that have seen no job: no pull (all kept), median and spread 0."""
    table = np.zeros((SIZE + 1, columns))
    table[KEEP] = 1.0
    return table


def gpu_seconds(steps: np.ndarray, num_gpus: np.ndarray, fastest_steps_per_s: np.ndarray) -> np.ndarray:
    """GPU-seconds that ``steps`` take on ``num_gpus`` GPUs at ``fastest_steps_per_s`` (NaN where 0)."""
    steps = np.asarray(steps, dtype=np.float64)
    fastest = np.asarray(fastest_steps_per_s, dtype=np.float64)
    return np.divide(steps * np.asarray(num_gpus, dtype=np.float64), fastest, out=np.full(steps.shape, np.nan),
                     where=fastest > 0)


def remaining_gpu_s(predicted_gpu_s: np.ndarray, log_sd: np.ndarray, done_gpu_s: np.ndarray) -> np.ndarray:
    """The GPU-seconds still to go of jobs whose GPU time is predicted lognormal around
    ``predicted_gpu_s`` (log standard deviation ``log_sd``), given each has done ``done_gpu_s``.

    Short of its prediction, the median of the lognormal's tail beyond what it did, less what it
    did: well short of it, about the prediction minus what it did. A job that reaches its
    prediction unfinished shows the prediction wrong, and a lognormal as sure as the prediction
    was would still believe it all but done (70 GPU-s predicted with log sd 0.18, 3,600 done:
    20 s left). So from there on it is believed to have at least as much again to go as it did
    (least-attained-service's belief about every job: the median of a Pareto tail of index 1),
    rounded up to its prediction times a power of two: the prediction × 2**(k + 1) once it has
    done the prediction × 2**k. What it is believed to have left changes only at those points,
    where the ordering policies revisit it, and jobs between the same two keep their order
    instead of taking turns.
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
        tail = total * np.exp(sd * z_total) - done
        with np.errstate(divide="ignore"):
            doublings = np.floor(np.log2(done / total) + 1e-12)
        left[started] = np.where(done >= total, total * np.exp2(doublings + 1.0), tail)
    return np.maximum(left, 0.0)


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
    values = column.tolist()
    code = {value: i for i, value in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(code.__getitem__, values), dtype=np.int64, count=len(values)), len(code)


def _dense(codes: np.ndarray) -> np.ndarray:
    """Codes renumbered 0, 1, … in their order, each used: np.unique's inverse, by a table when they
    are few enough (no sort)."""
    if not len(codes):
        return codes
    top = int(codes.max()) + 1
    if top > 4 * len(codes) + 1024:
        return np.unique(codes, return_inverse=True)[1].reshape(-1)
    used = np.zeros(top, dtype=bool)
    used[codes] = True
    return (np.cumsum(used) - 1)[codes]
