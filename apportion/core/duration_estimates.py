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

Users differ: one guesses well, another always asks for twice what a job takes, a hostile one says
every job is a minute. Told who each finished job's user is, it also keeps each user's own recent
ratios, and corrects a user's estimate by them alone, shrunk towards no correction while the user
has few: the bias n / (n + shrinkage) × the user's median, the spread pulled from ``prior_log_sd``
by (n − 1) / (n − 1 + shrinkage). So a user's lies soon cost that user, and never change how
another user's estimates are read (a newcomer's are read as given, with the prior's spread, until
some of theirs finish). Without users (user -1) every estimate is read by the cluster-wide
correction, as if all jobs were one user's.
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
        # each user's own: user id -> its recent log ratios, and -> its (bias, log sd) or None: stale
        self._users: dict[int, RecentValues] = {}
        self._user_learnt: dict[int, tuple[float, float] | None] = {}

    def observe(self, gpu_s: np.ndarray, estimated_gpu_s: np.ndarray, users: np.ndarray | None = None) -> None:
        """Finished jobs, oldest first: the GPU-seconds each took and its estimate (NaN: none, left out),
        and each one's user (an integer id, -1: none; None: no users)."""
        actual = np.asarray(gpu_s, dtype=np.float64)
        estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
        both = np.isfinite(actual) & np.isfinite(estimated)
        if not both.any():
            return
        logs = np.log(finished_ratios(actual, estimated))
        self._ratios.add(logs)
        self._learnt = None
        if users is None:
            return
        users = np.asarray(users, dtype=np.int64)[both]
        for user in np.unique(users[users >= 0]).tolist():  # per user told, not per job
            ring = self._users.get(user)
            if ring is None:
                ring = self._users[user] = RecentValues(self.recent)
            ring.add(logs[users == user])
            self._user_learnt[user] = None

    @property
    def seen(self) -> int:
        """Finished jobs with an estimate told so far."""
        return self._ratios.seen

    def seen_of(self, user: int) -> int:
        """Finished jobs with an estimate told so far of user ``user`` (-1: none)."""
        ring = self._users.get(user)
        return 0 if ring is None else ring.seen

    def learnt(self) -> tuple[float, float]:
        """(log bias, log standard deviation) an estimate is corrected by, from the ratios so far."""
        if self._learnt is None:
            self._learnt = self._correction(self._ratios.values())
        return self._learnt

    def learnt_for(self, users: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """[n] (log bias, log standard deviation) each of these users' estimates is corrected by: a user's
        own record, shrunk towards no correction (the prior's spread) while it is short, and read from no
        one else's; -1 (no user): the cluster-wide correction. None: no users (an empty answer)."""
        if users is None:
            return np.zeros(0), np.zeros(0)
        distinct, which = np.unique(np.asarray(users, dtype=np.int64), return_inverse=True)
        learnt = np.array([self._user_correction(user) for user in distinct.tolist()]).reshape(-1, 2)  # per user
        which = which.reshape(-1)
        return learnt[which, 0], learnt[which, 1]

    def user_factor(self, users: np.ndarray | None) -> np.ndarray | float:
        """[n] how much more each user's estimates are to be stretched than the cluster-wide correction
        stretches estimates (1: no user, or one whose estimates are as wrong as everyone's)."""
        if users is None:
            return 1.0
        return np.exp(self.learnt_for(users)[0] - self.learnt()[0])

    def correct(self, estimated_gpu_s: np.ndarray, users: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """[n] the predicted GPU-seconds and log standard deviation of jobs with these estimates (and
        users, ids from the predictor's user level, -1: none; None: no users)."""
        estimated = np.asarray(estimated_gpu_s, dtype=np.float64)
        if users is None:
            bias, log_sd = self.learnt()
            return estimated * math.exp(bias), np.full(len(estimated), max(log_sd, self.min_log_sd))
        bias, log_sd = self.learnt_for(users)
        return estimated * np.exp(bias), np.maximum(log_sd, self.min_log_sd)

    def _user_correction(self, user: int) -> tuple[float, float]:
        """User ``user``'s (log bias, log sd), from their own ratios alone; -1: the cluster-wide correction."""
        if user < 0:
            return self.learnt()
        if user not in self._users:
            return 0.0, self.prior_log_sd
        learnt = self._user_learnt.get(user)
        if learnt is None:
            learnt = self._user_learnt[user] = self._correction(self._users[user].values())
        return learnt

    def _correction(self, ratios: np.ndarray) -> tuple[float, float]:
        """(log bias, log sd) from log ratios: their median shrunk towards 0 by n / (n + shrinkage), their
        spread pulled from ``prior_log_sd`` by (n − 1) / (n − 1 + shrinkage); none: (0, the prior's)."""
        n = len(ratios)
        if not n:
            return 0.0, self.prior_log_sd
        low, median, high = np.percentile(ratios, [25, 50, 75])
        pull = (n - 1) / (n - 1 + self.shrinkage)
        return float(n / (n + self.shrinkage) * median), float(pull * (high - low) / IQR_TO_SD
                                                                + (1.0 - pull) * self.prior_log_sd)
