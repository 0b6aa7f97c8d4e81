"""Replay a JobTable on a cluster in virtual time, round by round, with one policy.

Progress is throughput × time. Between events where nothing can change (no arrival, no
finish, an integral allocation already in place, no policy threshold crossed) the loop
jumps many rounds at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.rounds import RoundMechanism
from apportion.policies.base import Policy
from apportion.sim.result import JobStatus, SimResult

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
    def __init__(
        self,
        jobs: JobTable,
        cluster: Cluster,
        throughputs: ThroughputTable,
        policy: Policy,
        config: SimConfig = SimConfig(),
        progress: ProgressCallback | None = None,
    ) -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.policy = policy
        self.config = config
        self.progress = progress
        self.rates = job_throughputs(jobs, cluster, throughputs)
        self.cluster_view = ClusterView(cluster.gpu_types, cluster.capacity, cluster.price_per_gpu_hour)
        self.mechanism = RoundMechanism(config.round_s)

    def run(self) -> SimResult:
        wall_start = time.perf_counter()
        jobs, cluster, rates = self.jobs, self.cluster, self.rates
        n, num_types = len(jobs), len(cluster.gpu_types)
        round_s = self.config.round_s
        gpus = jobs.num_gpus

        fits = (rates > 0) & (gpus[:, None] <= cluster.capacity[None, :])
        schedulable = fits.any(axis=1)
        rates = np.where(fits, rates, 0.0)

        status = np.full(n, JobStatus.PENDING, dtype=np.int8)
        steps_done = np.zeros(n)
        attained_gpu_s = np.zeros(n)
        time_on_type = np.zeros((n, num_types))
        first_start = np.full(n, np.nan)
        finish = np.full(n, np.nan)
        preemptions = np.zeros(n, dtype=np.int64)
        moves = np.zeros(n, dtype=np.int64)
        local_of = np.full(n, -1, dtype=np.int64)

        gpu_job = np.full(cluster.num_gpus, -1, dtype=np.int64)  # JobTable row on each GPU
        active = np.zeros(0, dtype=np.int64)
        next_arrival = 0
        ended = 0
        now = 0.0
        share_rows: np.ndarray | None = None
        allocation_integral = False
        reallocate_at = math.inf
        timeline: list[tuple[float, int, int, int]] = []
        busy_gpu_s = 0.0
        decisions = 0
        last_report = time.perf_counter()

        while True:
            # admit arrivals up to now
            arrived_until = int(np.searchsorted(jobs.submit_time_s, now, side="right"))
            job_set_changed = False
            if arrived_until > next_arrival:
                new = np.arange(next_arrival, arrived_until)
                ok = schedulable[new]
                status[new[~ok]] = JobStatus.UNSCHEDULABLE
                ended += int(np.count_nonzero(~ok))
                status[new[ok]] = JobStatus.QUEUED
                if ok.any():
                    active = np.concatenate([active, new[ok]])
                    job_set_changed = True
                next_arrival = arrived_until
            if len(active) == 0:
                if next_arrival >= n:
                    break
                now = _next_boundary(now, jobs.submit_time_s[next_arrival], round_s)
                continue

            local_of[active] = np.arange(len(active))
            held = gpu_job >= 0
            previous_owner = np.full(cluster.num_gpus, -1, dtype=np.int64)
            previous_owner[held] = local_of[gpu_job[held]]
            was_running = np.zeros(len(active), dtype=bool)
            was_running[previous_owner[held]] = True
            running_type = np.full(len(active), -1, dtype=np.int64)
            running_type[previous_owner[held]] = cluster.gpu_type[held]

            view = JobView(
                index=active,
                submit_time_s=jobs.submit_time_s[active],
                kind=jobs.kind[active],
                num_gpus=gpus[active],
                priority=jobs.priority[active],
                total_steps=jobs.total_steps[active],
                steps_done=steps_done[active],
                attained_service_s=attained_gpu_s[active],
                first_start_s=first_start[active],
                running_type=running_type,
                queue=jobs.queue[active],
                user=jobs.user[active],
                now_s=now,
                deadline_s=None if jobs.deadline_s is None else jobs.deadline_s[active],
            )
            active_rates = rates[active]
            if job_set_changed or share_rows is None or now >= reallocate_at:
                allocation = self.policy.allocate(view, self.cluster_view, ThroughputView(active_rates))
                share_rows = allocation.share
                allocation_integral = allocation.is_integral()
            share = share_rows

            in_system = np.maximum(now - view.submit_time_s, 1e-9)
            received = time_on_type[active] / in_system[:, None]
            chosen = self.mechanism.choose(share, received, view.num_gpus, cluster.capacity)
            owner, kept = place_on_gpus(cluster, previous_owner, chosen, view.num_gpus)
            running = chosen >= 0
            gpu_job = np.where(owner >= 0, active[np.maximum(owner, 0)], -1)

            started_before = ~np.isnan(view.first_start_s)
            restarted = running & ~kept & started_before
            delay = np.where(restarted, self.config.restart_cost_s, 0.0)
            moves[active[restarted & was_running]] += 1
            preemptions[active[was_running & ~running]] += 1
            fresh = running & ~started_before
            first_start[active[fresh]] = now
            status[active[running]] = JobStatus.RUNNING
            status[active[~running]] = JobStatus.QUEUED
            reallocate_at = now + self.policy.next_change_s(view, running)

            run_rows = active[running]
            run_type = chosen[running]
            run_rate = active_rates[running, run_type]
            run_delay = delay[running]
            time_to_finish = run_delay + (jobs.total_steps[run_rows] - steps_done[run_rows]) / run_rate

            end = now + round_s
            whole_share = share.sum(axis=1) > 1 - 1e-9
            stable = allocation_integral and bool(np.all(running[whole_share]))
            if not running.any() and next_arrival < n:
                end = _next_boundary(now, float(jobs.submit_time_s[next_arrival]), round_s)
            elif stable:
                next_event = min(
                    float(time_to_finish.min()) + now if len(run_rows) else math.inf,
                    float(jobs.submit_time_s[next_arrival]) if next_arrival < n else math.inf,
                    reallocate_at,
                )
                if math.isfinite(next_event):
                    end = _next_boundary(now, next_event, round_s)
            span = end - now
            finishing = time_to_finish <= span + 1e-9
            held_s = np.where(finishing, time_to_finish, span)
            progress_s = np.maximum(held_s - run_delay, 0.0)
            steps_done[run_rows] = np.where(
                finishing, jobs.total_steps[run_rows], steps_done[run_rows] + run_rate * progress_s
            )
            attained_gpu_s[run_rows] += held_s * gpus[run_rows]
            time_on_type[run_rows, run_type] += held_s
            busy_gpu_s += float(np.sum(held_s * gpus[run_rows]))
            timeline.append((now, int(gpus[run_rows].sum()), len(run_rows), len(active) - len(run_rows)))
            decisions += 1

            done_rows = run_rows[finishing]
            if len(done_rows):
                finish[done_rows] = now + time_to_finish[finishing]
                status[done_rows] = JobStatus.COMPLETED
                ended += len(done_rows)
                active = active[status[active] != JobStatus.COMPLETED]
                gpu_job[np.isin(gpu_job, done_rows)] = -1
                share_rows = None  # job set changed: re-solve next round
            elif not running.any() and next_arrival >= n:
                break  # nothing can run and nothing will arrive: leave the rest unfinished
            now = end
            if self.progress is not None and time.perf_counter() - last_report > 0.2:
                self.progress(ended, n, now)
                last_report = time.perf_counter()

        if self.progress is not None:
            self.progress(ended, n, now)
        return SimResult.build(
            policy=self.policy.name,
            jobs=jobs,
            cluster=cluster,
            config=self.config,
            status=status,
            first_start_s=first_start,
            finish_s=finish,
            preemptions=preemptions,
            moves=moves,
            steps_done=steps_done,
            time_on_type=time_on_type,
            busy_gpu_s=busy_gpu_s,
            timeline=np.asarray(timeline, dtype=np.float64).reshape(-1, 4),
            decisions=decisions,
            sim_wall_s=time.perf_counter() - wall_start,
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
