"""The round adapter: the shared round planner over the state file, on the wall clock.

Each round reads the active jobs as columns, builds the same RoundState the simulator builds
(the jobs' view, their speeds, time alone per type, time together per pair, who holds each
slot; attempts still starting pinned, slots the executor lost offline), asks the same
:class:`~apportion.mechanism.round_planner.RoundPlanner`, and writes what changed (leases
renewed, preemptions, slots promised, partners) in one transaction.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from apportion.core.errors import InputError
from apportion.core.views import JobView
from apportion.mechanism.node_per_type import NodePerType
from apportion.mechanism.pair_clock import PairClock
from apportion.mechanism.round_planner import RoundPlanner, RoundState
from apportion.mechanism.round_state import job_view
from apportion.policies.base import wants_predictions, wants_samples
from apportion.serve.attempts.accounting import accrued
from apportion.serve.round.admission import admit_round
from apportion.serve.attempts.context import SchedulerState, ServeConfig, with_note
from apportion.serve.base.offline import largest_nodes, offline_slots, slot_nodes
from apportion.serve.estimates.elastic_batch import examples_work
from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.jobs.jobspec import check_stored
from apportion.serve.base.slots import shares_by_type
from apportion.serve.store.state import ACTIVE, STATUSES, parsed_spec
from apportion.serve.store.table_rows import TableRows

_SERVICE_COLUMNS = ("service_by_type", "shared_by_type")
_STATUS_TEXT = f"U{max(map(len, STATUSES))}"
MAX_FAILED_PER_ROUND = 8  # jobs a round may fail for making the planner raise; past that it is not theirs
ROUND_BOUNDS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)


@dataclass
class RoundStats:
    """The time the scheduler spent deciding rounds (milliseconds), for `apportion status` and the
    round-time histogram of /metrics (``at_most``: rounds this run that took at most each of ROUND_BOUNDS_MS)."""

    rounds: int = 0
    last_ms: float = 0.0
    total_ms: float = 0.0
    history_ms: list[float] = field(default_factory=list)
    at_most: list[int] = field(default_factory=lambda: [0] * len(ROUND_BOUNDS_MS))

    def record(self, elapsed_ms: float) -> None:
        """One more round, that took ``elapsed_ms``."""
        self.rounds += 1
        self.last_ms = elapsed_ms
        self.total_ms += elapsed_ms
        self.history_ms = (self.history_ms + [elapsed_ms])[-1000:]
        for i, bound in enumerate(ROUND_BOUNDS_MS):
            if elapsed_ms <= bound:
                self.at_most[i] += 1


def planned_policy(policy, config: ServeConfig):
    """The policy the round planner asks: ``policy`` itself, or shared by user first (``config.share_by_user``)."""
    if not config.share_by_user:
        return policy
    from apportion.policies.by_user import share_by_user

    return share_by_user(policy, config.user_weights)


class Rounds:
    """Decides rounds for one server; keeps the allocation between rounds while nothing it
    depends on changed, as the simulator does."""

    def __init__(self, state: SchedulerState, throughputs: ThroughputEstimates) -> None:
        self.state = state
        self.throughputs = throughputs
        self.store, self.policy, self.config, self.log = state.store, state.policy, state.config, state.log
        self.lock, self.changed = state.lock, state.changed
        self.gpu_types, self.slots = state.gpu_types, state.slots
        # the cluster of its slots comes with each round
        self.planner = RoundPlanner(planned_policy(state.policy, state.config), received_since=state.config.received_since)
        self.start_timeout_s = (state.config.start_timeout_s if state.config.start_timeout_s is not None
                                else max(2 * state.config.round_s, 60.0))
        self.last_round_at = -math.inf
        self.stats = RoundStats()
        shares = shares_by_type(state.node, list(self.slots))  # each type's part of the machine's cores and memory
        self._clusters = NodePerType(self.gpu_types, [self.config.prices.get(t, math.nan) for t in self.gpu_types],
                                     [shares.get(t, (None, None))[0] for t in self.gpu_types],
                                     [shares.get(t, (None, None))[1] for t in self.gpu_types])
        self._checked_through = 0  # the jobs up to this id had their stored fields checked in this run
        # the code of each job's shape, (kind, slots at its own size, allowed types): (job ids ascending, codes)
        self._shape_of = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        # the jobs slowed by their cores (their ids and speeds), and a version bumped when they change
        self._core_key, self._core_version = b"", 0
        self._shape_codes: dict[tuple, int] = {}  # shape -> its code
        self._unattributed: bytes | None = None  # the job set of the last failure no job could be blamed for
        self._rows = TableRows()  # the rows handled one by one, their service parsed once per change

    def plan(self, now: float, start: float | None = None) -> None:
        """Decide the round that starts at ``start`` (default now): policy → mechanism →
        placement, applied in one transaction. Leases it grants end at ``start + round_s``.

        Column-oriented, as the simulator's round: the state is read as columns, and only jobs
        that hold, get or lose slots (a few per round) are handled one by one."""
        started = time.perf_counter()
        start = now if start is None else start
        with self.lock:
            for resource in self.state.resources:  # e.g. budget granted to jobs that started is consumed now
                resource.round_starts(now)
            self.state.dirty = False  # before the jobs are read: one submitted meanwhile (no state lock) sets it again
            table = self.store.round_table()
            changes: dict[int, dict] = {}
            events: list[tuple] = []
            lease_end = start + self.config.round_s
            self._rows.next_round()
            holding = np.flatnonzero(table.typed("live", bool))
            live = dict(zip(holding.tolist(), self._rows.rows(table, holding)))
            for r in live.values():  # service up to now for everything holding slots
                acct = accrued(r, now)
                diff = {k: v for k, v in acct.items() if r[k] != v}
                r.update(acct)
                if diff:
                    for name in _SERVICE_COLUMNS:  # stored as text, kept so that the next round need not parse it
                        if name in diff:
                            diff[name] = self._rows.text(diff[name])
                    changes.setdefault(r["id"], {}).update(diff)
            pinned = [i for i, r in live.items() if self._starting(r, now)]
            for i in pinned:  # still starting: keeps its slots, stays out of the round
                r = live[i]
                _merge(changes, r, lease_end=max(r["lease_end"] or 0.0, lease_end),
                       reason=f"starting attempt {r['attempt']}")
            left_out = {i for i, r in live.items() if r["stop"] is not None} | set(pinned)
            for i, r in live.items():  # a move holds only for the round that decided it
                if r["stop"] is not None and r["move_to"]:
                    _merge(changes, r, move_to="")
            kept = table.typed("status", _STATUS_TEXT)  # as text kept between rounds: compared in C
            taking_part = np.logical_or.reduce([kept == name for name in ACTIVE])
            taking_part[list(left_out)] = False
            rows = np.flatnonzero(taking_part).astype(np.int64)
            failed = self._check_new(table)  # row -> why: what one job brings that a round cannot use fails it alone
            rows = _without(rows, failed)
            rows = admit_round(self.store, table, rows, now, changes, failed, self.state.resources)  # held: with why
            rows = _past_backoff(table, rows, self.state.retry_at, now)  # a crash's retry waits (its reason says so)
            rates, unrated = self._rates(table, rows)
            rates = self._at_core_share(table, rows, rates)
            failed.update(unrated)
            rows, rates = _without(rows, unrated, rates)
            runnable = rates.max(axis=1) > 0 if len(rows) else np.zeros(0, dtype=bool)
            for i in rows[~runnable]:
                _merge(changes, live.get(i) or self._rows.row(table, i),
                       reason=f"cannot run here: needs {table['gpus'][i]} slot(s) of an allowed type")
            rows, rates = rows[runnable], rates[runnable]
            if len(rows):
                failed.update(self._place_guarded(table, live, rows, rates, np.array(pinned, dtype=np.int64), now,
                                                  lease_end, self._missing_slots(live), changes, events))
            stopping = [self._fail(live.get(i) or self._rows.row(table, i), why, now, changes, events)
                        for i, why in failed.items()]
            for job_id, note in self.state.notes.items():  # a warning stays in the job's reason
                if "reason" in changes.get(job_id, {}):
                    changes[job_id]["reason"] = with_note(changes[job_id]["reason"], note)
            with self.store.transaction():
                self.store.update_jobs(changes)
                if failed:  # what a failed job (or array) waited for is asked no more
                    self.store.drop_after_edges(table["id"][i] if table["array_id"][i] is None else table["array_id"][i]
                                                for i in failed)
                for event in events:
                    self.store.add_event(*event)
                self.store.set_meta("round", str(self.state.round + 1))
                if self.stats.rounds == 0 and self.store.first_round() is None:
                    self.store.set_first_round(now)  # the run's first round: where `apportion replay` starts its clock
            self.state.round += 1  # once it is kept: a round the state file refused (no space) is decided again
            if len(table["id"]):  # the table is in id order
                self._checked_through = max(self._checked_through, int(table["id"][-1]))
            for job_id in filter(None, stopping):  # a failed job's live attempt goes, as a cancelled one does
                self.state.executor.terminate(job_id)
            self.state.round_end = start + self.config.round_s
            self.last_round_at = now
            self.changed.notify_all()
        self.stats.record((time.perf_counter() - started) * 1000)

    def _check_new(self, table: dict) -> dict[int, str]:
        """{row: why} for the jobs this run has not seen before whose stored fields a round cannot use
        (a server of an older version stored what submit now refuses); each job is checked once, in
        the first round that commits after it arrived. The tasks of an array whose spec is stored once
        differ only in name and checkpoint_dir, checked at submit: its first new task is checked for
        all of them, and the others' specs are not read (an older file's tasks, whole specs each, are
        checked one by one)."""
        ids = table["id"]
        if not len(ids) or ids[-1] <= self._checked_through:  # the table is in id order
            return {}
        new = np.arange(bisect.bisect_right(ids, self._checked_through), len(ids))
        arrays = np.array([-1 if a is None else a for a in table["array_id"][new]], dtype=np.int64)
        found, first = np.unique(arrays, return_index=True)
        once = {int(a) for a in found[found >= 0].tolist() if self.store.array_spec(int(a)) is not None}
        alone = (arrays < 0) | ~np.isin(arrays, np.fromiter(once, dtype=np.int64, count=len(once)))
        picked = new[np.union1d(np.flatnonzero(alone), first[np.isin(found, list(once))])]
        specs = self.store.specs_of(ids[picked].tolist())
        why: dict[int, str] = {}  # a job's id, or an array stored once as -its id -> why
        for i in picked.tolist():
            if ids[i] not in specs:  # no longer there
                continue
            key = -int(table["array_id"][i]) if table["array_id"][i] in once else int(ids[i])
            try:
                check_stored(parsed_spec(specs[ids[i]]), f"job {ids[i]}")
            except InputError as err:
                why[key] = f"field '{err.field}': {err.message}" if err.field else err.message
            except Exception as err:  # a spec that cannot even be read
                why[key] = f"its stored fields cannot be read: {_error(err)}"
        if not why:
            return {}
        keys = np.where(alone, np.asarray(ids, dtype=np.int64)[new], -arrays)
        return {int(i): why[int(key)] for i, key in zip(new.tolist(), keys.tolist()) if int(key) in why}

    def _fail(self, row: dict, why: str, now: float, changes: dict[int, dict], events: list[tuple]) -> int | None:
        """Fail job ``row`` for ``why`` (the round goes on without it); its id when it has an attempt to stop."""
        reason = f"cannot be scheduled: {why}"
        if row["live"]:
            _merge(changes, row, status="failed", stop="cancel", term_at=now, finished=now, move_to="",
                   reason=f"{reason}; stopping")
        else:
            _merge(changes, row, status="failed", slots="", gpu_type=None, partner=None, finished=now, reason=reason)
        events.append((now, row["id"], "fail", reason))
        self.log(f"job {row['id']} failed: {reason}")
        return row["id"] if row["live"] else None

    def _place_guarded(self, table: dict, live: dict[int, dict], rows: np.ndarray, rates: np.ndarray,
                       pinned: np.ndarray, now: float, lease_end: float, offline: set[str], changes: dict[int, dict],
                       events: list[tuple]) -> dict[int, str]:
        """The shared round over ``rows``; when it raises, the jobs it raises for alone are found
        (halving the rows), returned as {row: why} to be failed, and the others placed in this round.
        A failure that needs several jobs together, or that each job causes alone, blames nobody: it is raised."""

        def attempt(keep: np.ndarray, into: tuple[dict, list] | None = None) -> Exception | None:
            scratch: tuple[dict, list] = ({}, []) if into is None else into
            try:
                self._place(table, live, rows[keep], rates[keep], pinned, now, lease_end, offline, *scratch,
                            log=self.log if into is not None else _quiet)
            except Exception as err:
                return err
            return None

        placed: tuple[dict, list] = ({}, [])
        everyone = np.arange(len(rows))
        first = attempt(everyone, placed)
        if first is None:
            _merge_all(changes, events, placed)
            return {}
        self.planner.invalidate()
        signature = np.asarray(table["id"], dtype=np.int64)[rows].tobytes()
        culprits = None if signature == self._unattributed else _culprits(everyone, first, attempt)
        if culprits is None:
            self._unattributed = signature
            raise first
        placed = ({}, [])
        rest = np.setdiff1d(everyone, np.fromiter(culprits, dtype=np.int64))
        again = attempt(rest, placed) if len(rest) else None
        if again is not None:
            raise again
        _merge_all(changes, events, placed)
        return {int(rows[j]): f"the round fails with it: {why}" for j, why in culprits.items()}

    def _missing_slots(self, live: dict[int, dict]) -> set[str]:
        """Slots that cannot run now (a Ray node is gone, an instance not rented): for each one missing,
        a free slot of its type, highest first, is left out of the round."""
        return offline_slots(self.slots, self.state.online(), (s for r in live.values() for s in r["slot_list"]))

    def _starting(self, row: dict, now: float) -> bool:
        """An attempt that has not asked for a lease yet, and not for too long."""
        return (row["live"] and row["stop"] is None and row["status"] == "running"
                and row["contact_at"] is None and now - (row["attempt_started"] or now) < self.start_timeout_s)

    def _place(self, table: dict, live: dict[int, dict], free_rows: np.ndarray, free_rates: np.ndarray,
               pinned_rows: np.ndarray, now: float, lease_end: float, offline_ids: set[str], changes: dict[int, dict],
               events: list[tuple], log=None) -> None:
        """The shared round over the job rows ``free_rows`` of ``table`` and the slots the attempts
        still starting (``pinned_rows``, which keep theirs) and the lost slots (``offline_ids``) leave,
        and what it changes. The state covers every slot and all those jobs; the planner keeps the
        pinned ones where they are."""
        log = log or self.log
        position = {s.id: k for k, s in enumerate(self.slots)}
        offline = np.zeros(len(self.slots), dtype=bool)
        offline[[position[s] for s in offline_ids]] = True
        blocked = offline.copy()  # no promise to a job stands on these
        blocked[[position[s] for i in pinned_rows for s in live[i]["slot_list"] if s in position]] = True
        if blocked.all():  # every slot is held by an attempt still starting, or lost
            self._all_wait(table, live, free_rows, changes)
            return
        rows = np.concatenate([free_rows, pinned_rows]).astype(np.int64)
        rates = np.concatenate([free_rates, np.zeros((len(pinned_rows), free_rates.shape[1]))])
        pinned = np.arange(len(rows)) >= len(free_rows)
        num_types = len(self.gpu_types)

        def column(name: str, dtype=object) -> np.ndarray:
            return table.typed(name, dtype)[rows]

        ids = column("id", np.int64)
        status = column("status", object)
        slots = column("slots", object)
        is_live = column("live", bool)  # the rows of ``live``
        asks = _asks(column("cpus", np.float64), column("memory_gb", np.float64), self._floor_per_gpu,
                     column("gpus", np.int64))
        cluster = self._clusters_for(asks).cluster(tuple(self.state.capacity[t] for t in self.gpu_types))
        type_index = {t: k for k, t in enumerate(self.gpu_types)}
        # as dicts: the live rows (their service counted up to now) and the slots promised
        parsed = {j: live[i] for j, i in zip(np.flatnonzero(is_live).tolist(), rows[is_live].tolist())}
        promised = np.flatnonzero(~is_live & (slots != ""))
        parsed.update(zip(promised.tolist(), self._rows.rows(table, rows[promised])))

        time_alone, running_type, attained, holder, partner, together = self._holdings(
            table, rows, column, ids, is_live, parsed, position, type_index)
        kind = self.throughputs.kind_indices(column("kind", object))
        view = job_view(
            index=ids,
            submit_time_s=column("submitted", np.float64),
            kind=kind,
            num_gpus=column("gpus", np.int64),
            priority=column("priority", np.float64),
            total_steps=column("total_steps", np.float64),
            steps_done=column("steps_done", np.float64),
            attained_service_s=attained,
            first_start_s=column("started", np.float64),  # None: NaN
            running_type=running_type,
            queue=column("queue", object),
            user=column("user", object),
            now_s=now,
            **self._predictions(ids, column),
            **asks,
        )
        if self._sizes_jobs and any(table["elastic"][i] for i in rows.tolist()):
            view = self._elastic_view(view, table, rows, rates, live)
        pair_rates = None
        if RoundPlanner.space_sharing(self.policy):
            pair_rates = self.throughputs.pair_rates(self.gpu_types, int(kind[~pinned].max()) + 1)

        for j in promised.tolist():
            places = [position.get(s) for s in slots[j].split(",")]
            if None in places or blocked[places].any():
                continue
            if np.all(holder[places] < 0):
                holder[places] = j
            elif len(places) == 1 and partner[places[0]] < 0 and \
                    parsed[j]["partner"] == ids[holder[places[0]]]:
                partner[places[0]] = j
        decision = self.planner.plan(
            RoundState(view, rates, time_alone, holder, partner, rates_version=self.throughputs.version
                       + self._core_version
                       + (self.state.elastic.version if self.state.elastic is not None else 0),
                       together=PairClock.from_each_side(together, num_types), pair_rates=pair_rates,
                       pinned=pinned, offline=offline), cluster)

        self._write_decision(decision, table, rows, column, ids, status, slots, is_live, pinned, parsed, now,
                             lease_end, changes, events, log)

    def _all_wait(self, table: dict, live: dict[int, dict], free_rows: np.ndarray, changes: dict[int, dict]) -> None:
        """Every slot is held by an attempt still starting, or lost: the jobs not running wait, and only
        the rows whose fields change are read (at once)."""
        waiting = free_rows[~np.isin(free_rows, np.fromiter(live, dtype=np.int64, count=len(live)))]
        moves = ((table["slots"][waiting] != "") | (table["reason"][waiting] != _QUEUED)
                 | ~np.equal(table["gpu_type"][waiting], None) | ~np.equal(table["partner"][waiting], None))
        for row in self._rows.rows(table, waiting[moves]):
            _merge(changes, row, slots="", gpu_type=None, partner=None, reason=_QUEUED)

    def _holdings(self, table: dict, rows: np.ndarray, column, ids: np.ndarray, is_live: np.ndarray,
                  parsed: dict[int, dict], position: dict[str, int], type_index: dict[str, int]) -> tuple:
        """What the round's jobs have had and hold: time alone on each type, the type each runs on, GPU
        time attained, who holds and who shares each slot now, and time together per pair and type."""
        n, num_types = len(rows), len(self.gpu_types)
        # time alone per type, from the stored text of the jobs not holding slots (parsed once per change)
        time_alone = np.zeros((n, num_types))
        service = column("service_by_type", object)
        served = np.flatnonzero(~is_live & (service != "{}"))
        if len(served):
            time_alone[served] = [self._rows.seconds_by_type(text, self.gpu_types) for text in service[served].tolist()]
        running_type = np.full(n, -1, dtype=np.int64)
        attained = column("service_gpu_s", np.float64)
        # who holds (a live attempt) or is promised (a pending start) each slot now, and who shares it
        holder = np.full(len(self.slots), -1, dtype=np.int64)
        partner = np.full(len(self.slots), -1, dtype=np.int64)
        for j in np.flatnonzero(is_live).tolist():  # service counted up to now
            r = parsed[j]
            for gpu_type, seconds in r["service_by_type"].items():
                if gpu_type in type_index:
                    time_alone[j, type_index[gpu_type]] = seconds
            running_type[j] = type_index.get(r["gpu_type"], -1)
            attained[j] = r["service_gpu_s"]
            for s in r["slot_list"]:
                if s in position:
                    if holder[position[s]] < 0:
                        holder[position[s]] = j
                    else:
                        partner[position[s]] = j
        together: dict[tuple[int, int, int], float] = {}  # (job id, partner id, type) -> seconds
        shared = column("shared_by_type", object)
        sharing = is_live & ~np.equal(column("partner", object), None)  # counting time together now
        for j in np.flatnonzero(sharing | (shared != "{}")).tolist():
            r = parsed[j] if is_live[j] else {"id": ids[j], "shared_by_type": self._rows.parsed(shared[j])}
            for key, seconds in r["shared_by_type"].items():
                mate, _, gpu_type = key.partition(":")
                if gpu_type in type_index:
                    together[(int(r["id"]), int(mate), type_index[gpu_type])] = seconds

        return time_alone, running_type, attained, holder, partner, together

    def _write_decision(self, decision, table: dict, rows: np.ndarray, column, ids: np.ndarray, status: np.ndarray,
                        slots: np.ndarray, is_live: np.ndarray, pinned: np.ndarray, parsed: dict[int, dict],
                        now: float, lease_end: float, changes: dict[int, dict], events: list[tuple], log) -> None:
        """The round's decision as changes to the jobs' rows: most keep their slots (only their lease moves
        on, as columns); the few that start, move, lose their slots or wait get their fields and reasons."""
        n = len(rows)
        slots_of: dict[int, list[str]] = {}
        for gpu in np.flatnonzero(decision.owner >= 0):
            slots_of.setdefault(int(decision.owner[gpu]), []).append(self.slots[gpu].id)
        for gpu in np.flatnonzero(decision.second >= 0):
            slots_of.setdefault(int(decision.second[gpu]), []).append(self.slots[gpu].id)
        chosen, kept = decision.chosen_type, decision.kept
        held_back = np.zeros(n, dtype=bool) if decision.unplaced is None else decision.unplaced
        batch = decision.allocation.batch_size if self._sizes_jobs else None  # an elastic job's, for its next start
        # the few that hold, get or lose slots (the pinned keep theirs, their reasons set by plan())
        # most keep their slots, alone: only their lease moves on (and a partner or a reason gone), as columns
        stays = is_live & (chosen >= 0) & kept & ~pinned & (decision.partner < 0)
        for name, value, differs in (("lease_end", lease_end, column("lease_end", np.float64) != lease_end),
                                     ("partner", None, ~np.equal(column("partner", object), None)),
                                     ("reason", "", column("reason", object) != "")):
            for job_id in ids[stays & differs].tolist():
                changes.setdefault(job_id, {})[name] = value
        handled = np.flatnonzero((is_live | (chosen >= 0) | (slots != "")) & ~pinned & ~stays)
        starting = np.array([j for j in handled.tolist() if j not in parsed], dtype=np.int64)
        parsed.update(zip(starting.tolist(), self._rows.rows(table, rows[starting])))
        for j in handled.tolist():
            r = parsed[j]
            mate = int(ids[decision.partner[j]]) if decision.partner[j] >= 0 else None
            if r["live"] and chosen[j] >= 0 and kept[j]:
                _merge(changes, r, lease_end=lease_end, partner=mate,
                       reason=f"sharing its slot with job {mate}" if mate else "")
            elif r["live"] and chosen[j] >= 0:  # moves: checkpoint, then restart on its new slots
                stop_at = max(r["lease_end"] or now, now)
                mine = slots_of.get(int(j), [])
                move_to = json.dumps({"slots": ",".join(mine), "gpu_type": self.gpu_types[chosen[j]], "partner": mate})
                _merge(changes, r, **_chosen_batch(r, batch, j), stop="preempt", stop_at=stop_at, move_to=move_to,
                       reason=f"round {self.state.round + 1}: moving to {','.join(mine)}; checkpointing at its lease end")
                events.append((now, r["id"], "move", f"round {self.state.round + 1}, to {','.join(mine)}, "
                                                      f"lease ends in {stop_at - now:.0f} s"))
                log(f"job {r['id']} moves to {','.join(mine)} in round {self.state.round + 1}")
            elif r["live"]:  # loses its slots: checkpoint and go at the lease's end
                stop_at = max(r["lease_end"] or now, now)
                _merge(changes, r, stop="preempt", stop_at=stop_at, move_to="",
                       reason=f"round {self.state.round + 1}: preempted; checkpointing at its lease end")
                events.append((now, r["id"], "preempt",
                               f"round {self.state.round + 1}, lease ends in {stop_at - now:.0f} s"))
                log(f"job {r['id']} preempted in round {self.state.round + 1}")
            elif chosen[j] >= 0:
                mine = slots_of.get(int(j), [])
                _merge(changes, r, **_chosen_batch(r, batch, j), slots=",".join(mine), gpu_type=self.gpu_types[chosen[j]],
                       lease_end=lease_end,
                       partner=mate, reason=f"starting on {','.join(mine)}" + (f" with job {mate}" if mate else ""))
            else:
                reason = (_held_back(r.get("cpus"), r.get("memory_gb"), r["status"], r["steps_done"]) if held_back[j]
                          else _waiting(r["status"], r["steps_done"]))
                _merge(changes, r, slots="", gpu_type=None, partner=None, reason=reason)
        reasons = column("reason", object)
        waiting = ~is_live & (chosen < 0) & (slots == "")  # the many that wait: only new reasons
        queued = status == "queued"
        for j in np.flatnonzero(waiting & queued & ~held_back & (reasons != _QUEUED)):
            changes.setdefault(int(ids[j]), {})["reason"] = _QUEUED
        for j in np.flatnonzero(waiting & ~queued & ~held_back):
            reason = _waiting(status[j], table["steps_done"][rows[j]])
            if reasons[j] != reason:
                changes.setdefault(int(ids[j]), {})["reason"] = reason
        if held_back.any():
            cpus, memory_gb = column("cpus", object), column("memory_gb", object)
            for j in np.flatnonzero(waiting & held_back):
                reason = _held_back(cpus[j], memory_gb[j], status[j], table["steps_done"][rows[j]])
                if reasons[j] != reason:
                    changes.setdefault(int(ids[j]), {})["reason"] = reason

    def _clusters_for(self, asks: dict) -> NodePerType:
        """The one-node-per-type clusters, each type's cores and memory those of the executor's live
        machines where it knows them (Ray's nodes, asked only when some job asks), else the server's node's."""
        room = getattr(self.state.executor, "room", None)
        found = room() if asks and room is not None else None
        if found is not None:
            cpus = [found.get(t, (None, None))[0] for t in self.gpu_types]
            memory = [found.get(t, (None, None))[1] for t in self.gpu_types]
            if (cpus, memory) != (self._clusters.cpus, self._clusters.memory_gib):
                self._clusters = NodePerType(self.gpu_types, self._clusters.prices, cpus, memory)
        return self._clusters

    @property
    def _floor_per_gpu(self) -> float:
        """Cores per GPU a job that asked none counts for in placement (a resource's say; else 0)."""
        return self.state.resources.least_cores_per_gpu()

    @property
    def _sizes_jobs(self) -> bool:
        return bool(getattr(self.policy, "sizes_jobs", False)) and self.state.elastic is not None

    def _elastic_view(self, view: JobView, table: dict, rows: np.ndarray, rates: np.ndarray,
                      live: dict[int, dict]) -> JobView:
        """The round's view for a policy that sizes jobs: each job its own kind (its own step-time
        model, serve/estimates/elastic.py), work counted in examples as the model counts it."""
        per_node = largest_nodes(self.state.executor, self.state.elastic.capacity)
        elastic = self.state.elastic.view(table, rows, rates, live, self._nodes_held(table, live), per_node)
        done, total = examples_work(table, rows, elastic.noise_scale, elastic.batch_size)
        return replace(view, kind=np.arange(len(rows), dtype=np.int64), total_steps=total, steps_done=done,
                       elastic=elastic)

    def _nodes_held(self, table: dict, live: dict[int, dict]) -> dict[int, int]:
        """Row -> the nodes the slots a live job holds lie on (its ranks' nodes where the executor says,
        ``base/offline.py``: Ray; else this machine's one), for a policy that values a job's placement."""
        holders = {int(table["id"][i]): tuple(r["slot_list"]) for i, r in live.items() if r["slot_list"]}
        where = slot_nodes(self.state.executor, holders)
        return {i: max(1, len({where.get(s, "") for s in r["slot_list"]})) for i, r in live.items() if r["slot_list"]}

    def _predictions(self, ids: np.ndarray, column) -> dict[str, np.ndarray]:
        """The jobs' predicted GPU time, for a policy that ranks by predicted durations."""
        if self.state.durations is None or not wants_predictions(self.policy):
            return {}
        durations, gpus = self.state.durations, column("gpus", np.int64)
        estimated = column("estimated_duration_s", np.float64)  # the job files' own estimates (NaN: none)
        given = np.isfinite(estimated).any()
        prediction = durations.predict(ids.tolist(), column("user", object), column("name", object),
                                       column("queue", object), gpus, column("submitted", np.float64),
                                       estimated if given else None)
        if not wants_samples(self.policy) or prediction.sample_group is None:
            return {"predicted_gpu_s": prediction.gpu_s, "predicted_log_sd": prediction.log_sd}
        found = {"predicted_gpu_s": prediction.gpu_s, "predicted_log_sd": prediction.log_sd,
                 "sample_group": prediction.sample_group, "duration_samples": durations.predictor.samples}
        if given:  # as the simulator gives them: qssf:estimate-ratios ranks an estimated job by them
            found.update(estimated_gpu_s=durations.ranked_estimates(ids.tolist(), estimated, gpus),
                         estimate_ratios=durations.predictor.estimate_ratios)
        return found

    def _at_core_share(self, table: dict, rows: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """``rates`` at the speed each job trains at with the cores it gets (``--cpu-split``: its curve as
        the cores resource learnt it or its job file gives it), as the simulator ranks them: a CPU-starved
        job is not taken for faster (shorter) than it is. A prior's rate (all the cores a job could use) is
        scaled by the job's speed at its share; a rate the jobs of its kind measured is kept at the
        proportional share (``Requests.progress``), so only a job given other cores (its ``cpus``) moves it."""
        if not len(rows):
            return rates
        ids = np.asarray(table["id"], dtype=np.int64)[rows]
        gpus = table.typed("gpus", np.int64)[rows]
        asked = table.typed("cpus", np.float64)[rows]
        factor = self.state.resources.speed_at_share(ids, gpus, asked)
        if factor is None:
            slowed = np.zeros(0, dtype=np.int64)
        else:  # at the proportional share: the same, but for the jobs that asked for cores
            at_even = factor
            more = np.flatnonzero(np.nan_to_num(asked) > 0)
            if len(more):
                at_even = factor.copy()
                at_even[more] = self.state.resources.speed_at_share(ids[more], gpus[more], np.zeros(len(more)))
            slowed = np.flatnonzero((factor < 1.0) | (at_even < 1.0))
        core_key = (ids[slowed].tobytes() + factor[slowed].round(3).tobytes() + at_even[slowed].round(3).tobytes()
                    if len(slowed) else b"")
        if core_key != self._core_key:  # a curve learnt or moved: the allocation is stale (the planner re-solves)
            self._core_key, self._core_version = core_key, self._core_version + 1
        if not len(slowed):
            return rates
        rates = rates.copy()
        measured = self.throughputs.table
        for j in slowed.tolist():
            i = int(rows[j])
            key = (table["kind"][i], _own_size(table, i, self._sizes_jobs))
            for t, gpu_type in enumerate(self.gpu_types):
                if (key[0], gpu_type, key[1]) not in measured:
                    rates[j, t] *= factor[j]
                elif at_even[j] > 0:
                    rates[j, t] *= factor[j] / at_even[j]
        return rates

    def _rates(self, table: dict, rows: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
        """[n, T] steps/s of each job row on each slot type at its own scale, once per distinct job shape;
        and {row: why} for the rows whose speeds cannot be estimated (their rates 0)."""
        sized = self._sizes_jobs
        ids = table["id"]
        picked_ids = np.asarray(ids, dtype=np.int64)[rows]
        known_ids, known_codes = self._shape_of
        if len(known_ids) > 2 * len(ids) + 1000:  # forget the jobs that ended
            keep = np.isin(known_ids, np.asarray(ids, dtype=np.int64))
            known_ids, known_codes = known_ids[keep], known_codes[keep]
        place = np.minimum(np.searchsorted(known_ids, picked_ids), max(len(known_ids) - 1, 0))
        new = np.flatnonzero(known_ids[place] != picked_ids) if len(known_ids) else np.arange(len(rows))
        if len(new):  # a job's shape never changes: found once per job
            fresh = [self._shape_codes.setdefault((table["kind"][i], _own_size(table, i, sized), table["gpu_types"][i]),
                                                  len(self._shape_codes)) for i in rows[new].tolist()]
            known_ids = np.concatenate([known_ids, picked_ids[new]])
            known_codes = np.concatenate([known_codes, np.array(fresh, dtype=np.int64)])
            order = np.argsort(known_ids, kind="stable")
            known_ids, known_codes = known_ids[order], known_codes[order]
        self._shape_of = (known_ids, known_codes)
        codes = known_codes[np.searchsorted(known_ids, picked_ids)] if len(rows) else np.zeros(0, dtype=np.int64)
        used, inverse = np.unique(codes, return_inverse=True)
        every = list(self._shape_codes)
        shapes = [every[code] for code in used.tolist()]
        per_shape = np.zeros((len(shapes), len(self.gpu_types)))
        broken: dict[int, str] = {}  # shape -> why
        for k, (kind, gpus, allowed) in enumerate(shapes):
            try:
                per_shape[k] = [self.throughputs.rate(kind, t, gpus, tuple(allowed.split(",")) if allowed else None)
                                for t in self.gpu_types]
            except Exception as err:
                broken[k] = f"its speed cannot be estimated: {_error(err)}"
        unrated = {int(rows[j]): broken[int(inverse[j])]
                   for j in np.flatnonzero(np.isin(inverse, list(broken)))} if broken else {}
        return (per_shape[inverse] if len(rows) else np.zeros((0, len(self.gpu_types)))), unrated


def _culprits(everyone: np.ndarray, first: Exception, attempt) -> dict[int, str] | None:
    """{position: why} of the jobs the round raises for alone, found by halving: each is one whose
    half still raises, down to itself; None when a half-set raises only together with the other
    half, when more than MAX_FAILED_PER_ROUND would be blamed, or when every job raises alone."""
    found: dict[int, str] = {}
    suspects, err = everyone, first
    while len(found) < MAX_FAILED_PER_ROUND:
        group = suspects
        while len(group) > 1:
            half, other = group[: len(group) // 2], group[len(group) // 2:]
            if (err_half := attempt(half)) is not None:
                group, err = half, err_half
            elif (err_other := attempt(other)) is not None:
                group, err = other, err_other
            else:
                return None
        found[int(group[0])] = _error(err)
        suspects = suspects[suspects != group[0]]
        if not len(suspects):
            return found if len(found) == 1 else None
        if (err := attempt(suspects)) is None:
            return found
    return None


def _without(rows: np.ndarray, gone: dict[int, str], rates: np.ndarray | None = None):
    """``rows`` (and their ``rates``) without the rows in ``gone``."""
    keep = ~np.isin(rows, np.fromiter(gone, dtype=np.int64, count=len(gone))) if gone else np.ones(len(rows), dtype=bool)
    return rows[keep] if rates is None else (rows[keep], rates[keep])


def _past_backoff(table: dict, rows: np.ndarray, retry_at: dict[int, float], now: float) -> np.ndarray:
    """``rows`` less the jobs still waiting out a crash's backoff (``retry_at``: job id -> when it ends)."""
    waiting = [job for job, at in retry_at.items() if at > now] if len(rows) else []
    if not waiting:
        return rows
    return rows[~np.isin(np.asarray(table["id"], dtype=np.int64)[rows], waiting)]


def _merge_all(changes: dict[int, dict], events: list[tuple], placed: tuple[dict, list]) -> None:
    """Add what a round placed (its changes and events) to the round's own."""
    for job_id, fields in placed[0].items():
        changes.setdefault(job_id, {}).update(fields)
    events.extend(placed[1])


def _error(err: Exception) -> str:
    """An exception in one line: ``ZeroDivisionError: integer modulo by zero``."""
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def _quiet(message: str) -> None:
    """The log of a round tried only to find which job makes it raise."""


def _own_size(table: dict, i: int, sized: bool) -> int:
    """The slots job row ``i`` runs on at its own size: an elastic job's fewest under a policy that sizes jobs."""
    if sized and table["elastic"][i]:
        return int(json.loads(table["elastic"][i]).get("min_gpus", 1))
    return int(table["gpus"][i])


def _chosen_batch(row: dict, batch: np.ndarray | None, j: int) -> dict:
    """The ``batch_size`` field of an elastic job (re)started by this round: the batch its policy chose."""
    if batch is None or not row["elastic"] or not batch[j] >= 1:
        return {}
    return {"batch_size": int(round(float(batch[j])))}


_QUEUED = "waiting for slots"


def _asks(cpus: np.ndarray, memory_gb: np.ndarray, floor_per_gpu: float, gpus: np.ndarray) -> dict[str, np.ndarray]:
    """The jobs' ``cpus`` and ``memory_gib`` as placement counts them (NaN: asked none), neither when no job
    asked: where some job asked for cores, one that asked none counts ``floor_per_gpu`` of each of its GPUs
    (what the core split never cuts it below), so that the asks cannot leave it none."""
    found = {}
    asked_cpus = np.isfinite(cpus)
    if asked_cpus.any():
        found["cpus"] = np.where(asked_cpus, cpus, floor_per_gpu * gpus)
    if np.isfinite(memory_gb).any():
        found["memory_gib"] = np.nan_to_num(memory_gb, nan=0.0)
    return found


def _held_back(cpus: float | None, memory_gb: float | None, status: str, steps_done: int) -> str:
    """Why a job the round chose by its GPUs waits: the cores and memory it asked for are not free beside
    them (and, a job that ran before, the step it resumes from)."""
    asked = [f"{cpus:g} CPU cores" if cpus else "", f"{memory_gb:g} GiB of memory" if memory_gb else ""]
    if not any(asked):  # it asked none: the asks of others leave it less than the least it is given
        why = "waiting for CPU cores beside its slots (jobs that asked for cores hold them)"
    else:
        why = f"waiting for {' and '.join(a for a in asked if a)} beside its slots (running jobs hold them)"
    return why if status == "queued" else f"{why}; it resumes from step {steps_done}"


def _waiting(status: str, steps_done: int) -> str:
    return _QUEUED if status == "queued" else f"waiting to resume from step {steps_done}"


def _merge(changes: dict[int, dict], row: dict, **fields) -> None:
    """Record only the fields that differ from the row."""
    diff = {k: v for k, v in fields.items() if row.get(k) != v}
    if diff:
        changes.setdefault(row["id"], {}).update(diff)
