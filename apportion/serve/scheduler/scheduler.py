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
at once (at most every ``fill_gap_s``) rather than leaving the slots idle until the round's end
(the rules, which the simulator on the server's clock follows too: ``mechanism/timing.py``).

``Scheduler`` is the facade; the work is done by parts that share one ``SchedulerState``
(context.py): ``Requests`` (requests.py), ``Rounds`` (rounds.py), ``AttemptLifecycle``
(lifecycle.py), ``Watchdog`` (watchdog.py: hung attempts and time limits),
``ThroughputEstimates`` (estimates.py), ``DurationHistory`` (durations.py: finished jobs'
durations, persisted, and predictions from them), ``ElasticModels`` (elastic.py: elastic jobs'
noise scales and step-time models, persisted) and ``recover`` (recovery.py).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from apportion.core.throughputs import ThroughputTable
from apportion.executors.base import Executor, Exit
from apportion.mechanism.round_state import MIN_WEIGHT
from apportion.mechanism.timing import early_round_due, regular_round_due
from apportion.policies.base import Policy
from apportion.serve.attempts.context import SchedulerState, ServeConfig
from apportion.serve.estimates.durations import DurationHistory
from apportion.serve.estimates.elastic import ElasticModels
from apportion.serve.estimates.elastic_batch import examples_info
from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.attempts.lifecycle import EXIT_PREEMPTED, AttemptLifecycle
from apportion.serve.base.offline import job_nodes, offline_slots, slot_nodes
from apportion.serve.jobs.policy_check import check_policy
from apportion.serve.jobs.records import JobRecord
from apportion.serve.attempts.recovery import recover
from apportion.serve.scheduler.requests import Conflict, Forbidden, NotFound, Requests, Submitted
from apportion.serve.scheduler.views import SchedulerViews
from apportion.serve.round.rounds import Rounds
from apportion.serve.base.slots import Slot
from apportion.serve.base.space import NoSpace, free_bytes
from apportion.serve.store.state import StateStore
from apportion.serve.attempts.watchdog import Watchdog, hung_after_s

__all__ = ["Scheduler", "ServeConfig", "NotFound", "Forbidden", "Conflict", "check_policy", "EXIT_PREEMPTED",
           "MIN_WEIGHT"]


class Scheduler:
    """One server's scheduler: the shared state and the parts that act on it (requests, rounds,
    attempts, recovery). What the HTTP API, the server's loop and the command line call."""

    def __init__(
        self,
        store: StateStore,
        executor: Executor,
        slots: list[Slot],
        policy: Policy,
        config: ServeConfig,
        *,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        throughputs: ThroughputTable | None = None,
        **given,
    ) -> None:
        """``throughputs``: speeds (and pair speeds) to assume for kinds not yet measured here; ``given``:
        what the optional resources are started with, each taking its own (``Resource.given``)."""
        self.state = SchedulerState(store, executor, slots, policy, config, clock, log or (lambda message: None),
                                    given)
        self.throughputs = ThroughputEstimates(store, self.state.capacity, config.default_steps_per_s, throughputs)
        self.durations = self.state.durations = DurationHistory(store, self.throughputs, self.state.gpu_types)
        self.elastic = self.state.elastic = ElasticModels(store, self.state.gpu_types, self.state.capacity)
        self.requests = Requests(self.state, self.throughputs)
        self.rounds = Rounds(self.state, self.throughputs)
        self.lifecycle = AttemptLifecycle(self.state)
        self.watchdog = Watchdog(self.state)
        self.resources = self.state.resources  # the optional resources (serve/resources/registry.py)
        for resource in self.resources:
            resource.start(self.throughputs)
        self.store, self.executor, self.policy, self.config = store, executor, policy, config
        self.clock, self.log, self.lock, self.changed = clock, self.state.log, self.state.lock, self.state.changed
        self.slots, self.gpu_types, self.capacity = self.state.slots, self.state.gpu_types, self.state.capacity
        self.stats = self.rounds.stats
        self.estimates = self.throughputs.table  # (kind, gpu_type, gpus) -> (steps/s, samples)
        self.unsettled: list[Exit] = []  # exits polled but not yet recorded (the state directory was full)
        self._full_logged = False  # the server's log has said the state directory is out of space
        self.views = SchedulerViews(self)  # what the API, the dashboard and /metrics read (never the parts above)

    def __getattr__(self, name: str):
        """What an optional resource shows under ``name`` (``Resource.parts``: its objects, the calls it
        adds to the scheduler's face)."""
        if name.startswith("_") or "state" not in self.__dict__:
            raise AttributeError(name)
        return self.state.resources.part(name)

    @property
    def round(self) -> int:
        """Rounds decided so far, over every run of this state directory."""
        return self.state.round

    @property
    def round_end(self) -> float:
        """When the current round ends and the next one starts."""
        return self.state.round_end

    # the HTTP API's side ---------------------------------------------------------------

    def submit(self, body: dict, user: str, source: str = "request", sees_all: bool = False) -> int:
        """Check a job spec (InputError naming the field) and store it; returns the job id. ``sees_all``:
        it may wait for any user's jobs (an admin's submit), not only ``user``'s."""
        return self.requests.submit(body, user, source, sees_all)

    def submit_once(self, body: dict, user: str, key: str | None, sees_all: bool = False) -> Submitted:
        """:meth:`submit` once per idempotency ``key`` of ``user``: the job's id, whether it was stored before,
        an array's tasks (``requests.Submitted``)."""
        return self.requests.submit_once(body, user, key, sees_all=sees_all)

    def cancel(self, job_id: int, user: str, admin: bool = False) -> int:
        """Cancel the job now if it has no attempt, else SIGTERM its attempt; only its user (or an admin) may.
        ``job_id`` an array's: each of its tasks still active. How many jobs were cancelled."""
        return self.requests.cancel(job_id, user, admin)

    def lease(self, job_id: int, attempt: int, steps_done: int | None = None, skipped: tuple[str, ...] = ()) -> dict:
        """The lease call: renew until the round's end, or ``renew: false`` (checkpoint, exit 75)."""
        return self.requests.lease(job_id, attempt, steps_done, skipped)

    def progress(self, job_id: int, attempt: int, steps_done: int, steps_per_s: float | None, *,
                 stall: dict[str, float] | None = None, **measured) -> str:
        """A progress report from the job's current attempt; a note when its rate was not taken as is.
        ``stall``: its data stall (bodies.data_stall); ``measured``: what an elastic job adds (bodies.step_report)."""
        note = self.requests.progress(job_id, attempt, steps_done, steps_per_s, stall=stall, **measured)
        for resource in self.resources:  # e.g. its speed at the cores it holds
            resource.progress(job_id, attempt, steps_done, self.clock())
        return note

    def row(self, job_id: int) -> JobRecord:
        """Job ``job_id``'s record in the state file; NotFound if there is none."""
        return self.requests.row(job_id)

    # the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set; a failing tick is logged and the loop goes on (a full state
        directory only once, when it starts and when it clears: ``watch_space``)."""
        while not stop.is_set():
            try:
                self.tick()
            except NoSpace:
                pass
            except Exception as err:  # never let one bad round stop the scheduler
                self.log(f"scheduler error: {type(err).__name__}: {err}")
                try:
                    self.store.add_event(self.clock(), None, "error", f"{type(err).__name__}: {err}")
                except Exception:
                    pass
            self.watch_space()
            stop.wait(self.config.tick_s)

    def tick(self, now: float | None = None) -> None:
        """Settle exits, escalate overdue stops, stop hung attempts and those past their time limit,
        decide a round when due (or to fill idle slots), start what it placed. NoSpace when the
        state directory is full: the exits not yet recorded are kept, and settled by a later tick."""
        with self.lock:
            now = self.clock() if now is None else now
            if self.store.full_since is not None and not self.store.probe_space():
                raise self.store.no_space("still full")
            self.unsettled.extend(self.executor.poll())
            while self.unsettled:
                self.lifecycle.on_exit(self.unsettled[0], now)  # NoSpace: it stays, with those after it
                self.unsettled.pop(0)
            self.lifecycle.escalate(now)
            self.watchdog.check(now)
            for resource in self.resources:  # e.g. rented instances joined or gone
                resource.poll(now)
            self._end_backoffs(now)
            if regular_round_due(now, self.round_end, self.state.plan_ahead_s):
                self.plan(now, max(now, self.round_end))
            elif (self.state.dirty and early_round_due(now, self.rounds.last_round_at, self.config.fill_gap_s)
                  and self._idle_and_waiting()):
                self.plan(now, now)
            self.lifecycle.start_ready(now)
            for resource in self.resources:  # e.g. the node's cores divided again among the running attempts
                resource.after_tick(now)

    def watch_space(self) -> None:
        """Say in the server's log when the state directory runs out of space, and when it has space again."""
        since = self.store.full_since
        if since is not None and not self._full_logged:
            self._full_logged = True
            self.log(f"the state directory {self.config.state_dir} is out of space: requests that write answer 507,"
                     f" exits wait to be recorded ({_free_words(self.config.state_dir)})")
        elif since is None and self._full_logged:
            self._full_logged = False
            self.log(f"the state directory {self.config.state_dir} has space again ({_free_words(self.config.state_dir)})")

    @property
    def next_plan_at(self) -> float:
        return self.state.next_plan_at

    def _end_backoffs(self, now: float) -> None:
        """A crashed job whose retry's backoff has ended may be placed: a round to fill idle slots is due."""
        ended = [job for job, at in self.state.retry_at.items() if at <= now]
        for job in ended:
            del self.state.retry_at[job]
        if ended:
            self.state.dirty = True

    def _idle_and_waiting(self) -> bool:
        self.state.dirty = False
        return self.store.anyone_waiting() and len(self.store.slots_taken()) < len(self.slots)

    def plan(self, now: float, start: float | None = None) -> None:
        """Decide the round that starts at ``start`` (default now) and apply it (what the optional resources
        prepare first: the rented instances it may use asked for)."""
        for resource in self.resources:
            resource.before_plan(now)
        self.rounds.plan(now, start)

    def rate(self, kind: str, gpu_type: str, gpus: int, allowed: tuple[str, ...] | None) -> float:
        """The steps/s the policies see for a job of ``kind`` on ``gpus`` slots of ``gpu_type``."""
        return self.throughputs.rate(kind, gpu_type, gpus, allowed)

    def recover(self, now: float | None = None) -> dict:
        """Adopt the attempts still alive, settle those that ended while no server ran, kill strays."""
        return recover(self.state, self.lifecycle, now)

    # views for the API -----------------------------------------------------------------

    def job_info(self, row: JobRecord, now: float | None = None, private: bool = False) -> dict:
        """A job as the API shows it (runtime counted up to ``now``). What comes from its log (the
        last lines, and the last line behind a failure's reason) only when ``private``: for the
        job's owner and admins. What cannot be worked out from one job's fields (its estimated
        finish) is shown as unknown, never an error for the whole list."""
        now = self.clock() if now is None else now
        reason = row.reason + (f": {row.reason_log}" if private and row.reason_log else "")
        running = row.run_s + (max(0.0, now - row.accounted_at) if row.attempt_live and row.accounted_at else 0.0)
        spec = row.spec if isinstance(row.spec, dict) else {}
        return {
            "id": str(row.id), "name": row.name, "user": row.user, "queue": row.queue,
            "priority": row.priority, "kind": row.kind, "status": row.status, "reason": reason,
            "gpus": row.gpus, "gpu_types": spec.get("gpu_types"), "alloc": row.slots,
            "nodes": job_nodes(self.executor, row.id, row.attempt_live),
            "submitted": row.submitted, "started": row.started, "finished": row.finished,
            "runtime_s": round(running, 3), "steps_done": row.steps_done, "total_steps": row.total_steps,
            "preemptions": row.preemptions, "attempts": row.attempt, "retries": row.retries,
            "hangs": row.hangs, "hung_after_s": hung_after_s(row, self.config),
            "time_limit": spec.get("time_limit"), "estimated_duration_s": spec.get("estimated_duration_s"),
            "after": [str(i) for i in spec.get("after") or ()],
            "array_id": None if row.array_id is None else str(row.array_id), "array_index": row.array_index,
            "exit_code": row.exit_code, "lease_end": row.lease_end,
            "data_stall": row.data_stall, "fetch_stall": row.fetch_stall, "preprocess_stall": row.preprocess_stall,
            "last_lines": row.last_lines if private else "",
            "command": spec.get("command"),
            **_shown_anyway(lambda: self.durations.estimate(row, now),
                            {"estimated_finish": None, "predicted_remaining_s": None}, "estimate_from"),
            **_shown_anyway(lambda: examples_info(row), {}),
        }

    def status(self) -> dict:
        """The server as `apportion status` shows it: policy, round, slot holders, counts, round times
        (``next_round_in_s``: until the next regular round is decided)."""
        now = self.clock()
        with self.store.snapshot():  # read as committed: a round under way delays no status
            held = {job_id: tuple(s for s in slots.split(",") if s)
                    for job_id, slots in self.store.job_columns(("id", "slots"), "attempt_live")}
            counts, hangs, asked = self.store.counts(), self.store.total_hangs(), self.store.asked_on_slots()
        holders = {s: str(job_id) for job_id, slots in held.items() for s in slots}
        offline, nodes = self._where(held)
        history = sorted(self.stats.history_ms)
        return {
            "server": self.config.server_url,
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
            "round": self.state.round,
            "round_s": self.config.round_s,
            "next_round_in_s": round(max(0.0, self.state.next_plan_at - now), 3),  # decided then: never > round_s
            "slots": [{"id": s.id, "gpu_type": s.gpu_type, "job": holders.get(s.id), "offline": s.id in offline,
                       "node": nodes.get(s.id)} for s in self.slots],
            "counts": counts,
            "hangs": hangs,
            "round_ms": {
                "last": round(self.stats.last_ms, 3),
                "median": round(history[len(history) // 2], 3) if history else None,
                "rounds_this_run": self.stats.rounds,
            },
            "state_dir": str(self.config.state_dir),
            "pid": os.getpid(),
            "out_of_space": self.space(),
            **self.resources.status(),
            "node": self._node_status(*asked),
        }

    def _where(self, held: dict[int, tuple[str, ...]]) -> tuple[set[str], dict[str, str]]:
        """The slots offline now (a Ray node gone) and the node each held slot runs on (Ray; offline.py)."""
        try:
            online = self.state.online()
        except (OSError, RuntimeError):  # the executor cannot be asked now: none shown offline
            online = None
        return offline_slots(self.slots, online, (s for slots in held.values() for s in slots)), \
            slot_nodes(self.executor, held)

    def _node_status(self, cpus: float, memory_gb: float) -> dict:
        """The node's cores and memory (0: not known here) and ``cpus`` and ``memory_gb``, how much of them
        the jobs on its slots asked for."""
        node = self.state.node
        return {"cores": len(node.cpus), "memory_gib": round(node.memory_gib, 3), "cpus_asked": cpus,
                "memory_gb_asked": memory_gb}

    def space(self) -> dict | None:
        """The state directory out of space: since when (Unix time) and the bytes free there; None: it is not."""
        since = self.store.full_since
        if since is None:
            return None
        return {"since": since, "free_bytes": free_bytes(self.config.state_dir), "state_dir": str(self.config.state_dir)}


def _free_words(path) -> str:
    free = free_bytes(path)
    return "free space unknown" if free is None else f"{free} bytes free"


def _shown_anyway(fields: Callable[[], dict], unknown: dict, why: str | None = None) -> dict:
    """``fields()``, or when one job's fields make it raise, ``unknown`` (and under ``why``, why)."""
    try:
        return fields()
    except Exception as err:
        said = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        return {**unknown, why: f"cannot be worked out: {said}"} if why else dict(unknown)
