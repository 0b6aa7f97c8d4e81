"""The replay's side of admission: arrived jobs whose dependencies have not completed, or whose
privacy claim is not granted yet, wait outside the round; those whose dependency cannot complete,
or whose claim is rejected, end unschedulable, with the reason.

The simulator asks :meth:`HeldJobs.sift` every time it admits arrivals; held jobs are asked
again only after some job ended (a completion is an event the replay stops at) or, with
privacy claims, when jobs arrive (their claims unlock budget) or when the privacy stage said
its answer could change (:meth:`HeldJobs.next_change_s`), so a replay whose held jobs wait for
long-running ones pays nothing per round. The claim of a job is its JobTable row's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from apportion.core.jobs import JobTable
from apportion.mechanism.admission import (Admission, AdmissionContext, AfterStage, Applicants, Outcome, Verdict,
                                           admit_settled)
from apportion.mechanism.privacy_budget import PrivacyStage
from apportion.sim.result import JobStatus

if TYPE_CHECKING:
    from apportion.sim.replay import Replay

# Outcome of each JobStatus, indexed by its value
_OUTCOME_OF_STATUS = np.zeros(max(JobStatus) + 1, dtype=np.int8)
_OUTCOME_OF_STATUS[JobStatus.COMPLETED] = Outcome.COMPLETED
_OUTCOME_OF_STATUS[JobStatus.UNSCHEDULABLE] = Outcome.UNSCHEDULABLE


class HeldJobs:
    """The arrived jobs admission holds back, and the admission that decides when they enter."""

    def __init__(self, jobs: JobTable, privacy: PrivacyStage | None = None) -> None:
        self.jobs = jobs
        self.privacy = privacy
        self.admission = Admission([AfterStage()] if privacy is None else [AfterStage(), privacy])
        self.held = np.zeros(0, dtype=np.int64)  # JobTable rows, in submit order
        self._ended_seen = -1  # replay.ended when the held jobs were last asked
        self._privacy_due = np.inf  # when the privacy stage's answer may change by itself

    @classmethod
    def of(cls, jobs: JobTable, privacy: PrivacyStage | None = None) -> HeldJobs | None:
        """None when no job waits for another and none claims privacy budget: the replay then
        admits every arrival as it is."""
        waits = jobs.after is not None and len(jobs.after.keys)
        return cls(jobs, privacy) if waits or privacy is not None else None

    def next_change_s(self) -> float:
        """When the held jobs' privacy claims may be granted or rejected with no arrival or ending."""
        return self._privacy_due if len(self.held) else np.inf

    def sift(self, replay: Replay, arriving: np.ndarray, reasons: np.ndarray) -> np.ndarray:
        """The rows of ``arriving`` (JobTable rows, schedulable, in submit order) and of the jobs
        held so far that enter the round now, in submit order. The others stay held, or end
        unschedulable with their reason written into ``reasons``. With privacy claims decided at
        arrival (the stage's ``decide``), the held claims and the arrivals are asked at each
        arrival's own time, one arrival time after another, as PrivateKube's scheduler is woken
        (a job run after others is asked now: whether it may go is known as of now only)."""
        if self.privacy is None or self.privacy.decide != "arrival" or not len(arriving):
            return self._sift_at(replay, replay.now, arriving, reasons)
        after = self.jobs.after
        # a job run after others is let in by what they became by now: it is asked now, not at its submit time
        later = np.zeros(len(arriving), dtype=bool) if after is None else np.diff(after.start)[arriving] > 0
        alone = arriving[~later]
        submit = self.jobs.submit_time_s[alone]
        admitted = []
        for group in np.split(np.arange(len(alone)), np.flatnonzero(np.diff(submit)) + 1):
            if len(group):
                admitted.append(self._sift_at(replay, min(float(submit[group[0]]), replay.now), alone[group],
                                              reasons, recheck_all=True))
        if later.any() or (len(self.held) and (replay.ended != self._ended_seen or replay.now >= self._privacy_due)):
            admitted.append(self._sift_at(replay, replay.now, arriving[later], reasons))
        return np.sort(np.concatenate(admitted)) if admitted else arriving[:0]

    def _sift_at(self, replay: Replay, now: float, arriving: np.ndarray, reasons: np.ndarray,
                 recheck_all: bool = False) -> np.ndarray:
        """``sift`` asking at ``now``; ``recheck_all``: ask the held jobs too, whatever changed."""
        recheck = len(self.held) and (recheck_all or replay.ended != self._ended_seen or (
            self.privacy is not None and (len(arriving) or now >= self._privacy_due)))
        if not recheck and not len(arriving):
            return arriving
        asking = np.concatenate([self.held, arriving]) if recheck else arriving
        context = AdmissionContext(now, lambda keys: _OUTCOME_OF_STATUS[replay.status[keys]],
                                   lambda key: f"job {self.jobs.job_id[key]}")
        asks = 0

        def ask(positions: np.ndarray) -> Verdict:
            nonlocal asks
            asks += 1
            rows = asking[positions]
            after = None if self.jobs.after is None else self.jobs.after.subset(rows)
            claim = None if self.privacy is None else rows
            arrived = None if self.privacy is None else self.jobs.submit_time_s[rows]
            if arrived is not None and after is not None:  # a job run after others asks from when it is let in: now
                arrived = np.where(np.diff(after.start) > 0, now, arrived)
            return self.admission.admit(Applicants(rows, after, claim=claim, arrived_s=arrived), context)

        def failed_now(positions: np.ndarray, verdict: Verdict) -> bool:  # those held may wait for one of them
            rows = asking[positions]
            replay.status[rows] = JobStatus.UNSCHEDULABLE
            replay.ended += len(rows)
            reasons[rows] = [verdict.reasons[int(p)] for p in positions]
            return True

        verdict = admit_settled(len(asking), ask, failed_now)
        still_held = [asking[verdict.hold]] + ([] if recheck else [self.held])
        self.held = np.sort(np.concatenate(still_held))
        self._ended_seen = replay.ended
        if self.privacy is not None:
            self._privacy_due = self.privacy.next_change_s(now)
        admitted = asking[verdict.admitted]
        return admitted if asks <= 1 else np.sort(admitted)
