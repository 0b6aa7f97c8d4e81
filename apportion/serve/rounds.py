"""The round adapter: the simulator's round (policy → mechanism → placement) over the state file.

Each round reads the active jobs as columns, builds the simulator's JobView, ClusterView and
ThroughputView, calls ``policy.allocate``, ``RoundMechanism.choose`` and ``place_on_gpus``,
and writes what changed (leases renewed, preemptions, slots promised) in one transaction.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.rounds import RoundMechanism
from apportion.serve.context import SchedulerState
from apportion.serve.estimates import ThroughputEstimates
from apportion.serve.slots import Slot
from apportion.serve.state import ACTIVE

MIN_WEIGHT = 1e-3  # priority 0 ("best effort") is this weight for the policies


@dataclass
class RoundStats:
    """The time the scheduler spent deciding rounds (milliseconds), for `apportion status`."""

    rounds: int = 0
    last_ms: float = 0.0
    total_ms: float = 0.0
    history_ms: list[float] = field(default_factory=list)


class Rounds:
    """Decides rounds for one server; keeps the allocation between rounds while nothing it
    depends on changed, as the simulator does."""

    def __init__(self, state: SchedulerState, throughputs: ThroughputEstimates) -> None:
        self.state = state
        self.throughputs = throughputs
        self.store, self.policy, self.config, self.log = state.store, state.policy, state.config, state.log
        self.lock, self.changed = state.lock, state.changed
        self.gpu_types, self.slots = state.gpu_types, state.slots
        self.mechanism = RoundMechanism(state.config.round_s)
        self.start_timeout_s = (state.config.start_timeout_s if state.config.start_timeout_s is not None
                                else max(2 * state.config.round_s, 60.0))
        self.last_round_at = -math.inf
        self.stats = RoundStats()
        self._clusters: dict[tuple[str, ...], tuple[Cluster, ClusterView]] = {}
        self._share: np.ndarray | None = None
        self._share_ids: tuple = ()
        self._reallocate_at = math.inf
        self._share_version = -1

    def plan(self, now: float, start: float | None = None) -> None:
        """Decide the round that starts at ``start`` (default now): policy → mechanism →
        placement, applied in one transaction. Leases it grants end at ``start + round_s``.

        Column-oriented, as the simulator's round: the state is read as columns, and only jobs
        that hold, get or lose slots (a few per round) are handled one by one."""
        started = time.perf_counter()
        start = now if start is None else start
        with self.lock:
            table = self.store.round_table()
            status = table["status"]
            changes: dict[int, dict] = {}
            events: list[tuple] = []
            lease_end = start + self.config.round_s
            live = {i: _row(table, i) for i, pid in enumerate(table["pid"]) if pid is not None}
            for r in live.values():  # service up to now for everything holding slots
                acct = account(r, now)
                _merge(changes, r, **acct)
                r.update(acct)
            pinned = [r for r in live.values() if self._starting(r, now)]
            for r in pinned:  # still starting: keeps its slots, stays out of the round
                _merge(changes, r, lease_end=max(r["lease_end"] or 0.0, lease_end),
                       reason=f"starting attempt {r['attempt']}")
            left_out = {i for i, r in live.items() if r["stop"] is not None or self._starting(r, now)}
            rows = np.array([i for i, s in enumerate(status) if s in ACTIVE and i not in left_out], dtype=np.int64)
            rates = self._rates(table, rows)
            runnable = rates.max(axis=1) > 0 if len(rows) else np.zeros(0, dtype=bool)
            for i in rows[~runnable]:
                _merge(changes, live.get(i) or _row(table, i),
                       reason=f"cannot run here: needs {table['gpus'][i]} slot(s) of an allowed type")
            rows, rates = rows[runnable], rates[runnable]
            if len(rows):
                taken = {s for r in pinned for s in r["slot_list"]}
                self._place(table, live, rows, rates, now, lease_end, [s for s in self.slots if s.id not in taken],
                            changes, events)
            with self.store.transaction():
                for job_id, fields in changes.items():
                    self.store.update_job(job_id, **fields)
                for event in events:
                    self.store.add_event(*event)
                self.state.round += 1
                self.store.set_meta("round", str(self.state.round))
            self.state.round_end = start + self.config.round_s
            self.last_round_at = now
            self.state.dirty = False
            self.changed.notify_all()
        elapsed = (time.perf_counter() - started) * 1000
        self.stats.rounds += 1
        self.stats.last_ms = elapsed
        self.stats.total_ms += elapsed
        self.stats.history_ms = (self.stats.history_ms + [elapsed])[-1000:]

    def _starting(self, row: dict, now: float) -> bool:
        """An attempt that has not asked for a lease yet, and not for too long."""
        return (row["pid"] is not None and row["stop"] is None and row["status"] == "running"
                and row["contact_at"] is None and now - (row["attempt_started"] or now) < self.start_timeout_s)

    def _cluster(self, available: list[Slot]) -> tuple[Cluster, ClusterView]:
        """One node per slot type holding the ``available`` slots (cached: the same few sets recur)."""
        key = tuple(s.id for s in available)
        if key not in self._clusters:
            counts = [sum(s.gpu_type == t for s in available) for t in self.gpu_types]
            cluster = Cluster(tuple(NodeGroup(t, n, max(1, n), self.config.prices.get(t, math.nan))
                                    for t, n in zip(self.gpu_types, counts)))
            if len(self._clusters) > 256:
                self._clusters.clear()
            self._clusters[key] = (cluster, ClusterView(cluster.gpu_types, cluster.capacity, cluster.price_per_gpu_hour))
        return self._clusters[key]

    def _place(self, table: dict, live: dict[int, dict], rows: np.ndarray, rates: np.ndarray, now: float,
               lease_end: float, available: list[Slot], changes: dict[int, dict], events: list[tuple]) -> None:
        """The simulator's round over the job rows ``rows`` of ``table``, and what it changes."""
        n, num_types = len(rows), len(self.gpu_types)

        def column(name: str, dtype=None) -> np.ndarray:
            return np.asarray(table[name], dtype=dtype)[rows]

        ids = column("id", np.int64)
        gpus = column("gpus", np.int64)
        status = column("status", object)
        slots = column("slots", object)
        is_live = np.fromiter((i in live for i in rows), dtype=bool, count=n)
        if not available:  # every slot is held by an attempt still starting
            for j in np.flatnonzero(~is_live):
                _merge(changes, _row(table, rows[j]), slots="", gpu_type=None, reason="waiting for slots")
            return
        cluster, cluster_view = self._cluster(available)
        position = {s.id: k for k, s in enumerate(available)}
        type_index = {t: k for k, t in enumerate(self.gpu_types)}

        kinds, kind = np.unique(column("kind", object).astype(str), return_inverse=True)
        submitted = column("submitted", np.float64)
        first_start = np.array([np.nan if v is None else v for v in table["started"]], dtype=np.float64)[rows]
        running_type = np.full(n, -1, dtype=np.int64)
        on_type = np.zeros((n, num_types))
        service = table["service_by_type"]
        for j in np.flatnonzero(is_live | (column("service_by_type", object) != "{}")):
            held = live[rows[j]]["service_by_type"] if is_live[j] else json.loads(service[rows[j]])
            for gpu_type, seconds in held.items():
                if gpu_type in type_index:
                    on_type[j, type_index[gpu_type]] = seconds
        for j in np.flatnonzero(is_live):
            running_type[j] = type_index.get(live[rows[j]]["gpu_type"], -1)
        view = JobView(
            index=ids,
            submit_time_s=submitted,
            kind=kind.astype(np.int64),
            num_gpus=gpus,
            priority=np.maximum(column("priority", np.float64), MIN_WEIGHT),
            total_steps=column("total_steps", np.float64),
            steps_done=column("steps_done", np.float64),
            attained_service_s=np.array([live[i]["service_gpu_s"] if i in live else table["service_gpu_s"][i]
                                         for i in rows], dtype=np.float64),
            first_start_s=first_start,
            running_type=running_type,
            queue=column("queue", object),
            user=column("user", object),
            now_s=now,
        )
        key = (ids.tobytes(), tuple(cluster.capacity.tolist()))
        if (self._share is None or key != self._share_ids or now >= self._reallocate_at
                or self._share_version != self.throughputs.version):
            allocation = self.policy.allocate(view, cluster_view, ThroughputView(rates))
            self._share, self._share_ids, self._share_version = allocation.share, key, self.throughputs.version
        share = self._share

        received = on_type / np.maximum(now - submitted, 1e-9)[:, None]
        chosen = self.mechanism.choose(share, received, gpus, cluster.capacity)

        # who holds (a live attempt) or is promised (a pending start) each slot now
        previous_owner = np.full(len(available), -1, dtype=np.int64)
        for j in np.flatnonzero(is_live):
            for s in live[rows[j]]["slot_list"]:
                if s in position:
                    previous_owner[position[s]] = j
        pending = np.flatnonzero(~is_live & (slots != ""))
        for j in pending:
            positions = [position.get(s) for s in slots[j].split(",")]
            if None not in positions and np.all(previous_owner[positions] < 0):
                previous_owner[positions] = j
        owner, kept = place_on_gpus(cluster, previous_owner, chosen, gpus)
        self._reallocate_at = now + self.policy.next_change_s(view, chosen >= 0)

        slots_of: dict[int, list[str]] = {}
        for gpu in np.flatnonzero(owner >= 0):
            slots_of.setdefault(int(owner[gpu]), []).append(available[gpu].id)
        for j in np.flatnonzero(is_live | (chosen >= 0) | (slots != "")):  # the few that hold, get or lose slots
            r = live.get(rows[j]) or _row(table, rows[j])
            if r["pid"] is not None and chosen[j] >= 0 and kept[j]:
                _merge(changes, r, lease_end=lease_end, reason="")
            elif r["pid"] is not None:  # loses its slots (or would move): checkpoint and go at the lease's end
                stop_at = max(r["lease_end"] or now, now)
                _merge(changes, r, stop="preempt", stop_at=stop_at,
                       reason=f"round {self.state.round + 1}: preempted; checkpointing at its lease end")
                events.append((now, r["id"], "preempt", f"round {self.state.round + 1}, lease ends {stop_at:.3f}"))
                self.log(f"job {r['id']} preempted in round {self.state.round + 1}")
            elif chosen[j] >= 0:
                mine = slots_of.get(int(j), [])
                _merge(changes, r, slots=",".join(mine), gpu_type=self.gpu_types[chosen[j]], lease_end=lease_end,
                       reason=f"starting on {','.join(mine)}")
            else:
                _merge(changes, r, slots="", gpu_type=None, reason=_waiting(r["status"], r["steps_done"]))
        reasons = table["reason"]
        for j in np.flatnonzero(~is_live & (chosen < 0) & (slots == "")):  # the many that wait: only new reasons
            i = rows[j]
            reason = _waiting(status[j], table["steps_done"][i])
            if reasons[i] != reason:
                changes.setdefault(table["id"][i], {})["reason"] = reason

    def _rates(self, table: dict, rows: np.ndarray) -> np.ndarray:
        """[n, T] steps/s of each job row on each slot type at its own scale, once per distinct job shape."""
        shapes: dict[tuple, int] = {}
        inverse = np.fromiter(
            (shapes.setdefault((table["kind"][i], table["gpus"][i], table["gpu_types"][i]), len(shapes)) for i in rows),
            dtype=np.int64, count=len(rows))
        per_shape = np.array([[self.throughputs.rate(kind, t, gpus, tuple(allowed.split(",")) if allowed else None)
                               for t in self.gpu_types] for (kind, gpus, allowed) in shapes]).reshape(-1, len(self.gpu_types))
        return per_shape[inverse] if len(rows) else np.zeros((0, len(self.gpu_types)))


