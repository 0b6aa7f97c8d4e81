"""The server's side of admission: before each round, the jobs that have not started yet are
asked (``mechanism/admission.py``); a job held waits outside the round with its reason, a job
failed is failed by the round with its reason.

The server keeps no record of admission: a job is asked every round until it starts. For
dependencies the answer cannot turn back, since a completed job stays completed. A job may
wait for a job array (``after`` naming the array's id): for all its tasks to complete; it
fails as soon as one task failed or was cancelled. What a job waits for is kept as edges
(``after_edges``), an array's once for all its tasks: the after stage is asked once per job or
array that waits, and its answer goes to each of its tasks, so a round costs its jobs plus its
edges, not its tasks times their edges. Edges nothing asks about any more are dropped. A job array with a limit (``%N``) lets its
tasks in only while fewer than N of them have started and not ended. An optional resource may have
a say too (``Resource.admission``): its stage over the jobs it names, asked after these, and what
it decided written back by the resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from apportion.core.dependencies import Dependencies
from apportion.mechanism.admission import (Admission, AdmissionContext, AfterStage, Applicants, ArrayLimitStage,
                                           Outcome, Verdict)
from apportion.serve.jobs.job_array import most_running
from apportion.serve.resources.base import Resource
from apportion.serve.store.state import ACTIVE, StateStore

AFTER = AfterStage()
ADMISSION = Admission([ArrayLimitStage()])  # the stages after `after`, asked job by job
_OUTCOME_OF_STATUS = {"queued": Outcome.WAITING, "running": Outcome.WAITING, "preempted": Outcome.WAITING,
                      "completed": Outcome.COMPLETED, "failed": Outcome.FAILED, "cancelled": Outcome.CANCELLED}


def admit_round(store: StateStore, table: dict, rows: np.ndarray, now: float, changes: dict[int, dict],
                failed: dict[int, str], resources: Sequence[Resource] = ()) -> np.ndarray:
    """``rows`` (positions in the round ``table``) less the jobs admission holds or fails: a held
    job's reason goes into ``changes`` (with any slots promised to it taken back), a failed
    job's into ``failed`` ({row: why}). ``resources``: the optional resources, each with its say."""
    has_arrays = not np.equal(np.asarray(table["array_id"], dtype=object), None).all()
    named = [(r, np.asarray(r.admitting(), dtype=np.int64)) for r in resources] if len(rows) else []
    named = [(r, ids) for r, ids in named if len(ids)]  # the resources with jobs to hold
    edges = np.array(store.after_edges(), dtype=np.int64).reshape(-1, 2)
    if not len(rows) or not (len(edges) or has_arrays or named):  # nothing to hold a job
        if len(edges):
            store.drop_after_edges(edges[:, 0].tolist())
        return rows
    asking = rows[np.equal(np.asarray(table["started"], dtype=object)[rows], None)]
    ids = np.asarray(table["id"], dtype=np.int64)
    array_of = np.array([-1 if a is None else a for a in table["array_id"]], dtype=np.int64) if has_arrays else None
    owner = ids[asking] if array_of is None else np.where(array_of[asking] >= 0, array_of[asking], ids[asking])
    waits = _waits(store, edges, owner)
    limits = _array_limits(store, table, array_of, asking) if has_arrays else None
    asking_ids = ids[asking]
    theirs = [(r, np.flatnonzero(np.isin(asking_ids, held))) for r, held in named]
    theirs = [(r, mine) for r, mine in theirs if len(mine)]
    if waits is None and limits is None and not theirs:
        return rows
    admission, parts, places = ADMISSION, [], {}
    for resource, mine in theirs:  # each resource's stage over the jobs it names, after the others
        part = resource.admission(asking_ids[mine])
        parts.append(part)
        admission = Admission([*admission.stages, part.stage])
        if part.field is not None:
            places[part.field] = np.full(len(asking), -1, dtype=np.int64)
            places[part.field][mine] = np.arange(len(mine))
    applicants = Applicants(asking_ids, None, *(limits or (None, None, None)), **places)
    verdict = _settled(store, applicants, waits, now, array_of[asking] if has_arrays else np.full(len(asking), -1),
                       admission)
    for part in parts:
        part.record(now)
    for j in np.flatnonzero(verdict.fail):
        failed[int(asking[j])] = verdict.reasons[int(j)]
    held = np.flatnonzero(verdict.hold)
    if len(held):
        reasons = np.array([verdict.reasons[int(j)] for j in held], dtype=object)
        promised = np.asarray(table["slots"], dtype=object)[asking[held]] != ""
        differs = (np.asarray(table["reason"], dtype=object)[asking[held]] != reasons) | promised
        for j, why in zip(held[differs].tolist(), reasons[differs].tolist()):  # only the held jobs whose reason moves
            _hold(table, int(asking[j]), why, changes)
    out = asking[~verdict.admitted]
    return rows[~np.isin(rows, out)]


