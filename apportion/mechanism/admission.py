"""Admission: which arrived jobs may enter the round, which wait (and why), which fail (and why).

Before a round is planned, each clock asks an :class:`Admission` about the jobs it has not
admitted yet (the simulator: arrivals and the jobs it holds; the server, which keeps no record
of admission: the jobs that have not started). Its stages run in order; a job one stage holds
or fails is not shown to the next. A held job stays out of the round and is asked again at a
later one; a failed job ends, with the stage's reason. Stages work on arrays: a stage with
nothing to say about any job costs a few array operations, and Python runs per job only to
word the reasons of the jobs it holds or fails.

The first stage is :class:`AfterStage`: a job runs only after the jobs it names completed
(Slurm's ``--dependency=afterok``). :class:`ArrayLimitStage` lets a job array's tasks enter only
while fewer than its limit are under way (Slurm's ``--array=0-15%4``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Protocol, Sequence

import numpy as np

from apportion.core.dependencies import Dependencies


class Outcome(IntEnum):
    """What has become of a job another job may wait for."""

    WAITING = 0  # not ended yet (not arrived, queued, running)
    COMPLETED = 1
    FAILED = 2
    CANCELLED = 3
    UNSCHEDULABLE = 4  # can never run where it was submitted
    UNKNOWN = 5  # no such job (any more)


_ENDED_WORDS = {
    Outcome.FAILED: "failed",
    Outcome.CANCELLED: "was cancelled",
    Outcome.UNSCHEDULABLE: "cannot be scheduled",
    Outcome.UNKNOWN: "is not known here",
}


@dataclass(frozen=True)
class Applicants:
    """The jobs asking to enter this round, as arrays over them."""

    key: np.ndarray  # [n] what identifies each job to the clock (a JobTable row, a job id)
    after: Dependencies | None = None  # [n] the keys of the jobs each must see completed first; None: none
    # a job array's tasks that may be under way at once (its %N): [n] each job's array (-1: none or no
    # limit), how many more of that array may enter now, and its limit; None: no job is in such an array
    array: np.ndarray | None = None
    array_room: np.ndarray | None = None
    array_most: np.ndarray | None = None
    claim: np.ndarray | None = None  # [n] each one's privacy claim (mechanism/privacy_budget.py), -1: none; None: none
    arrived_s: np.ndarray | None = None  # [n] when each arrived (its claim's delay counts from it); None: now

    def __len__(self) -> int:
        return len(self.key)

    def subset(self, rows: np.ndarray) -> Applicants:
        """The applicants at ``rows`` (positions in this one)."""
        arrays = (None, None, None) if self.array is None else (
            self.array[rows], self.array_room[rows], self.array_most[rows])
        return Applicants(self.key[rows], None if self.after is None else self.after.subset(rows), *arrays,
                          None if self.claim is None else self.claim[rows],
                          None if self.arrived_s is None else self.arrived_s[rows])


@dataclass(frozen=True)
class AdmissionContext:
    """What the clock knows beyond the applicants: what became of the jobs they may name."""

    now_s: float
    outcome: Callable[[np.ndarray], np.ndarray]  # keys -> [k] Outcome of each
    label: Callable[[int], str]  # key -> how a reason names what it waits for ("job 12")


@dataclass(frozen=True)
class Verdict:
    """A stage's answer over its applicants; ``reasons`` holds one sentence per job held or failed."""

    hold: np.ndarray  # [n] bool: waits outside this round
    fail: np.ndarray  # [n] bool: ends now
    reasons: dict[int, str]  # position -> why, for every held or failed position

    @classmethod
    def admit_all(cls, n: int) -> Verdict:
        return cls(np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {})

    @property
    def admitted(self) -> np.ndarray:
        return ~(self.hold | self.fail)


class AdmissionStage(Protocol):
    """One reason a job may have to wait or fail before it enters a round."""

    name: str

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        """Hold or fail any of ``jobs`` (a reason for each), admitting the rest."""
        ...


class Admission:
    """The stages, run in order: a job held or failed by one is not shown to the next."""

    def __init__(self, stages: Sequence[AdmissionStage]) -> None:
        self.stages = tuple(stages)

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        n = len(jobs)
        hold, fail, reasons = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {}
        for stage in self.stages:
            asked = np.flatnonzero(~(hold | fail))
            if not len(asked):
                break
            shown = jobs if len(asked) == n else jobs.subset(asked)
            verdict = stage.admit(shown, context)
            hold[asked[verdict.hold]] = True
            fail[asked[verdict.fail]] = True
            reasons.update({int(asked[position]): why for position, why in verdict.reasons.items()})
        return Verdict(hold, fail, reasons)


