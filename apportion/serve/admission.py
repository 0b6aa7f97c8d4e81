"""The server's side of admission: before each round, the jobs that have not started yet are
asked (``mechanism/admission.py``); a job held waits outside the round with its reason, a job
failed is failed by the round with its reason.

The server keeps no record of admission: a job is asked every round until it starts. For
dependencies the answer cannot turn back, since a completed job stays completed. A job may
wait for a job array (``after`` naming the array's id): for all its tasks to complete; it
fails as soon as one task failed or was cancelled. A job array with a limit (``%N``) lets its
tasks in only while fewer than N of them have started and not ended. A job that claims privacy
budget waits until its claim is granted and fails when it is rejected: the round's privacy stage
is built from the ledger in the state file (``privacy_ledger.py``), and what it decided is written back.
"""

from __future__ import annotations

import numpy as np

from apportion.core.dependencies import Dependencies
from apportion.mechanism.admission import (Admission, AdmissionContext, AfterStage, Applicants, ArrayLimitStage,
                                           Outcome, Verdict)
from apportion.serve.job_array import most_running
from apportion.serve.privacy_ledger import PrivacyLedger
from apportion.serve.state import ACTIVE, StateStore

ADMISSION = Admission([AfterStage(), ArrayLimitStage()])
_OUTCOME_OF_STATUS = {"queued": Outcome.WAITING, "running": Outcome.WAITING, "preempted": Outcome.WAITING,
                      "completed": Outcome.COMPLETED, "failed": Outcome.FAILED, "cancelled": Outcome.CANCELLED}


def admit_round(store: StateStore, table: dict, rows: np.ndarray, now: float, changes: dict[int, dict],
                failed: dict[int, str], privacy: PrivacyLedger | None = None) -> np.ndarray:
    """``rows`` (positions in the round ``table``) less the jobs admission holds or fails: a held
    job's reason goes into ``changes`` (with any slots promised to it taken back), a failed
    job's into ``failed`` ({row: why}). ``privacy``: the ledger the jobs' privacy claims are granted from."""
    has_arrays = not np.equal(np.asarray(table["array_id"], dtype=object), None).all()
    open_claims = privacy.open_claims() if privacy is not None and len(rows) else np.zeros(0, dtype=np.int64)
    if not len(rows) or not (any(table["after"]) or has_arrays or len(open_claims)):  # nothing to hold a job
        return rows
    asking = rows[np.equal(np.asarray(table["started"], dtype=object)[rows], None)]
    after_text = np.asarray(table["after"], dtype=object)[asking]
    claims = np.flatnonzero(after_text != "")
    array_of = np.array([-1 if a is None else a for a in table["array_id"]], dtype=np.int64) if has_arrays else None
    limits = _array_limits(store, table, array_of, asking) if has_arrays else None
    asking_ids = np.asarray(table["id"], dtype=np.int64)[asking]
    claiming = np.flatnonzero(np.isin(asking_ids, open_claims))
    if not len(claims) and limits is None and not len(claiming):
        return rows
    after = Dependencies.none(len(asking))
    if len(claims):
        lists: list[list[int]] = [[] for _ in range(len(asking))]
        for j in claims.tolist():
            lists[j] = [int(i) for i in after_text[j].split(",")]
        after = Dependencies.of_lists(lists)
    admission, stage, claim = ADMISSION, None, None
    if len(claiming):  # the privacy stage over the claims of these jobs, from the ledger
        stage, before = privacy.stage(asking_ids[claiming])
        admission = Admission([*ADMISSION.stages, stage])
        claim = np.full(len(asking), -1, dtype=np.int64)
        claim[claiming] = np.arange(len(claiming))
    applicants = Applicants(asking_ids, after, *(limits or (None, None, None)), claim=claim)
    verdict = _settled(store, applicants, now, array_of[asking] if has_arrays else np.full(len(asking), -1), admission)
    if stage is not None:
        privacy.record(stage, before, now)
    for j in np.flatnonzero(verdict.fail):
        failed[int(asking[j])] = verdict.reasons[int(j)]
    for j in np.flatnonzero(verdict.hold):
        _hold(table, int(asking[j]), verdict.reasons[int(j)], changes)
    out = asking[~verdict.admitted]
    return rows[~np.isin(rows, out)]


