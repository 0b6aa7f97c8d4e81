"""The simulator's side of duration prediction: it tells the predictor about each job when the
job finishes, and asks it about the active jobs each round, so a prediction only ever uses
jobs that had finished by then.

A job is predicted when the scheduler first sees it, from every job finished by then; the
jobs already there are predicted again each time the history has grown by 1% since they last
were (more often would change little and cost a prediction of every active job each round).
When many jobs are predicted again at once, jobs with the same group at every level of the
predictor's ladder are predicted once for all. A job with its own estimate (the trace's
``estimated_duration_s``) is predicted from it, and the predictor learns how wrong estimates are
from the finished jobs that had one (ranking by samples: it also keeps their ratios actual ÷
estimate as a sample, apportion.core.estimate_ratios, which ranks the estimated jobs).
"""

from __future__ import annotations

import numpy as np

from apportion.core.durations import DurationPredictor, gpu_seconds
from apportion.core.jobs import JobTable

REFRESH = 0.01  # the jobs waiting or running are predicted again when the history grew by 1%
ALIKE_FROM = 256  # predicting more jobs than this at once, jobs alike are predicted once


class HistoryFeed:
    """A predictor fed with the replay's finished jobs, and what it predicted for each job."""

    def __init__(self, jobs: JobTable, rates: np.ndarray, predictor: DurationPredictor | None = None, *,
                 samples: bool = False) -> None:
        """``rates``: [n, T] steps/s of each job on each GPU type (its GPU time is at the fastest);
        ``samples``: also keep each group's recent GPU times, and say which group ranks each job
        (a given predictor that kept none starts them from the jobs that finish in the replay)."""
        self.predictor = predictor if predictor is not None else DurationPredictor()
        self.samples = self.predictor.keep_samples() if samples else None
        self.groups = self.predictor.groups(user=jobs.user, name=jobs.name, queue=jobs.queue,
                                            num_gpus=jobs.num_gpus, submit_time_s=jobs.submit_time_s)
        fastest = rates.max(axis=1)
        self.gpu_s = gpu_seconds(jobs.total_steps, jobs.num_gpus, fastest)  # what each turns out to need
        # each job's own estimate in the same unit (NaN: none); None: no job has one
        self.estimated_gpu_s = (None if jobs.estimated_steps is None
                                else gpu_seconds(jobs.estimated_steps, jobs.num_gpus, fastest))
        # ranking by samples, the estimated jobs are ranked by the finished ones' actual ÷ estimate
        self.ratios = (self.predictor.keep_estimate_ratios()
                       if samples and self.estimated_gpu_s is not None else None)
        n = len(jobs)
        self.first_gpu_s = np.full(n, np.nan)  # each job's first prediction (on arrival), for measuring it
        self.first_log_sd = np.full(n, np.nan)
        self._gpu_s = np.full(n, np.nan)  # each job's latest prediction
        self._log_sd = np.full(n, np.nan)
        self._sample_group = np.full(n, -1, dtype=np.int64)  # the group whose sample ranks each job (-1: none)
        self._all_at = -1  # finished jobs the predictor had seen when every active job was last predicted

    def finished(self, rows: np.ndarray, finish_s: np.ndarray) -> None:
        """Jobs (JobTable rows) that did their last step at ``finish_s``, told in that order."""
        if len(rows) > 1:
            rows = rows[np.argsort(finish_s, kind="stable")]
        if len(rows):  # the predictor leaves out a job whose GPU time is not known
            self.predictor.observe(self.groups[rows], self.gpu_s[rows],
                                   None if self.estimated_gpu_s is None else self.estimated_gpu_s[rows])

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[rows] predicted GPU-seconds and log standard deviation of the jobs at ``rows``: a job new
        to the scheduler from every job finished so far; the others again once the history grew by
        ``REFRESH`` (a share of it) since they were last predicted all together."""
        observed = self.predictor.observed
        if observed > self._all_at and observed >= self._all_at * (1 + REFRESH):
            self._all_at = observed
            self._predict(rows)
            new = rows[np.isnan(self.first_gpu_s[rows])]
            self.first_gpu_s[new], self.first_log_sd[new] = self._gpu_s[new], self._log_sd[new]
        else:
            new = rows[np.isnan(self._gpu_s[rows])]
            if len(new):
                self.first_gpu_s[new], self.first_log_sd[new] = self._predict(new)
        return self._gpu_s[rows], self._log_sd[rows]

    def ranked_estimates(self, rows: np.ndarray) -> np.ndarray:
        """[rows] the jobs' own estimates (NaN: none) as the index over the ratios actual ÷ estimate reads
        them: each stretched by how much more wrong its user's estimates were than everyone's."""
        return self.predictor.ranked_estimates(self.groups[rows], self.estimated_gpu_s[rows])

    def sample_group(self, rows: np.ndarray) -> np.ndarray:
        """[rows] the group whose sample ranks each job, as of its latest prediction (-1: none)."""
        return self._sample_group[rows]

    def _predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predict the jobs at ``rows`` from every job finished so far; what they are predicted."""
        groups = self.groups[rows]
        if len(rows) <= ALIKE_FROM:
            gpu_s, log_sd = self.predictor.predict_gpu_s(groups)
        else:
            alike, which = np.unique(groups, axis=0, return_inverse=True)
            gpu_s, log_sd = self.predictor.predict_gpu_s(alike)
            which = which.reshape(-1)
            gpu_s, log_sd = gpu_s[which], log_sd[which]
        estimated = None if self.estimated_gpu_s is None else self.estimated_gpu_s[rows]
        if estimated is not None:  # a job's own estimate, corrected as the finished jobs' estimates say
            given = np.isfinite(estimated)
            gpu_s[given], log_sd[given] = self.predictor.correct_estimates(groups[given], estimated[given])
        self._gpu_s[rows], self._log_sd[rows] = gpu_s, log_sd
        if self.samples is not None:
            self._sample_group[rows] = self.samples.choose(groups)
            if estimated is not None:  # ranked by its own prediction, not by its group's sample
                self._sample_group[rows[np.isfinite(estimated)]] = -1
        return gpu_s, log_sd