def admit_settled(n: int, ask: Callable[[np.ndarray], Verdict], failed_now: Callable[[np.ndarray, Verdict], bool],
                  *, again_all: bool = False) -> Verdict:
    """The dependency cascade, the same in both clocks: a job failed now counts as failed for the
    jobs that run after it, in the same round, not the next.

    ``ask(positions)`` is the verdict over those of the ``n`` applicants. After each ask,
    ``failed_now(positions, verdict)`` is told the jobs it failed (the clock records them, so that
    its context's outcome says "failed" from now on) and says whether one of them may be waited for;
    if so the jobs still held are asked again (``again_all``: every job, where a stage's answer
    depends on who asks beside it, as an array's room does), until none fails that way. One
    verdict over all ``n``: each position's answer from the last ask it was in."""
    hold, fail, reasons = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {}
    asking = np.arange(n)
    while len(asking):
        verdict = ask(asking)
        hold[asking], fail[asking] = verdict.hold, verdict.fail
        for position in asking.tolist():
            reasons.pop(position, None)
        reasons.update({int(asking[i]): why for i, why in verdict.reasons.items()})
        failed = asking[verdict.fail]
        if not len(failed) or not failed_now(failed, Verdict(hold, fail, reasons)):
            break
        asking = np.arange(n) if again_all else asking[verdict.hold]
    return Verdict(hold, fail, reasons)


class AfterStage:
    """A job waits until every job it names in ``after`` completed; it fails as soon as one
    of them failed, was cancelled or can never run."""

    name = "after"

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        n, after = len(jobs), jobs.after
        if after is None or not len(after.keys):
            return Verdict.admit_all(n)
        outcome = np.asarray(context.outcome(after.keys))
        owner = after.owner
        ended_badly = (outcome != Outcome.WAITING) & (outcome != Outcome.COMPLETED)
        waiting = outcome == Outcome.WAITING
        fail = np.zeros(n, dtype=bool)
        fail[owner[ended_badly]] = True
        hold = np.zeros(n, dtype=bool)
        hold[owner[waiting]] = True
        hold &= ~fail
        reasons: dict[int, str] = {}
        bad = np.flatnonzero(ended_badly)
        for job, first in zip(*np.unique(owner[bad], return_index=True)):
            key = bad[first]
            reasons[int(job)] = (f"{context.label(int(after.keys[key]))}, which it runs after, "
                                 f"{_ENDED_WORDS[Outcome(int(outcome[key]))]}")
        pending = np.flatnonzero(waiting & hold[owner])
        jobs_of, first, count = np.unique(owner[pending], return_index=True, return_counts=True)
        for job, at, many in zip(jobs_of, first, count):
            others = f" (and {many - 1} more)" if many > 1 else ""
            reasons[int(job)] = f"waiting for {context.label(int(after.keys[pending[at]]))} to complete{others}"
        return Verdict(hold, fail, reasons)


class ArrayLimitStage:
    """A job array with a limit (Slurm's ``%N``): of its tasks asking, only as many enter as it has
    room for (its limit less its tasks already under way), first come first; the others wait."""

    name = "array limit"

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        n = len(jobs)
        if jobs.array is None:
            return Verdict.admit_all(n)
        member = np.flatnonzero(jobs.array >= 0)
        if not len(member):
            return Verdict.admit_all(n)
        # each member's place among its array's members, in the order they are asked
        _, group = np.unique(jobs.array[member], return_inverse=True)
        order = np.argsort(group, kind="stable")
        first_of_group = np.searchsorted(group[order], group[order])
        place = np.empty(len(member), dtype=np.int64)
        place[order] = np.arange(len(member)) - first_of_group
        waits = member[place >= jobs.array_room[member]]
        hold = np.zeros(n, dtype=bool)
        hold[waits] = True
        said = {int(a): f"waiting: array {int(a)} runs at most {int(n)} task{'s' * (int(n) != 1)} at once"
                for a, n in set(zip(jobs.array[waits].tolist(), jobs.array_most[waits].tolist()))}
        reasons = dict(zip(waits.tolist(), (said[a] for a in jobs.array[waits].tolist())))
        return Verdict(hold, np.zeros(n, dtype=bool), reasons)
