"""A finished serve run made on a fake clock: the real scheduler, with fake jobs that behave as
apportion.runtime's do, each step of the way taking the time its kind is given.

An attempt starts, spends ``start_s`` (``restart_s`` when resumed) before its first lease call,
then trains at its job's speed; it asks for its lease ``lead_s`` before the lease ends, and when
told to stop takes ``stop_s`` to checkpoint and exit 75; after its last step it reports and
exits 0 ``finish_s`` later. With a ``Jitter`` each attempt draws its costs from samples per
kind, and trains at its job's speed times a drawn factor, as attempts on a busy machine do; its
``load`` makes start-ups slower or faster for a while, as a shared machine's drifting load does.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from apportion.executors.fake import FakeExecutor
from apportion.runtime.checkpoint import Checkpointer
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


@dataclass(frozen=True)
class FakeJob:
    kind: str
    steps: int
    steps_per_s: float
    submit_s: float
    after: tuple[int, ...] = ()  # ids of the jobs it runs after (ids count from 1, in the order given)
    user: str = "ann"
    estimated_duration_s: float | None = None  # its job file's own estimate of its wall time; None: none


@dataclass(frozen=True)
class Behaviour:
    """Seconds each part of an attempt of one kind takes."""

    start_s: float = 2.0
    restart_s: float = 3.0
    lead_s: float = 1.0
    stop_s: float = 0.5
    finish_s: float = 0.5


@dataclass(frozen=True)
class Jitter:
    """Each attempt's start-up (or restart), stop and finish costs drawn from ``costs`` (cost name ->
    kind -> samples; a cost or kind not there: the Behaviour's), its speed scaled by one of
    ``speed_factors``."""

    seed: int = 0
    costs: dict[str, dict[str, Sequence[float]]] = field(default_factory=dict)
    speed_factors: Sequence[float] = (1.0,)
    load: Sequence[tuple[float, float]] = ()  # (from second, factor): start-ups beginning then take factor times as long

    def slowness(self, now: float) -> float:
        """How many times as long a start-up beginning at ``now`` takes."""
        return next((factor for since, factor in sorted(self.load, reverse=True) if now >= since), 1.0)

    def draw(self, rng: random.Random, name: str, kind: str, default: float) -> float:
        samples = self.costs.get(name, {}).get(kind)
        return rng.choice(list(samples)) if samples else default


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def serve_on_fake_clock(jobs: list[FakeJob], state_dir: Path, policy, *, slots: str = "cpu:1", round_s: float = 10.0,
                        behaviour: dict[str, Behaviour] | None = None, tick_s: float = 0.05,
                        policy_options: dict | None = None, until_s: float = 3600.0,
                        jitter: Jitter | None = None, share_by_user: bool = False) -> None:
    """Serve ``jobs`` until all have completed; the state stays in ``state_dir``."""
    rng = random.Random(jitter.seed if jitter else 0)
    clock = Clock()
    executor = FakeExecutor(state_dir)
    config = ServeConfig(state_dir=state_dir, round_s=round_s, renew_wait_s=0.0, grace_s=1e9,
                         policy_options=policy_options or {}, share_by_user=share_by_user)
    store = StateStore(state_dir / "state.db")
    scheduler = Scheduler(store, executor, parse_slots(slots), policy, config, clock=clock)
    how = behaviour or {}
    todo = sorted(enumerate(jobs, start=1), key=lambda item: item[1].submit_s)
    spec_of: dict[int, FakeJob] = {}
    attempts: dict[int, dict] = {}  # job id -> what its live attempt is doing
    steps: dict[int, float] = {}
    completed = 0
    ticks = 0
    while completed < len(jobs):
        now = clock.now = round(ticks * tick_s, 9)
        if now > until_s:
            raise AssertionError(f"the fake run did not end within {until_s} s")
        while todo and todo[0][1].submit_s <= now + 1e-9:
            _, job = todo.pop(0)
            job_id = scheduler.submit({"name": f"{job.kind}-job", "kind": job.kind, "command": "train",
                                       "total_steps": job.steps, "gpus": 1,
                                       **({"after": list(job.after)} if job.after else {}),
                                       **({"estimated_duration_s": job.estimated_duration_s}
                                          if job.estimated_duration_s is not None else {})}, job.user)
            spec_of[job_id], steps[job_id] = job, 0.0
        scheduler.tick()
        for job_id, handle in executor.running().items():
            job, kind = spec_of[job_id], how.get(spec_of[job_id].kind, Behaviour())
            live = attempts.get(job_id)
            if live is None or live["attempt"] != handle.attempt:  # a new attempt: it starts up
                name, cost = ("start_s", kind.start_s) if handle.attempt == 1 else ("restart_s", kind.restart_s)
                costs = {"start": cost, "stop_s": kind.stop_s, "finish_s": kind.finish_s, "speed": 1.0}
                if jitter is not None:
                    costs = {"start": jitter.draw(rng, name, job.kind, cost) * jitter.slowness(now),
                             "stop_s": jitter.draw(rng, "stop_s", job.kind, kind.stop_s),
                             "finish_s": jitter.draw(rng, "finish_s", job.kind, kind.finish_s),
                             "speed": rng.choice(list(jitter.speed_factors))}
                live = attempts[job_id] = {"attempt": handle.attempt, "phase": "starting",
                                           "until": now + costs["start"], "lease_end": math.inf, **costs}
                steps[job_id] = float(scheduler.row(job_id).steps_done)
            if live["phase"] == "starting" and now >= live["until"] - 1e-9:
                answer = scheduler.lease(job_id, handle.attempt, int(steps[job_id]))
                live.update(phase="training", lease_end=answer.get("lease_end", now))
                if not answer["renew"]:
                    live.update(phase="stopping", until=now + live["stop_s"])
            elif live["phase"] == "training":
                steps[job_id] = min(job.steps, steps[job_id] + job.steps_per_s * live["speed"] * tick_s)
                if steps[job_id] >= job.steps - 1e-9:
                    scheduler.progress(job_id, handle.attempt, job.steps, job.steps_per_s)
                    live.update(phase="finishing", until=now + live["finish_s"])
                elif now + kind.lead_s >= live["lease_end"] - 1e-9:
                    answer = scheduler.lease(job_id, handle.attempt, int(steps[job_id]))
                    if answer["renew"]:
                        live["lease_end"] = answer["lease_end"]
                    else:
                        live.update(phase="stopping", until=now + live["stop_s"])
            elif live["phase"] == "stopping" and now >= live["until"] - 1e-9:
                Checkpointer(state_dir / "jobs" / str(job_id) / "checkpoints", fsync=False).save({}, int(steps[job_id]))
                executor.finish(job_id, 75)
            elif live["phase"] == "finishing" and now >= live["until"] - 1e-9:
                executor.finish(job_id, 0)
                completed += 1
        ticks += 1
    clock.now = round(ticks * tick_s, 9)
    scheduler.tick()  # settle the last exits
    store.close()