def _settled(store: StateStore, applicants: Applicants, now: float, array_of: np.ndarray,
             admission: Admission = ADMISSION) -> Verdict:
    """The verdict over ``applicants`` (``array_of``: each one's array, -1 none), a job failed now
    counting as failed for those that wait for it, or for its array."""
    named = np.unique(applicants.after.keys)
    found = store.owners_and_statuses(named.tolist())
    outcome = {job_id: _OUTCOME_OF_STATUS.get(status, Outcome.FAILED) for job_id, (_, status) in found.items()}
    arrays = store.arrays_of([key for key in named.tolist() if key not in found])
    outcome.update({array_id: _array_outcome(counts) for array_id, (_, counts) in arrays.items()})
    context = AdmissionContext(now, lambda keys: np.array([outcome.get(int(k), Outcome.UNKNOWN) for k in keys]),
                               lambda key: f"array {key}" if key in arrays else f"job {key}")
    verdict = admission.admit(applicants, context)
    waited_for = set(named.tolist())
    while True:
        failing = [int(key) for key in applicants.key[verdict.fail]] + array_of[verdict.fail].tolist()
        newly = [key for key in failing if key in waited_for and outcome.get(key) != Outcome.FAILED]
        if not newly:
            return verdict
        outcome.update(dict.fromkeys(newly, Outcome.FAILED))
        verdict = admission.admit(applicants, context)


def _array_limits(store: StateStore, table: dict, array_of: np.ndarray,
                  asking: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """For the ``asking`` rows: each one's array if it has a limit (%N; else -1), that array's room
    (its limit less its tasks started and not ended, an attempt still alive counting) and its
    limit; None when no asking job is in an array with a limit. ``array_of``: each row's array, -1 none."""
    asked = array_of[asking]
    arrays = np.unique(asked[asked >= 0])
    if not len(arrays):
        return None
    most = {a: n for a, text in store.array_texts(arrays.tolist()).items() if (n := most_running(text)) is not None}
    if not most:
        return None
    limited = np.array(sorted(most), dtype=np.int64)
    limit = np.array([most[a] for a in limited.tolist()], dtype=np.int64)
    started = ~np.equal(np.asarray(table["started"], dtype=object), None)
    ending = np.isin(np.asarray(table["status"], dtype=object), ACTIVE) | np.asarray(table["live"], dtype=bool)
    under_way = np.isin(array_of, limited) & started & ending  # a cancelled task counts until its attempt exits
    count = np.bincount(np.searchsorted(limited, array_of[under_way]), minlength=len(limited))
    place = np.minimum(np.searchsorted(limited, asked), len(limited) - 1)
    inside = (asked >= 0) & (limited[place] == asked)
    return (np.where(inside, asked, -1), np.where(inside, (limit - count)[place], 0),
            np.where(inside, limit[place], 0))


def _array_outcome(counts: dict[str, int]) -> Outcome:
    """What became of an array, from how many of its tasks are in each status: failed (or cancelled)
    as soon as one task is, completed when all are, else waiting."""
    for status in ("failed", "cancelled"):
        if counts.get(status):
            return _OUTCOME_OF_STATUS[status]
    return Outcome.COMPLETED if set(counts) == {"completed"} else Outcome.WAITING


def _hold(table: dict, i: int, why: str, changes: dict[int, dict]) -> None:
    """Row ``i`` waits outside this round, saying why; slots a round promised it go back."""
    fields: dict = {"reason": why}
    if table["slots"][i]:
        fields.update(slots="", gpu_type=None, partner=None)
    diff = {k: v for k, v in fields.items() if table[k][i] != v}
    if diff:
        changes.setdefault(table["id"][i], {}).update(diff)
