"""What the scheduler's parts share: its configuration, and one server's state (the state file,
the executor, the policy, the clock, one lock, the slots and the round clock)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from apportion.executors.base import Executor
from apportion.mechanism.received import DEFAULT_RECEIVED_SINCE
from apportion.policies.base import Policy
from apportion.serve.accounts.budgets import BudgetRules
from apportion.serve.jobs.notify_hosts import NotifyHosts
from apportion.serve.resources.registry import Resources, with_settings
from apportion.serve.accounts.runas import RunAs
from apportion.serve.base.slots import Node, Slot, this_machine
from apportion.serve.store.state import StateStore


@dataclass(frozen=True)
class ServeConfig:
    """One server's settings; each optional resource adds its own fields after these (resources/registry.py)."""

    state_dir: Path
    server_url: str = "http://127.0.0.1:8642"
    round_s: float = 180.0
    grace_s: float = 30.0  # after a lease ends (or SIGTERM), how long to wait before escalating
    max_retries: int = 3  # crashes (and hangs) retried from the last checkpoint before a job is failed
    # an attempt silent this long (no lease call, no progress report) is hung: stopped and retried; None: never
    hung_after_s: float | None = 900.0
    # a crash's k-th retry waits retry_backoff_s × 2^(k-1), at most RETRY_BACKOFF_CAP_S (lifecycle.retry_delay_s); 0: at once
    retry_backoff_s: float = 0.0
    token: str | None = None  # the server's admin token (auth.py); never given to jobs
    run_as: RunAs = field(default_factory=RunAs)  # which OS account jobs run as (runas.py)
    default_steps_per_s: float = 1.0  # a kind never measured on a type
    fill_gap_s: float = 1.0  # the least time between rounds started early to fill idle slots
    plan_ahead_s: float | None = None  # decide a round this long before it starts; None: min(round_s / 2, 10)
    renew_wait_s: float = 1.5  # a lease call near the lease's end waits at most this long for its round
    # (apportion.runtime gives a lease call 3 s)
    start_timeout_s: float | None = None  # an attempt silent this long may be preempted; None: max(2 rounds, 60 s)
    tick_s: float = 0.1
    # past its first START_AT_ONCE, a tick starts attempts only while it has spent less than this on them (it
    # holds the lock every API call waits for); the rest start at the next tick. None: all it can at once
    start_hold_s: float | None = 0.01
    prices: dict[str, float] = field(default_factory=dict)  # $ per GPU-hour of each slot type, for min-cost
    received_since: str = DEFAULT_RECEIVED_SINCE  # the received share counts from the last re-solve (Gavel's), or from arrival
    # the cluster divided among users first, then the policy per user (policies/by_user.py); user -> weight (else 1)
    share_by_user: bool = False
    user_weights: dict[str, float] = field(default_factory=dict)
    cpu_threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    checkpoint_every: str | None = None  # jobs' periodic checkpoints (auto, auto:S, off, S); None: the runtime's auto
    shared_dir: Path | None = None  # where jobs' default checkpoint directories live, if not the state directory
    # (on Ray: a directory every node reaches)
    policy_options: dict = field(default_factory=dict)  # what the policy was built with, as JSON (for a replay)
    notify_hosts: NotifyHosts = field(default_factory=NotifyHosts)  # where jobs' notify URLs may point
    node: Node | None = None  # the cores and memory the slots' jobs share; None: this machine's
    budgets: BudgetRules = field(default_factory=BudgetRules)  # each user's budgets (budgets.py)


ServeConfig = with_settings(ServeConfig, "config")


def with_note(reason: str, note: str | None) -> str:
    """A job's reason with the warning it carries, if any."""
    if not note or note in reason:
        return reason
    return f"{reason}; {note}" if reason else note


class SchedulerState:
    """One server's shared state. The parts that handle requests, rounds, attempts and recovery
    each hold it, and change the state file and the round clock only under ``lock``."""

    def __init__(self, store: StateStore, executor: Executor, slots: list[Slot], policy: Policy,
                 config: ServeConfig, clock: Callable[[], float], log: Callable[[str], None],
                 given: dict | None = None) -> None:
        """``given``: what the server was started with for its optional resources (each takes its own: resources/registry.py)."""
        if not slots:
            raise ValueError("a server needs at least one slot")
        self.store = store
        self.executor = executor
        self.policy = policy
        self.config = config
        self.clock = clock
        self.log = log
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
        self.node = config.node or this_machine()

        self.round = int(store.meta("round", "0") or 0)
        ahead = config.plan_ahead_s if config.plan_ahead_s is not None else min(config.round_s / 2, 10.0)
        self.plan_ahead_s = min(max(0.0, ahead), config.round_s)
        self.round_end = 0.0  # the current round ends (and the next one starts) here
        self.dirty = True  # a job arrived or ended since the last round: idle slots may be fillable
        self.notes: dict[int, str] = {}  # job id -> a warning its reason carries (lifecycle.check_resumed)
        self.retry_at: dict[int, float] = {}  # job id -> when its crash's backoff ends: no round places it before
        store.set_run_settings({  # what `apportion replay` simulates this run with
            "policy": getattr(policy, "name", type(policy).__name__), "policy_options": config.policy_options,
            "round_s": config.round_s, "plan_ahead_s": self.plan_ahead_s, "fill_gap_s": config.fill_gap_s,
            "slots": [[s.id, s.gpu_type] for s in self.slots], "received_since": config.received_since,
            "share_by_user": config.share_by_user, "user_weights": dict(config.user_weights),
        })
        # the optional resources (resources/registry.py); ValueError for settings one cannot start with
        self.resources = Resources.open(self, dict(given or {}))
        self.durations = None  # the finished jobs' durations and their predictor (durations.DurationHistory)
        self.elastic = None  # elastic jobs' noise scales and step-time models (elastic.ElasticModels)

    def __getattr__(self, name: str):
        """What a resource shows under ``name`` (``Resource.parts``)."""
        if name.startswith("_") or "resources" not in self.__dict__:
            raise AttributeError(name)
        return self.resources.part(name)

    def online(self) -> dict[str, int] | None:
        """Slots of each type that can run attempts now: what the executor still has and each resource
        lets run (rented instances held), the fewest; None: all of them."""
        found = [c for c in (self.executor.capacity(), *self.resources.capacities()) if c is not None]
        if not found:
            return None
        return {t: min(c.get(t, 0) for c in found) for t in self.gpu_types}

    @property
    def next_plan_at(self) -> float:
        """When the next round is decided: ``plan_ahead_s`` before the current one ends."""
        return self.round_end - self.plan_ahead_s