def account(row: dict, now: float) -> dict:
    """Service the live attempt has received since it was last counted (the fields to update)."""
    if row["pid"] is None or row["accounted_at"] is None:
        return {}
    dt = max(0.0, now - row["accounted_at"])
    by_type = dict(row["service_by_type"])
    if row["gpu_type"]:
        by_type[row["gpu_type"]] = by_type.get(row["gpu_type"], 0.0) + dt
    return {
        "run_s": row["run_s"] + dt,
        "service_gpu_s": row["service_gpu_s"] + dt * max(1, len(row["slot_list"])),
        "service_by_type": by_type,
        "accounted_at": now,
    }


def _row(table: dict, i: int) -> dict:
    """Row ``i`` of a round table as a dict, with its slots and service parsed."""
    row = {name: column[i] for name, column in table.items()}
    row["slot_list"] = row["slots"].split(",") if row["slots"] else []
    text = row["service_by_type"]
    row["service_by_type"] = json.loads(text) if text != "{}" else {}
    return row


def _waiting(status: str, steps_done: int) -> str:
    return "waiting for slots" if status == "queued" else f"waiting to resume from step {steps_done}"


def _merge(changes: dict[int, dict], row: dict, **fields) -> None:
    """Record only the fields that differ from the row."""
    diff = {k: v for k, v in fields.items() if row.get(k) != v}
    if diff:
        changes.setdefault(row["id"], {}).update(diff)
