"""One workload, two clocks: replay it in the simulator and through the real scheduler on a fake
clock whose fake jobs advance at the simulator's throughputs, and record what each decided.

The server runs with no restart cost, no planning ahead and no early rounds (rounds only at
round boundaries), and its fake jobs answer their lease at once and stop exactly at a round's
end, which is what the simulator models; so both clocks must take the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from apportion.core.cluster import Cluster, parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.executors.fake import FakeExecutor
from apportion.runtime.checkpoint import Checkpointer
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.core.cpu_speed import relative_speed
from apportion.serve.base.slots import Node, parse_slots
from apportion.serve.store.state import StateStore
from apportion.sim import SimConfig
from apportion.sim.simulator import Simulator

Placement = dict[int, tuple[str, int]]  # job id -> (GPU type, partner job id or 0)


@dataclass
class Replayed:
    finish_s: dict[int, float]  # job id -> completion time
    rounds: dict[float, Placement]  # round start -> who runs where


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def in_simulator(jobs: JobTable, cluster: str, throughputs: ThroughputTable, policy, round_s: float,
                 prices: dict[str, float] | None = None, received_since: str = "allocation",
                 user_weights: dict[str, float] | None = None, cpus_per_node: int | None = None) -> Replayed:
    """The simulator's replay; job ids are JobTable rows + 1 (the server numbers from 1).
    ``prices``: $ per GPU-hour of each type (min-cost needs them); ``user_weights``: share by user
    with these weights (None: the policy alone); ``cpus_per_node``: each node's cores (the jobs'
    ``cpu_curves`` then slow them, split in proportion to GPUs)."""
    groups = parse_cluster_shorthand(cluster).groups
    priced = Cluster(tuple(replace(g, price_per_gpu_hour=(prices or {}).get(g.gpu_type, math.nan),
                                   cpus_per_node=cpus_per_node) for g in groups))
    config = SimConfig(round_s=round_s, restart_cost_s=0.0, received_since=received_since,
                       share_by_user=user_weights is not None, user_weights=tuple((user_weights or {}).items()))
    simulator = Simulator(jobs, priced, throughputs, policy, config)
    types = simulator.cluster.gpu_types
    decided: dict[float, Placement] = {}

    def record(now, active, decision) -> None:
        placement = {}
        for position in np.flatnonzero(decision.running):
            partner = decision.partner[position]
            placement[int(active[position]) + 1] = (types[decision.chosen_type[position]],
                                                    int(active[partner]) + 1 if partner >= 0 else 0)
        decided[now] = placement

    simulator.on_decision = record
    result = simulator.run()
    finish = {row + 1: float(t) for row, t in enumerate(result.finish_s) if np.isfinite(t)}
    # a decision stands until the next one: spell it out for every round in between
    times = sorted(decided)
    rounds: dict[float, Placement] = {}
    for k, start in enumerate(times):
        until = times[k + 1] if k + 1 < len(times) else max(finish.values(), default=start) + round_s
        t = start
        while t < until - 1e-9:
            rounds[t] = decided[start]
            t += round_s
    return Replayed(finish, rounds)


def on_server(jobs: JobTable, slots: str, throughputs: ThroughputTable, policy, round_s: float,
              state_dir: Path, queues: list[str] | None = None, prices: dict[str, float] | None = None,
              received_since: str = "allocation", user_weights: dict[str, float] | None = None,
              cores: int | None = None, curves_from: str = "profile", report_rates: bool = False) -> Replayed:
    """The real scheduler over ``slots``, its fake jobs progressing at ``throughputs``; ``user_weights``:
    share by user with these weights (None: the policy alone); ``cores``: the node's cores, split in
    proportion to slots (``--cpu-split proportional``), each fake job slowed at its share by its curve
    (``jobs.cpu_curves``), which the server knows as if profiled (``curves_from="profile"``) or from the
    job file's ``cpu_speed`` (``"job file"``: nothing measured but the job's own share);
    ``report_rates``: each progress report gives the job's steps/s (the estimates learn them)."""
    clock = Clock()
    executor = FakeExecutor(state_dir)
    store = StateStore(state_dir / "state.db")
    split = {}
    slowed: dict[int, float] = {}
    if cores is not None:
        split = {"node": Node(tuple(range(cores)), 0.0), "cpu_split": "proportional"}
        share = cores / len(parse_slots(slots))
        curves = jobs.cpu_curves
        for row in range(len(jobs)) if curves_from == "profile" else ():  # measured for long: a learnt curve
            for point, speed in zip(curves.points.tolist(), curves.speed[row].tolist()):
                store.put_core_speed(row + 1, point, speed * 1e9, 1e9, 0.0)
        at_share = relative_speed(curves, np.arange(len(jobs)), np.full(len(jobs), share))
        slowed = {row + 1: float(speed) for row, speed in enumerate(at_share.tolist())}
    config = ServeConfig(state_dir=state_dir, round_s=round_s, plan_ahead_s=0.0, fill_gap_s=math.inf,
                         renew_wait_s=0.0, grace_s=1e9, start_timeout_s=1e9, prices=dict(prices or {}),
                         received_since=received_since, start_hold_s=None,  # all it places at once, as the simulator
                         share_by_user=user_weights is not None, user_weights=dict(user_weights or {}), **split)
    scheduler = Scheduler(store, executor, parse_slots(slots), policy, config, clock=clock, throughputs=throughputs)
    slot_type = {s.id: s.gpu_type for s in scheduler.slots}
    kind_of = {row + 1: jobs.kinds[k] for row, k in enumerate(jobs.kind)}
    total = {row + 1: float(s) for row, s in enumerate(jobs.total_steps)}
    steps = {job_id: 0.0 for job_id in total}
    rate: dict[int, float] = {}  # steps/s of each running job until the next round boundary
    pair_rates = throughputs.pair_steps_per_s
    scale = {g: throughputs.scales.index(g) for g in throughputs.scales}

    def speed(job_id: int, gpu_type: str, gpus: int, partner: int) -> float:
        if partner:
            pair = pair_rates.get((kind_of[job_id], kind_of[partner], gpu_type))
            if pair is not None:
                return pair[0]
            return pair_rates[(kind_of[partner], kind_of[job_id], gpu_type)][1]
        k, t = throughputs.kind_index(kind_of[job_id]), throughputs.gpu_types.index(gpu_type)
        return float(throughputs.steps_per_s[k, t, scale[gpus]]) * slowed.get(job_id, 1.0)

    def placement() -> Placement:
        running = executor.running()
        on_slot: dict[str, list[int]] = {}
        for job_id, attempt in running.items():
            for slot in attempt.slots:
                on_slot.setdefault(slot, []).append(job_id)
        placed = {}
        for job_id, attempt in running.items():
            sharing = [other for other in on_slot[attempt.slots[0]] if other != job_id]
            placed[job_id] = (slot_type[attempt.slots[0]], sharing[0] if sharing else 0)
        return placed

    submits = sorted((float(t), row + 1) for row, t in enumerate(jobs.submit_time_s))
    finished: dict[int, float] = {}
    rounds: dict[float, Placement] = {}
    boundary, last = 0.0, 0.0
    while len(finished) < len(total):
        running = executor.running()
        finish_at = {j: last + (total[j] - steps[j]) / rate[j] for j in running}
        t = min([boundary] + [s for s, _ in submits[:1]] + list(finish_at.values()))
        for j in running:
            steps[j] = min(total[j], steps[j] + rate[j] * (t - last))
        clock.now, last = t, t
        for j, at in finish_at.items():
            if at <= t + 1e-9:
                steps[j] = total[j]
                scheduler.progress(j, running[j].attempt, int(round(steps[j])), None)
                executor.finish(j, 0)
                finished[j] = t
        while submits and submits[0][0] <= t:
            row = submits.pop(0)[1] - 1
            name = jobs.name[row] if jobs.name is not None and jobs.name[row] else f"job-{row}"
            spec = {"name": name, "command": "train", "total_steps": int(jobs.total_steps[row]),
                    "gpus": int(jobs.num_gpus[row]), "kind": jobs.kinds[jobs.kind[row]],
                    "priority": float(jobs.priority[row])}
            if queues is not None:
                spec["queue"] = queues[row]
            if jobs.estimated_steps is not None and np.isfinite(jobs.estimated_steps[row]):
                # the trace's estimate in the job file's unit: wall seconds at its GPUs on its fastest type
                k, gpus = throughputs.kind_index(kind_of[row + 1]), int(jobs.num_gpus[row])
                fastest = float(throughputs.steps_per_s[k, :, scale[gpus]].max())
                spec["estimated_duration_s"] = float(jobs.estimated_steps[row]) / fastest
            if cores is not None and curves_from == "job file":
                spec["cpu_speed"] = {float(c): float(v) for c, v in zip(jobs.cpu_curves.points.tolist(),
                                                                        jobs.cpu_curves.speed[row].tolist())}
            scheduler.submit(spec, jobs.user[row] or "ann")
        if t < boundary:
            scheduler.tick()  # settles the attempts that finished
            continue
        for j, attempt in executor.running().items():
            scheduler.progress(j, attempt.attempt, int(round(steps[j])), rate[j] if report_rates else None)
        scheduler.tick()  # the round: preemptions are answered at the lease call
        for j, attempt in executor.running().items():
            if not scheduler.lease(j, attempt.attempt, int(round(steps[j])))["renew"]:
                # it checkpoints its step (where the server reads it back), then exits 75
                Checkpointer(state_dir / "jobs" / str(j) / "checkpoints", fsync=False).save({}, int(round(steps[j])))
                executor.finish(j, 75)
        scheduler.tick()  # exits settled, new attempts started on the freed slots
        for j, attempt in executor.running().items():
            scheduler.lease(j, attempt.attempt, int(round(steps[j])))
        rounds[t] = placed = placement()
        for j, (gpu_type, partner) in placed.items():
            rate[j] = speed(j, gpu_type, len(executor.running()[j].slots), partner)
        boundary += round_s
    return Replayed(finished, rounds)
