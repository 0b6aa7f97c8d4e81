"""The wall-clock scheduler: the simulator's round, with real time and real processes.

Every round (``round_s`` of wall time) builds the same JobView, ClusterView and ThroughputView
the simulator builds, from the state file, and calls the same pieces: ``policy.allocate``,
``RoundMechanism.choose`` and ``place_on_gpus``. Then it applies the placement:

- a running job that keeps its slots has its lease renewed to the round's end;
- a running job that loses them is told ``renew: false`` at its next lease call (it
  checkpoints and exits 75); if it is still there ``grace_s`` after its lease ended it gets
  SIGTERM, and ``grace_s`` later SIGKILL;
- a newly placed job starts as soon as its slots are free.

A job never has two attempts at once: an attempt starts only when the job has none alive,
and a server that starts on an existing state directory first re-adopts the attempts still
alive (``recover``). Jobs report progress; each report updates the steps/s estimate of its
(kind, GPU type, GPUs); a kind never measured runs at ``default_steps_per_s`` (1.0) on every
type, so policies treat unmeasured types as equally fast until they are measured.

An attempt that has not yet asked for its first lease (it is still starting: importing,
loading its checkpoint) keeps its slots and is left out of the rounds until it asks, or until
``start_timeout_s``; its first lease call gets a full round. So every attempt trains for at
least about a round, whatever the round length and however slow jobs are to start.

Each round is decided ``plan_ahead_s`` before it starts (default: half a round, at most
10 s), so that a job asking for its lease shortly before the lease ends (apportion.runtime
asks about a second and a step ahead) gets its answer at once. Between rounds the loop polls
for exits every ``tick_s``; when a job ends or arrives while slots are idle, a round starts
at once (at most every ``fill_gap_s``) rather than leaving the slots idle until the round's end.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.errors import InputError
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.executors.base import Exit
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.rounds import RoundMechanism
from apportion.policies.base import Policy
from apportion.serve.jobspec import spec_from_mapping
from apportion.serve.slots import Slot
from apportion.serve.state import ACTIVE, TERMINAL, StateStore

EXIT_PREEMPTED = 75
MIN_WEIGHT = 1e-3  # priority 0 ("best effort") is this weight for the policies


class NotFound(Exception):
    pass


class Forbidden(Exception):
    pass


class Conflict(Exception):
    """The request does not fit the job's state (a stale attempt, cancelling a finished job)."""


@dataclass(frozen=True)
class ServeConfig:
    state_dir: Path
    server_url: str = "http://127.0.0.1:8642"
    round_s: float = 180.0
    grace_s: float = 30.0  # after a lease ends (or SIGTERM), how long to wait before escalating
    max_retries: int = 3  # crashes retried from the last checkpoint before a job is failed
    token: str | None = None
    default_steps_per_s: float = 1.0  # a kind never measured on a type
    fill_gap_s: float = 1.0  # the least time between rounds started early to fill idle slots
    plan_ahead_s: float | None = None  # decide a round this long before it starts; None: min(round_s / 2, 10)
    renew_wait_s: float = 1.5  # a lease call near the lease's end waits at most this long for its round
    # (apportion.runtime gives a lease call 3 s)
    start_timeout_s: float | None = None  # an attempt silent this long may be preempted; None: max(2 rounds, 60 s)
    tick_s: float = 0.1
    prices: dict[str, float] = field(default_factory=dict)  # $ per GPU-hour of each slot type, for min-cost
    cpu_threads: int = field(default_factory=lambda: os.cpu_count() or 1)


@dataclass
class RoundStats:
    rounds: int = 0
    last_ms: float = 0.0
    total_ms: float = 0.0
    history_ms: list[float] = field(default_factory=list)


