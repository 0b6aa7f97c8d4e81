"""The simulator's side of duration prediction: it tells the predictor about each job when the
job finishes, and asks it about the active jobs each round, so a prediction only ever uses
jobs that had finished by then.

Jobs with the same group at every level of the predictor's ladder get the same prediction, so
each round asks once per such group, not once per job; and nothing is asked again until a
job finished or arrived.
"""

from __future__ import annotations

import numpy as np

from apportion.core.durations import DurationPredictor, gpu_seconds
from apportion.core.jobs import JobTable


class HistoryFeed:
    """A predictor fed with the replay's finished jobs, and what it predicted for each job."""

    def __init__(self, jobs: JobTable, rates: np.ndarray, predictor: DurationPredictor | None = None) -> None:
        """``rates``: [n, T] steps/s of each job on each GPU type (its GPU time is at the fastest)."""
        self.predictor = predictor if predictor is not None else DurationPredictor()
        groups = self.predictor.groups(user=jobs.user, name=jobs.name, queue=jobs.queue, num_gpus=jobs.num_gpus,
                                       submit_time_s=jobs.submit_time_s)
        self.alike, self.alike_of = np.unique(groups, axis=0, return_inverse=True)  # jobs with the same groups
        self.alike_of = self.alike_of.reshape(-1)
        self.gpu_s = gpu_seconds(jobs.total_steps, jobs.num_gpus, rates.max(axis=1))  # what each turns out to need
        n = len(jobs)
        self.first_gpu_s = np.full(n, np.nan)  # each job's first prediction (on arrival), for measuring it
        self.first_log_sd = np.full(n, np.nan)
        self._asked: tuple[int, bytes] | None = None
        self._answer: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))

    def finished(self, rows: np.ndarray, finish_s: np.ndarray) -> None:
        """Jobs (JobTable rows) that did their last step at ``finish_s``, told in that order."""
        rows = rows[np.argsort(finish_s, kind="stable")]
        rows = rows[np.isfinite(self.gpu_s[rows])]
        if len(rows):
            self.predictor.observe(self.alike[self.alike_of[rows]], self.gpu_s[rows])

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[rows] predicted GPU-seconds and log standard deviation of the jobs at ``rows``."""
        asked = (self.predictor.observed, rows.tobytes())
        if asked == self._asked:
            return self._answer
        if len(self.alike) <= len(rows):  # fewer kinds of jobs than jobs: predict each kind
            prediction = self.predictor.predict(self.alike)
            which = self.alike_of[rows]
        else:
            alike, which = np.unique(self.alike_of[rows], return_inverse=True)
            prediction = self.predictor.predict(self.alike[alike])
        gpu_s, log_sd = prediction.gpu_s[which.reshape(-1)], prediction.log_sd[which.reshape(-1)]
        new = np.isnan(self.first_gpu_s[rows])
        self.first_gpu_s[rows[new]] = gpu_s[new]
        self.first_log_sd[rows[new]] = log_sd[new]
        self._asked, self._answer = asked, (gpu_s, log_sd)
        return self._answer