@dataclass(frozen=True)
class _Waits:
    """The asking jobs' ``after`` edges, grouped by who keeps them: a job, or an array for all its tasks."""

    owners: Applicants  # one applicant a waiting job or array (key: its id), with its edges as ``after``
    group: np.ndarray  # [n] each asking job's place in ``owners``, -1: it waits for nothing


def _waits(store: StateStore, edges: np.ndarray, owner: np.ndarray) -> _Waits | None:
    """The edges of the asking jobs' owners (``owner``: each one's job or array id), grouped; None when
    none waits. Edges whose owner asks no more (all its jobs started or ended) are dropped."""
    if not len(edges):
        return None
    order = np.argsort(edges[:, 0], kind="stable")
    edges = edges[order]
    keys, start = np.unique(edges[:, 0], return_index=True)
    asked = np.isin(keys, owner)
    if not asked.all():
        store.drop_after_edges(keys[~asked].tolist())
    if not asked.any():
        return None
    counts = np.diff(np.append(start, len(edges)))[asked]
    first = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    kept = np.repeat(start[asked], counts) + (np.arange(int(first[-1])) - np.repeat(first[:-1], counts))
    owners = keys[asked]
    place = np.minimum(np.searchsorted(owners, owner), len(owners) - 1)
    group = np.where(owners[place] == owner, place, -1)
    return _Waits(Applicants(owners, Dependencies(first, edges[kept, 1])), group)


def _settled(store: StateStore, applicants: Applicants, waits: _Waits | None, now: float, array_of: np.ndarray,
             admission: Admission = ADMISSION) -> Verdict:
    """The verdict over ``applicants`` (``array_of``: each one's array, -1 none): the after stage asked
    once per owner of ``waits``, its answer given to each of its jobs, then ``admission``'s stages;
    a job failed now counting as failed for those that wait for it, or for its array."""
    named = np.unique(waits.owners.after.keys) if waits is not None else np.zeros(0, dtype=np.int64)
    found = store.owners_and_statuses(named.tolist())
    outcome = {job_id: _OUTCOME_OF_STATUS.get(status, Outcome.FAILED) for job_id, (_, status) in found.items()}
    arrays = store.arrays_of([key for key in named.tolist() if key not in found])
    outcome.update({array_id: _array_outcome(counts) for array_id, (_, counts) in arrays.items()})
    context = AdmissionContext(now, lambda keys: np.array([outcome.get(int(k), Outcome.UNKNOWN) for k in keys]),
                               lambda key: f"array {key}" if key in arrays else f"job {key}")
    verdict = _ask(applicants, waits, admission, context)
    waited_for = set(named.tolist())
    while True:
        failing = [int(key) for key in applicants.key[verdict.fail]] + array_of[verdict.fail].tolist()
        newly = [key for key in failing if key in waited_for and outcome.get(key) != Outcome.FAILED]
        if not newly:
            return verdict
        outcome.update(dict.fromkeys(newly, Outcome.FAILED))
        verdict = _ask(applicants, waits, admission, context)


def _ask(applicants: Applicants, waits: _Waits | None, admission: Admission, context: AdmissionContext) -> Verdict:
    """The after stage over the owners that wait, each answer given to its jobs; then ``admission``'s
    stages over the jobs it let through (a job held or failed by one stage is shown to no later one)."""
    n = len(applicants)
    hold, fail, reasons = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {}
    if waits is not None:
        by_owner = AFTER.admit(waits.owners, context)
        mine = waits.group >= 0
        hold[mine], fail[mine] = by_owner.hold[waits.group[mine]], by_owner.fail[waits.group[mine]]
        stopped = np.flatnonzero(hold | fail)
        reasons = dict(zip(stopped.tolist(), map(by_owner.reasons.__getitem__, waits.group[stopped].tolist())))
    rest = np.flatnonzero(~(hold | fail))
    if len(rest):
        later = admission.admit(applicants if len(rest) == n else applicants.subset(rest), context)
        hold[rest[later.hold]], fail[rest[later.fail]] = True, True
        reasons.update({int(rest[position]): why for position, why in later.reasons.items()})
    return Verdict(hold, fail, reasons)


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