class Scheduler:
    def __init__(
        self,
        store: StateStore,
        executor,
        slots: list[Slot],
        policy: Policy,
        config: ServeConfig,
        *,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not slots:
            raise ValueError("a server needs at least one slot")
        self.store = store
        self.executor = executor
        self.policy = policy
        self.config = config
        self.clock = clock
        self.log = log or (lambda message: None)
        self.mechanism = RoundMechanism(config.round_s)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified after every round

        types: list[str] = []
        for s in slots:
            if s.gpu_type not in types:
                types.append(s.gpu_type)
        self.gpu_types = tuple(types)
        # GPU ids of the one-node-per-type cluster, in the order place_on_gpus numbers them
        self.slots = [s for t in types for s in slots if s.gpu_type == t]
        self.slot_by_id = {s.id: s for s in self.slots}
        self.capacity = {t: sum(s.gpu_type == t for s in slots) for t in types}
        self.start_timeout_s = (config.start_timeout_s if config.start_timeout_s is not None
                                else max(2 * config.round_s, 60.0))
        self._clusters: dict[tuple[str, ...], tuple[Cluster, ClusterView]] = {}

        self.estimates = store.throughputs()  # (kind, gpu_type, gpus) -> (steps/s, samples)
        self.round = int(store.meta("round", "0") or 0)
        ahead = config.plan_ahead_s if config.plan_ahead_s is not None else min(config.round_s / 2, 10.0)
        self.plan_ahead_s = min(max(0.0, ahead), config.round_s)
        self.round_end = 0.0  # the current round ends (and the next one starts) here
        self.last_round_at = -math.inf
        self.dirty = True
        self.stats = RoundStats()
        self._share: np.ndarray | None = None
        self._share_ids: tuple = ()
        self._reallocate_at = math.inf
        self._rates_version = 0
        self._share_version = -1
        self._killed: set[int] = set()

    # the HTTP API's side ---------------------------------------------------------------

    def submit(self, body: dict, user: str, source: str = "request") -> int:
        """Check a job spec (InputError naming the field) and store it; returns the job id."""
        spec = spec_from_mapping(body, source)
        if spec.workdir is not None and not Path(spec.workdir).is_dir():
            raise InputError(source, f"no such directory on the server: {spec.workdir}", field="workdir")
        self._check_fits(spec, source)
        with self.lock:
            now = self.clock()
            data = spec.to_dict()
            data["user"] = spec.user or user
            job_id = self.store.insert_job(
                spec=data, name=spec.name, user=data["user"], queue=spec.queue, priority=spec.priority,
                kind=spec.throughput_kind, gpus=spec.gpus, total_steps=spec.total_steps, submitted=now,
            )
            self.dirty = True
        self.log(f"job {job_id} submitted: {spec.name} by {data['user']}, {spec.gpus} slot(s), {spec.total_steps} steps")
        return job_id

    def _check_fits(self, spec, source: str) -> None:
        usable = [t for t in self.gpu_types if spec.allows(t)]
        if not usable:
            raise InputError(source, f"none of {', '.join(spec.gpu_types or ())} is offered here "
                             f"(this server has {', '.join(self.gpu_types)})", field="gpu_types")
        largest = max(usable, key=lambda t: self.capacity[t])
        if spec.gpus > self.capacity[largest]:
            raise InputError(source, f"asks for {spec.gpus}; the most this server has of an allowed type is "
                             f"{self.capacity[largest]} ({largest})", field="gpus")
        never_runs = getattr(self.policy, "never_runs", None)
        if never_runs is not None:
            view = _one_job(gpus=spec.gpus, queue=spec.queue)
            cluster = ClusterView(tuple(self.gpu_types), np.array([self.capacity[t] for t in self.gpu_types]),
                                  np.full(len(self.gpu_types), np.nan))
            allowed = np.array([[1.0 if spec.allows(t) else 0.0 for t in self.gpu_types]])
            if never_runs(view, cluster, ThroughputView(allowed))[0]:
                raise InputError(source, f"asks for {spec.gpus}; queue '{spec.queue}' may not borrow and its "
                                 f"nominal quota of every allowed type is smaller, so it could never run", field="gpus")

    def cancel(self, job_id: int, user: str) -> None:
        with self.lock:
            row = self._row(job_id)
            if user != row["user"]:
                raise Forbidden(f"job {job_id} belongs to {row['user']!r}, not {user!r}")
            if row["status"] in TERMINAL:
                raise Conflict(f"job {job_id} has already {_past(row['status'])}")
            now = self.clock()
            with self.store.transaction():
                if row["pid"] is not None:
                    self.store.update_job(job_id, status="cancelled", stop="cancel", term_at=now, finished=now,
                                          reason=f"cancelled by {user}; stopping")
                else:
                    self.store.update_job(job_id, status="cancelled", slots="", gpu_type=None, finished=now,
                                          reason=f"cancelled by {user}")
                self.store.add_event(now, job_id, "cancel", f"by {user}")
            if row["pid"] is not None:
                self.executor.terminate(job_id)
            self.dirty = True
            self.changed.notify_all()
        self.log(f"job {job_id} cancelled by {user}")

    def lease(self, job_id: int, attempt: int, steps_done: int | None = None) -> dict:
        """The lease call: renew until the round's end, or ``renew: false`` (checkpoint, exit 75).

        Rounds are decided ahead of time, so the answer is usually known already. A call that
        comes earlier, close to its lease's end while the deciding round is due within
        ``renew_wait_s``, waits for that one round (the runtime's timeout is longer).
        """
        with self.changed:
            row = self._current(job_id, attempt)
            now = self.clock()
            fields = {} if steps_done is None else {"steps_done": int(steps_done)}
            if row["contact_at"] is None:  # its first lease call: a full round from now
                fields["contact_at"] = now
                if row["stop"] is None and row["status"] == "running":
                    fields["lease_end"] = max(row["lease_end"] or now, now + self.config.round_s)
                    fields["reason"] = ""
            if fields:
                self.store.update_job(job_id, **fields)
                row.update(fields)
            wait = self.config.renew_wait_s
            give_up, asked_in_round = now + wait, self.round
            while ("lease_end" not in fields and row["stop"] is None and row["status"] == "running"
                   and row["lease_end"] is not None
                   and self.round == asked_in_round and row["lease_end"] - now <= wait
                   and self.next_plan_at - now <= wait and now < give_up):
                self.changed.wait(timeout=min(give_up - now, 0.25))
                row = self._current(job_id, attempt)
                now = self.clock()
            if row["stop"] is not None or row["status"] != "running":
                return {"renew": False}
            return {"renew": True, "lease_end": row["lease_end"]}

    def progress(self, job_id: int, attempt: int, steps_done: int, steps_per_s: float | None) -> None:
        with self.lock:
            row = self._current(job_id, attempt)
            self.store.update_job(job_id, steps_done=int(steps_done))
            if steps_per_s is not None and steps_per_s > 0 and math.isfinite(steps_per_s) and row["gpu_type"]:
                key = (row["kind"], row["gpu_type"], row["gpus"])
                old, samples = self.estimates.get(key, (0.0, 0))
                new = steps_per_s if samples == 0 else 0.8 * old + 0.2 * steps_per_s
                if samples == 0 or abs(new - old) > 0.1 * old:
                    self._rates_version += 1
                self.estimates[key] = (new, samples + 1)
                self.store.put_throughput(*key, new, samples + 1, self.clock())

    def _row(self, job_id: int) -> dict:
        row = self.store.job(job_id)
        if row is None:
            raise NotFound(f"no job {job_id}")
        return row

    def _current(self, job_id: int, attempt: int) -> dict:
        row = self._row(job_id)
        if attempt != row["attempt"] or row["pid"] is None:
            raise Conflict(f"attempt {attempt} of job {job_id} is not its current attempt ({row['attempt']})")
        return row

    # the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set; a failing tick is logged and the loop goes on."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception as err:  # never let one bad round stop the scheduler
                self.log(f"scheduler error: {type(err).__name__}: {err}")
                try:
                    self.store.add_event(self.clock(), None, "error", f"{type(err).__name__}: {err}")
                except Exception:
                    pass
            stop.wait(self.config.tick_s)

    def tick(self, now: float | None = None) -> None:
        with self.lock:
            now = self.clock() if now is None else now
            for ended in self.executor.poll():
                self._on_exit(ended, now)
            self._escalate(now)
            if now >= self.next_plan_at:
                self.plan(now, max(now, self.round_end))
            elif self.dirty and now - self.last_round_at >= self.config.fill_gap_s and self._idle_and_waiting():
                self.plan(now, now)
            self._start_ready(now)

    @property
    def next_plan_at(self) -> float:
        return self.round_end - self.plan_ahead_s

    def _idle_and_waiting(self) -> bool:
        self.dirty = False
        return self.store.anyone_waiting() and len(self.store.slots_taken()) < len(self.slots)

    # one round ---------------------------------------------------------------------------

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
                acct = self._account(r, now)
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
                self.round += 1
                self.store.set_meta("round", str(self.round))
            self.round_end = start + self.config.round_s
            self.last_round_at = now
            self.dirty = False
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
                or self._share_version != self._rates_version):
            allocation = self.policy.allocate(view, cluster_view, ThroughputView(rates))
            self._share, self._share_ids, self._share_version = allocation.share, key, self._rates_version
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
                       reason=f"round {self.round + 1}: preempted; checkpointing at its lease end")
                events.append((now, r["id"], "preempt", f"round {self.round + 1}, lease ends {stop_at:.3f}"))
                self.log(f"job {r['id']} preempted in round {self.round + 1}")
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

    def rate(self, kind: str, gpu_type: str, gpus: int, allowed: tuple[str, ...] | None) -> float:
        """steps/s of a job of ``kind`` on ``gpus`` slots of ``gpu_type``: 0 where it cannot run there,
        the latest estimate where measured, else ``default_steps_per_s``."""
        if gpus > self.capacity.get(gpu_type, 0) or (allowed is not None and gpu_type not in allowed):
            return 0.0
        return self.estimates.get((kind, gpu_type, gpus), (self.config.default_steps_per_s, 0))[0]

    def _rates(self, table: dict, rows: np.ndarray) -> np.ndarray:
        """[n, T] steps/s of each job row on each slot type at its own scale, once per distinct job shape."""
        shapes: dict[tuple, int] = {}
        inverse = np.fromiter(
            (shapes.setdefault((table["kind"][i], table["gpus"][i], table["gpu_types"][i]), len(shapes)) for i in rows),
            dtype=np.int64, count=len(rows))
        per_shape = np.array([[self.rate(kind, t, gpus, tuple(allowed.split(",")) if allowed else None)
                               for t in self.gpu_types] for (kind, gpus, allowed) in shapes]).reshape(-1, len(self.gpu_types))
        return per_shape[inverse] if len(rows) else np.zeros((0, len(self.gpu_types)))

    def _account(self, row: dict, now: float) -> dict:
        """Service the live attempt has received since it was last counted."""
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

    # starting, stopping, ending ----------------------------------------------------------

    def _start_ready(self, now: float) -> None:
        pending = self.store.pending_starts()
        if not pending:
            return
        holders_of: dict[str, set[str]] = {}  # slot -> ids of the live jobs holding it
        for x in self.store.live_jobs():
            for slot in x["slot_list"]:
                holders_of.setdefault(slot, set()).add(str(x["id"]))
        for r in pending:
            holders = sorted(set().union(*(holders_of.get(slot, set()) for slot in r["slot_list"])))
            if holders:
                reason = f"starting on {r['slots']} when job {', '.join(holders)} releases it"
                if r["reason"] != reason:
                    self.store.update_job(r["id"], reason=reason)
                continue
            if self.executor.is_alive(r["id"]):  # never two attempts at once
                continue
            self._start(r, now)
            for slot in r["slot_list"]:
                holders_of.setdefault(slot, set()).add(str(r["id"]))

    def _start(self, row: dict, now: float) -> None:
        job_id, attempt = row["id"], row["attempt"] + 1
        spec = row["spec"]
        checkpoint_dir = spec.get("checkpoint_dir") or str(self.config.state_dir / "jobs" / str(job_id) / "checkpoints")
        lease_end = max(row["lease_end"] or 0.0, self.round_end, now + min(self.config.round_s, 1.0))
        slots = tuple(row["slot_list"])
        env = self._environment(row, attempt, lease_end, checkpoint_dir, slots)
        try:
            Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
            handle = self.executor.start(job_id, attempt, spec["command"], env, spec.get("workdir"), slots)
        except OSError as err:
            message = f"apportion: cannot start attempt {attempt}: {err}"
            try:
                log = self.executor.log_path(job_id, attempt)
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a", encoding="utf-8") as out:
                    out.write(message + "\n")
            except OSError:
                pass
            with self.store.transaction():
                self._crashed(dict(row, attempt=attempt), None, now, dict(attempt=attempt, slots="", gpu_type=None),
                              last_lines=message)
            return
        with self.store.transaction():
            self.store.update_job(
                job_id, attempt=attempt, status="running", pid=handle.pid, proc_start=handle.proc_start,
                lease_end=lease_end, started=row["started"] if row["started"] is not None else now,
                accounted_at=now, reason=f"starting attempt {attempt}", stop=None, stop_at=None, term_at=None,
                exit_code=None, attempt_started=now, contact_at=None,
            )
            self.store.add_event(now, job_id, "start", f"attempt {attempt} on {','.join(slots)} pid {handle.pid}")
        self.log(f"job {job_id} attempt {attempt} started on {','.join(slots)} (pid {handle.pid})")

    def _environment(self, row: dict, attempt: int, lease_end: float, checkpoint_dir: str,
                     slots: tuple[str, ...]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_") and k != "CUDA_VISIBLE_DEVICES"}
        env.setdefault("PYTHONUNBUFFERED", "1")
        devices = [self.slot_by_id[s].device for s in slots if s in self.slot_by_id and self.slot_by_id[s].device]
        cpu_slots = sum(1 for s in slots if s in self.slot_by_id and self.slot_by_id[s].gpu_type == "cpu")
        if cpu_slots:  # a CPU slot is a share of the host's cores
            per_slot = max(1, self.config.cpu_threads // max(1, sum(s.gpu_type == "cpu" for s in self.slots)))
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(per_slot * cpu_slots)
        env.update(row["spec"].get("env") or {})
        env.update({
            "APPORTION_SERVER": self.config.server_url,
            "APPORTION_JOB_ID": str(row["id"]),
            "APPORTION_ATTEMPT": str(attempt),
            "APPORTION_LEASE_END": repr(float(lease_end)),
            "APPORTION_TOTAL_STEPS": str(row["total_steps"]),
            "APPORTION_CHECKPOINT_DIR": checkpoint_dir,
            "APPORTION_SLOTS": ",".join(slots),
            "CUDA_VISIBLE_DEVICES": ",".join(devices),
        })
        if self.config.token:
            env["APPORTION_TOKEN"] = self.config.token
        return env

    def _escalate(self, now: float) -> None:
        """SIGTERM an attempt still alive ``grace_s`` after it should have gone; SIGKILL after as long again."""
        for r in self.store.stopping_attempts():
            if r["term_at"] is None and now >= (r["stop_at"] or now) + self.config.grace_s:
                self.executor.terminate(r["id"])
                with self.store.transaction():
                    self.store.update_job(r["id"], term_at=now, reason="did not stop at its lease end: SIGTERM sent")
                    self.store.add_event(now, r["id"], "sigterm", f"attempt {r['attempt']}")
                self.log(f"job {r['id']}: SIGTERM (still running {self.config.grace_s:g} s after its lease end)")
            elif r["term_at"] is not None and now >= r["term_at"] + self.config.grace_s and r["id"] not in self._killed:
                self.executor.kill(r["id"])
                self._killed.add(r["id"])
                with self.store.transaction():
                    self.store.update_job(r["id"], reason="did not exit after SIGTERM: SIGKILL sent")
                    self.store.add_event(now, r["id"], "sigkill", f"attempt {r['attempt']}")
                self.log(f"job {r['id']}: SIGKILL")

    def _on_exit(self, ended: Exit, now: float) -> None:
        """Settle an attempt that ended: its event and the job's new state in one transaction."""
        with self.store.transaction():
            self._settle(ended, now)

    def _settle(self, ended: Exit, now: float) -> None:
        row = self.store.job(ended.job_id)
        if row is None or row["pid"] is None or ended.attempt != row["attempt"]:
            return
        self._killed.discard(ended.job_id)
        acct = self._account(row, now)
        code = ended.code
        what = "killed (no exit code)" if code is None else (
            f"killed by {_signal_name(-code)}" if code < 0 else f"exit {code}")
        self.store.add_event(now, row["id"], "exit", f"attempt {row['attempt']}: {what}")
        self.dirty = True
        released = dict(acct, pid=None, proc_start=None, slots="", gpu_type=None, lease_end=None, stop=None,
                        stop_at=None, term_at=None, accounted_at=None, exit_code=code)
        if row["status"] == "cancelled" or row["stop"] == "cancel":
            by = row["reason"].replace("; stopping", "")
            self.store.update_job(row["id"], status="cancelled", reason=by, **released)
            self.log(f"job {row['id']} cancelled ({what})")
        elif code == 0:
            self.store.update_job(row["id"], status="completed", reason="", finished=now, **released)
            self.log(f"job {row['id']} completed (attempt {row['attempt']}, {row['preemptions']} preemptions)")
        elif code == EXIT_PREEMPTED or (row["stop"] == "preempt" and (code is None or code < 0 or row["term_at"])):
            self.store.update_job(
                row["id"], status="preempted", preemptions=row["preemptions"] + 1,
                reason=f"waiting to resume from step {row['steps_done']}", **released)
            self.log(f"job {row['id']} preempted at step {row['steps_done']} ({what})")
        else:
            self._crashed(row, code, now, released)

    def _crashed(self, row: dict, code: int | None, now: float, released: dict, last_lines: str | None = None) -> None:
        lines = last_lines if last_lines is not None else self.executor.tail(row["id"], row["attempt"], 20)
        last = next((line.strip() for line in reversed(lines.splitlines()) if line.strip()), "")
        what = "could not start" if last_lines is not None else (
            "killed (no exit code)" if code is None else (f"killed by {_signal_name(-code)}" if code < 0 else f"exit {code}"))
        retries = row["retries"] + 1
        if retries > self.config.max_retries:
            self.store.update_job(
                row["id"], status="failed", retries=retries, finished=now, last_lines=lines,
                reason=f"{what} on attempt {row['attempt']}, after {_times(self.config.max_retries, 'retry', 'retries')}"
                + (f": {last}" if last else ""),
                **released)
            self.store.add_event(now, row["id"], "fail", what)
            self.log(f"job {row['id']} failed: {what}" + (f": {last}" if last else ""))
        else:
            self.store.update_job(
                row["id"], status="queued", retries=retries, last_lines=lines,
                reason=f"{what}; retry {retries} of {self.config.max_retries} from its last checkpoint", **released)
            self.log(f"job {row['id']} crashed ({what}); retry {retries} of {self.config.max_retries}")

    # a server starting on an existing state directory ------------------------------------

    def recover(self, now: float | None = None) -> dict:
        """Adopt the attempts still alive, settle those that ended while no server ran, kill strays."""
        now = self.clock() if now is None else now
        adopted, ended, strays = [], [], []
        with self.lock:
            for attempt in sorted(self.executor.scan(), key=lambda a: (a.job_id, -a.attempt)):
                row = self.store.job(attempt.job_id)
                if (row is None or attempt.attempt < row["attempt"] or attempt.job_id in adopted
                        or (row["status"] in ("completed", "failed") and row["pid"] is None)):
                    self.executor.kill_attempt(attempt)
                    strays.append(attempt.job_id)
                    self.store.add_event(now, attempt.job_id, "stray", f"attempt {attempt.attempt} pid {attempt.pid} killed")
                    continue
                if not self.executor.adopt(attempt):
                    continue
                slots = [s for s in attempt.slots]
                gpu_type = self.slot_by_id[slots[0]].gpu_type if slots and slots[0] in self.slot_by_id else row["gpu_type"]
                fields = dict(pid=attempt.pid, proc_start=attempt.proc_start, attempt=attempt.attempt,
                              slots=",".join(slots), gpu_type=gpu_type)
                if row["pid"] is None or row["attempt"] != attempt.attempt:  # started, but never recorded
                    fields.update(started=row["started"] or now, accounted_at=now, stop=None, stop_at=None, term_at=None,
                                  attempt_started=now, contact_at=None)
                if row["status"] == "cancelled":
                    fields.update(stop="cancel")
                    if row["term_at"] is None:
                        self.executor.terminate(row["id"])
                        fields.update(term_at=now)
                else:
                    fields.update(status="running", lease_end=max(row["lease_end"] or 0.0, now + self.plan_ahead_s))
                with self.store.transaction():
                    self.store.update_job(row["id"], **fields)
                    self.store.add_event(now, row["id"], "adopt", f"attempt {attempt.attempt} pid {attempt.pid}")
                adopted.append(row["id"])
            for row in self.store.live_jobs():
                if row["id"] in adopted:
                    continue
                code = self.executor.exit_record(row["id"], row["attempt"])
                self._on_exit(Exit(row["id"], row["attempt"], code), now)
                ended.append(row["id"])
            self.round_end = now  # a round at once
            self.store.add_event(now, None, "recover",
                                 f"adopted {len(adopted)}, ended while down {len(ended)}, strays killed {len(strays)}")
        return {"adopted": adopted, "ended": ended, "strays": strays}

    # views for the API -----------------------------------------------------------------

    def job_info(self, row: dict, now: float | None = None) -> dict:
        now = self.clock() if now is None else now
        running = row["run_s"] + (max(0.0, now - row["accounted_at"]) if row["pid"] is not None and row["accounted_at"] else 0.0)
        return {
            "id": str(row["id"]), "name": row["name"], "user": row["user"], "queue": row["queue"],
            "priority": row["priority"], "kind": row["kind"], "status": row["status"], "reason": row["reason"],
            "gpus": row["gpus"], "gpu_types": row["spec"].get("gpu_types"), "alloc": row["slots"],
            "submitted": row["submitted"], "started": row["started"], "finished": row["finished"],
            "runtime_s": round(running, 3), "steps_done": row["steps_done"], "total_steps": row["total_steps"],
            "preemptions": row["preemptions"], "attempts": row["attempt"], "retries": row["retries"],
            "exit_code": row["exit_code"], "lease_end": row["lease_end"], "last_lines": row["last_lines"],
            "command": row["spec"].get("command"),
        }

    def status(self) -> dict:
        now = self.clock()
        with self.lock:
            holders = {s: str(r["id"]) for r in self.store.live_jobs() for s in r["slot_list"]}
        history = sorted(self.stats.history_ms)
        return {
            "server": self.config.server_url,
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
            "round": self.round,
            "round_s": self.config.round_s,
            "next_round_in_s": round(max(0.0, self.round_end - now), 3),
            "slots": [{"id": s.id, "gpu_type": s.gpu_type, "job": holders.get(s.id)} for s in self.slots],
            "counts": self.store.counts(),
            "round_ms": {
                "last": round(self.stats.last_ms, 3),
                "median": round(history[len(history) // 2], 3) if history else None,
                "rounds_this_run": self.stats.rounds,
            },
            "state_dir": str(self.config.state_dir),
            "pid": os.getpid(),
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


def _times(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _past(status: str) -> str:
    return {"completed": "completed", "failed": "failed", "cancelled": "been cancelled"}.get(status, status)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def check_policy(policy: Policy, slots: list[Slot], prices: dict[str, float] | None = None) -> None:
    """Run ``policy`` once on one made-up job over ``slots``: ValueError if it cannot work here
    (min-cost without prices, say). Use a throwaway policy object: policies keep state."""
    types = list(dict.fromkeys(s.gpu_type for s in slots))
    capacity = np.array([sum(s.gpu_type == t for s in slots) for t in types], dtype=np.int64)
    cluster = ClusterView(tuple(types), capacity, np.array([(prices or {}).get(t, math.nan) for t in types]))
    policy.allocate(_one_job(), cluster, ThroughputView(np.ones((1, len(types)))))


def _one_job(gpus: int = 1, queue: str = "") -> JobView:
    """A JobView of one made-up, never-started job, to ask a policy about it."""
    return JobView(
        index=np.array([0]), submit_time_s=np.zeros(1), kind=np.zeros(1, dtype=np.int64),
        num_gpus=np.array([gpus], dtype=np.int64), priority=np.ones(1), total_steps=np.ones(1), steps_done=np.zeros(1),
        attained_service_s=np.zeros(1), first_start_s=np.full(1, np.nan), running_type=np.full(1, -1),
        queue=np.array([queue], dtype=object), user=np.array([""], dtype=object), now_s=0.0,
    )
