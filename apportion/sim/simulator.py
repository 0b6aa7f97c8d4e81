"""Replay a JobTable on a cluster in virtual time, round by round, with one policy.

Progress is throughput × time. Between events where nothing can change (no arrival, no
finish, an integral allocation already in place, no policy threshold crossed) the loop
jumps many rounds at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.durations import DurationPredictor
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import JobView
from apportion.mechanism.round_planner import RoundDecision, RoundPlanner, RoundState, running_types
from apportion.policies.base import Policy, wants_predictions
from apportion.sim.durations import HistoryFeed
from apportion.sim.result import JobStatus, SimResult
from apportion.sim.unschedulable import unschedulable_reasons

ProgressCallback = Callable[[int, int, float], None]  # (jobs ended, jobs in all, virtual time)


@dataclass(frozen=True)
class SimConfig:
    round_s: float = 360.0
    restart_cost_s: float = 10.0  # no progress for this long after a job is moved or resumed


def job_throughputs(jobs: JobTable, cluster: Cluster, throughputs: ThroughputTable) -> np.ndarray:
    """[n, T] steps/s of every job on every cluster GPU type at its own GPU count; 0 = cannot run."""
    missing = [t for t in cluster.gpu_types if t not in throughputs.gpu_types]
    if missing:
        raise ValueError(
            f"no throughputs for GPU type '{missing[0]}' (known: {', '.join(throughputs.gpu_types)})"
        )
    table = throughputs.at_scales(jobs.num_gpus)
    type_index = np.array([table.gpu_types.index(t) for t in cluster.gpu_types])
    scale_index = np.searchsorted(np.asarray(table.scales), jobs.num_gpus)
    rates = table.steps_per_s[jobs.kind[:, None], type_index[None, :], scale_index[:, None]]
    rates = np.nan_to_num(rates, nan=0.0)
    if jobs.allowed is not None:
        allowed_index = [jobs.allowed_types.index(t) if t in jobs.allowed_types else -1 for t in cluster.gpu_types]
        for col, idx in enumerate(allowed_index):
            rates[:, col] = 0.0 if idx < 0 else np.where(jobs.allowed[:, idx], rates[:, col], 0.0)
    return rates


class Simulator:
    """A virtual clock around the shared round: admit, decide, advance, finish, until done.

    The per-job state lives in :class:`Replay` (arrays over JobTable rows); each phase is a
    method that reads and updates it, and the decision itself is the
    :class:`~apportion.mechanism.round_planner.RoundPlanner`'s, the same the server uses.
    """

    def __init__(
        self,
        jobs: JobTable,
        cluster: Cluster,
        throughputs: ThroughputTable,
        policy: Policy,
        config: SimConfig = SimConfig(),
        progress: ProgressCallback | None = None,
        predictor: DurationPredictor | None = None,
    ) -> None:
        """``predictor``: the duration predictor fed with the replay's finished jobs, for a policy
        that asks for predicted durations (default: a fresh ``DurationPredictor``)."""
        self.jobs = jobs
        self.cluster = cluster
        self.policy = policy
        self.config = config
        self.progress = progress
        self.rates = job_throughputs(jobs, cluster, throughputs)
        # space sharing: steps/s of kind i sharing a GPU with kind j, [K, K, T]; None when the policy
        # does not share GPUs or no pair is known
        sharing = RoundPlanner.space_sharing(policy) and throughputs.pair_steps_per_s
        self.pair_rates = throughputs.pair_matrix(cluster.gpu_types) if sharing else None
        self.planner = RoundPlanner(policy, cluster, pair_rates=self.pair_rates)
        self.on_decision: Callable[[float, np.ndarray, RoundDecision], None] | None = None
        self.history: HistoryFeed | None = None  # set by run() for a policy that predicts durations
        self._predictor = predictor

    def run(self) -> SimResult:
        wall_start = time.perf_counter()
        replay = self._start()
        last_report = time.perf_counter()
        while True:
            self._admit(replay)
            if not len(replay.active):
                if replay.next_arrival >= len(self.jobs):
                    break
                replay.now = _next_boundary(replay.now, self.jobs.submit_time_s[replay.next_arrival], self.config.round_s)
                continue
            decision, view = self._decide(replay)
            if self.on_decision is not None:
                self.on_decision(replay.now, replay.active.copy(), decision)
            if not self._advance(replay, decision, view):
                break  # nothing can run and nothing will arrive: leave the rest unfinished
            if self.progress is not None and time.perf_counter() - last_report > 0.2:
                self.progress(replay.ended, len(self.jobs), replay.now)
                last_report = time.perf_counter()
        if self.progress is not None:
            self.progress(replay.ended, len(self.jobs), replay.now)
        return self._result(replay, time.perf_counter() - wall_start)

    # the phases ------------------------------------------------------------------------

    def _start(self) -> Replay:
        """Mask what cannot run anywhere, and which jobs can never run at all."""
        jobs, cluster = self.jobs, self.cluster
        rates = self.rates
        fits = (rates > 0) & (jobs.num_gpus[:, None] <= cluster.capacity[None, :])
        self.rates = np.where(fits, rates, 0.0)
        replay = Replay.empty(len(jobs), cluster)
        if wants_predictions(self.policy):
            self.history = HistoryFeed(jobs, self.rates, self._predictor)
        never_run = self._never_run()
        replay.schedulable = fits.any(axis=1) & ~never_run
        self.unschedulable_reason = unschedulable_reasons(jobs, cluster, rates, never_run)
        return replay

    def _never_run(self) -> np.ndarray:
        jobs, n = self.jobs, len(self.jobs)
        everyone = JobView(
            index=np.arange(n), submit_time_s=jobs.submit_time_s, kind=jobs.kind, num_gpus=jobs.num_gpus,
            priority=jobs.priority, total_steps=jobs.total_steps, steps_done=np.zeros(n),
            attained_service_s=np.zeros(n), first_start_s=np.full(n, np.nan), running_type=np.full(n, -1),
            queue=jobs.queue, user=jobs.user, now_s=0.0, deadline_s=jobs.deadline_s,
        )
        return self.planner.never_runs(everyone, self.rates)

    def _admit(self, replay: Replay) -> None:
        """Jobs submitted by now join the active set (or are marked unschedulable)."""
        arrived_until = int(np.searchsorted(self.jobs.submit_time_s, replay.now, side="right"))
        if arrived_until <= replay.next_arrival:
            return
        new = np.arange(replay.next_arrival, arrived_until)
        ok = replay.schedulable[new]
        replay.status[new[~ok]] = JobStatus.UNSCHEDULABLE
        replay.ended += int(np.count_nonzero(~ok))
        replay.status[new[ok]] = JobStatus.QUEUED
        if ok.any():
            replay.active = np.concatenate([replay.active, new[ok]])
        replay.next_arrival = arrived_until

    def _decide(self, replay: Replay) -> tuple[RoundDecision, JobView]:
        """Ask the shared round planner, then book restarts, moves, preemptions and first starts."""
        jobs, cluster, active = self.jobs, self.cluster, replay.active
        positions = replay.local_of
        positions[active] = np.arange(len(active))
        holder = np.where(replay.gpu_job >= 0, positions[np.maximum(replay.gpu_job, 0)], -1)
        partner = np.where(replay.gpu_partner >= 0, positions[np.maximum(replay.gpu_partner, 0)], -1)
        view = JobView(
            index=active,
            submit_time_s=jobs.submit_time_s[active],
            kind=jobs.kind[active],
            num_gpus=jobs.num_gpus[active],
            priority=jobs.priority[active],
            total_steps=jobs.total_steps[active],
            steps_done=replay.steps_done[active],
            attained_service_s=replay.attained_gpu_s[active],
            first_start_s=replay.first_start[active],
            running_type=running_types(cluster, holder, partner, len(active)),
            queue=jobs.queue[active],
            user=jobs.user[active],
            now_s=replay.now,
            deadline_s=None if jobs.deadline_s is None else jobs.deadline_s[active],
            **self._predictions(active),
        )
        decision = self.planner.plan(RoundState(view, self.rates[active], replay.time_alone_on_type[active],
                                                holder, partner), cluster)
        if decision.resolved:
            replay.allocation_integral = decision.allocation.is_integral()
        replay.gpu_job = np.where(decision.owner >= 0, active[np.maximum(decision.owner, 0)], -1)
        replay.gpu_partner = np.where(decision.second >= 0, active[np.maximum(decision.second, 0)], -1)

        running = decision.running
        started_before = ~np.isnan(view.first_start_s)
        replay.restarted = running & ~decision.kept & started_before
        replay.moves[active[replay.restarted & decision.was_running]] += 1
        replay.preemptions[active[decision.preempted]] += 1
        replay.first_start[active[running & ~started_before]] = replay.now
        replay.status[active[running]] = JobStatus.RUNNING
        replay.status[active[~running]] = JobStatus.QUEUED
        return decision, view

    def _predictions(self, active: np.ndarray) -> dict[str, np.ndarray]:
        """The active jobs' predicted GPU time, from the jobs finished so far (none if not asked for)."""
        if self.history is None:
            return {}
        gpu_s, log_sd = self.history.predict(active)
        return {"predicted_gpu_s": gpu_s, "predicted_log_sd": log_sd}

    def _advance(self, replay: Replay, decision: RoundDecision, view: JobView) -> bool:
        """Run the decision until the next round (or jump many when nothing can change).

        Returns False when nothing runs and nothing will ever arrive."""
        jobs, active, round_s = self.jobs, replay.active, self.config.round_s
        n, now = len(jobs), replay.now
        running = decision.running
        run_rows = active[running]
        run_type = decision.chosen_type[running]
        run_rate = self.rates[run_rows, run_type]
        run_partner = decision.partner[running]
        paired = run_partner >= 0
        if paired.any():
            partner_kind = jobs.kind[active[run_partner[paired]]]
            run_rate[paired] = self.pair_rates[jobs.kind[run_rows[paired]], partner_kind, run_type[paired]]
        run_delay = np.where(replay.restarted[running], self.config.restart_cost_s, 0.0)
        time_to_finish = run_delay + (jobs.total_steps[run_rows] - replay.steps_done[run_rows]) / run_rate

        end = now + round_s
        whole_share = decision.allocation.time_fraction() > 1 - 1e-9
        stable = replay.allocation_integral and bool(np.all(running[whole_share]))
        if not running.any() and replay.next_arrival < n:
            end = _next_boundary(now, float(jobs.submit_time_s[replay.next_arrival]), round_s)
        elif stable:
            next_event = min(
                float(time_to_finish.min()) + now if len(run_rows) else math.inf,
                float(jobs.submit_time_s[replay.next_arrival]) if replay.next_arrival < n else math.inf,
                decision.reallocate_at,
            )
            if math.isfinite(next_event):
                end = _next_boundary(now, next_event, round_s)
        span = end - now
        finishing = time_to_finish <= span + 1e-9
        held_s = np.where(finishing, time_to_finish, span)
        progress_s = np.maximum(held_s - run_delay, 0.0)
        replay.steps_done[run_rows] = np.where(
            finishing, jobs.total_steps[run_rows], replay.steps_done[run_rows] + run_rate * progress_s
        )
        gpus = jobs.num_gpus[run_rows]
        replay.attained_gpu_s[run_rows] += held_s * gpus
        replay.time_on_type[run_rows, run_type] += held_s
        replay.time_alone_on_type[run_rows[~paired], run_type[~paired]] += held_s[~paired]
        gpu_held_s = held_s * gpus
        if paired.any():
            # a shared GPU is busy while either of its two jobs holds it: count it once, on the
            # pair's lead (its smaller JobTable row)
            held_by = np.zeros(len(active))
            held_by[running] = held_s
            lead = np.flatnonzero(paired & (run_rows < active[np.maximum(run_partner, 0)]))
            other_held = held_by[run_partner[lead]]
            together = np.minimum(held_s[lead], other_held)
            gpu_held_s[paired] = 0.0
            gpu_held_s[lead] = np.maximum(held_s[lead], other_held)
            replay.shared_gpu_s += float(together.sum())
            self.planner.pair_clock.add(np.column_stack([run_rows[lead], active[run_partner[lead]]]),
                                        run_type[lead], together)
        replay.busy_gpu_s += float(np.sum(gpu_held_s))
        busy_gpus = int(np.count_nonzero(replay.gpu_job >= 0))  # a GPU two jobs share counts once
        replay.timeline.append((now, busy_gpus, len(run_rows), len(active) - len(run_rows)))
        replay.decisions += 1

        done_rows = run_rows[finishing]
        if len(done_rows):
            self._finish(replay, done_rows, now + time_to_finish[finishing])
        elif not running.any() and replay.next_arrival >= n:
            return False
        replay.now = end
        return True

    def _finish(self, replay: Replay, done_rows: np.ndarray, finish_s: np.ndarray) -> None:
        """Jobs that did their last step leave; a pair's survivor keeps its GPU alone."""
        replay.finish[done_rows] = finish_s
        replay.status[done_rows] = JobStatus.COMPLETED
        if self.history is not None:
            self.history.finished(done_rows, finish_s)
        replay.ended += len(done_rows)
        replay.active = replay.active[replay.status[replay.active] != JobStatus.COMPLETED]
        replay.gpu_job[np.isin(replay.gpu_job, done_rows)] = -1
        replay.gpu_partner[np.isin(replay.gpu_partner, done_rows)] = -1
        lone = (replay.gpu_job < 0) & (replay.gpu_partner >= 0)  # the first of a pair finished: its partner stays
        replay.gpu_job[lone], replay.gpu_partner[lone] = replay.gpu_partner[lone], -1

    def _result(self, replay: Replay, wall_s: float) -> SimResult:
        result = SimResult.build(
            policy=self.policy.name,
            jobs=self.jobs,
            cluster=self.cluster,
            config=self.config,
            status=replay.status,
            first_start_s=replay.first_start,
            finish_s=replay.finish,
            preemptions=replay.preemptions,
            moves=replay.moves,
            steps_done=replay.steps_done,
            time_on_type=replay.time_on_type,
            busy_gpu_s=replay.busy_gpu_s,
            timeline=np.asarray(replay.timeline, dtype=np.float64).reshape(-1, 4),
            decisions=replay.decisions,
            sim_wall_s=wall_s,
            unschedulable_reason=self.unschedulable_reason,
        )
        if RoundPlanner.space_sharing(self.policy):
            result.summary["shared_gpu_hours"] = replay.shared_gpu_s / 3600.0
        return result


@dataclass
class Replay:
    """A replay in progress: per-job arrays over JobTable rows, who holds each GPU, the clock."""

    status: np.ndarray  # [n] JobStatus
    schedulable: np.ndarray  # [n] can run at all on this cluster under this policy
    steps_done: np.ndarray  # [n]
    attained_gpu_s: np.ndarray  # [n] GPU-seconds held so far
    time_on_type: np.ndarray  # [n, T] seconds held of each type, alone or shared
    time_alone_on_type: np.ndarray  # [n, T] seconds held alone: what the mechanism compares shares with
    first_start: np.ndarray  # [n] NaN until first run
    finish: np.ndarray  # [n] NaN until completed
    preemptions: np.ndarray  # [n]
    moves: np.ndarray  # [n]
    restarted: np.ndarray  # [active] this round's jobs that pay the restart cost
    local_of: np.ndarray  # [n] position of each active job in ``active`` (scratch)
    gpu_job: np.ndarray  # [G] JobTable row on each GPU, -1 idle
    gpu_partner: np.ndarray  # [G] the second job sharing it, -1 if none
    active: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    next_arrival: int = 0
    ended: int = 0
    now: float = 0.0
    allocation_integral: bool = False
    busy_gpu_s: float = 0.0
    shared_gpu_s: float = 0.0
    decisions: int = 0
    timeline: list = field(default_factory=list)  # (time_s, busy GPUs, running jobs, queued jobs)

    @classmethod
    def empty(cls, n: int, cluster: Cluster) -> Replay:
        num_types = len(cluster.gpu_types)
        return cls(
            status=np.full(n, JobStatus.PENDING, dtype=np.int8), schedulable=np.ones(n, dtype=bool),
            steps_done=np.zeros(n), attained_gpu_s=np.zeros(n), time_on_type=np.zeros((n, num_types)),
            time_alone_on_type=np.zeros((n, num_types)), first_start=np.full(n, np.nan), finish=np.full(n, np.nan),
            preemptions=np.zeros(n, dtype=np.int64), moves=np.zeros(n, dtype=np.int64),
            restarted=np.zeros(0, dtype=bool), local_of=np.full(n, -1, dtype=np.int64),
            gpu_job=np.full(cluster.num_gpus, -1, dtype=np.int64),
            gpu_partner=np.full(cluster.num_gpus, -1, dtype=np.int64),
        )


def _next_boundary(now: float, when: float, round_s: float) -> float:
    """The first round boundary after ``now`` at or past ``when``."""
    rounds = max(1, math.ceil((when - now) / round_s - 1e-9))
    return now + rounds * round_s


def simulate(
    jobs: JobTable,
    cluster: Cluster,
    throughputs: ThroughputTable,
    policy: Policy,
    config: SimConfig = SimConfig(),
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Run one replay and return its result."""
    return Simulator(jobs, cluster, throughputs, policy, config, progress).run()
