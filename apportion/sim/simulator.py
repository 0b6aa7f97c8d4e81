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

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.mechanism.pairs import choose_with_pairs
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.rounds import RoundMechanism
from apportion.policies.base import Policy
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
        # space sharing: steps/s of kind i sharing a GPU with kind j, [K, K, T]; None when the policy
        # does not share GPUs or no pair is known
        sharing = getattr(policy, "space_sharing", False) and throughputs.pair_steps_per_s
        self.pair_rates = throughputs.pair_matrix(cluster.gpu_types) if sharing else None
        self.cluster_view = ClusterView(cluster.gpu_types, cluster.capacity, cluster.price_per_gpu_hour)
        self.mechanism = RoundMechanism(config.round_s)

    def _never_run(self, rates: np.ndarray) -> np.ndarray:
        """[n] jobs the policy says it can never run (e.g. larger than a non-borrowing queue's quota)."""
        never_runs = getattr(self.policy, "never_runs", None)
        jobs, n = self.jobs, len(self.jobs)
        if never_runs is None or n == 0:
            return np.zeros(n, dtype=bool)
        everyone = JobView(
            index=np.arange(n), submit_time_s=jobs.submit_time_s, kind=jobs.kind, num_gpus=jobs.num_gpus,
            priority=jobs.priority, total_steps=jobs.total_steps, steps_done=np.zeros(n),
            attained_service_s=np.zeros(n), first_start_s=np.full(n, np.nan), running_type=np.full(n, -1),
            queue=jobs.queue, user=jobs.user, now_s=0.0, deadline_s=jobs.deadline_s,
        )
        return np.asarray(never_runs(everyone, self.cluster_view, ThroughputView(rates)), dtype=bool)

    def run(self) -> SimResult:
        wall_start = time.perf_counter()
        jobs, cluster, rates = self.jobs, self.cluster, self.rates
        n, num_types = len(jobs), len(cluster.gpu_types)
        round_s = self.config.round_s
        gpus = jobs.num_gpus

        fits = (rates > 0) & (gpus[:, None] <= cluster.capacity[None, :])
        rates = np.where(fits, rates, 0.0)
        never_run = self._never_run(rates)
        schedulable = fits.any(axis=1) & ~never_run
        reasons = unschedulable_reasons(jobs, cluster, self.rates, never_run)

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
        gpu_partner = np.full(cluster.num_gpus, -1, dtype=np.int64)  # the second job sharing it, -1 if none
        time_alone_on_type = np.zeros((n, num_types))  # what the mechanism compares single shares with
        pair_clock = PairClock(n, num_types)
        shared_gpu_s = 0.0
        active = np.zeros(0, dtype=np.int64)
        next_arrival = 0
        ended = 0
        now = 0.0
        allocation: Allocation | None = None
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
            previous_partner = np.full(cluster.num_gpus, -1, dtype=np.int64)
            shared = gpu_partner >= 0
            previous_partner[shared] = local_of[gpu_partner[shared]]
            was_running = np.zeros(len(active), dtype=bool)
            was_running[previous_owner[held]] = True
            was_running[previous_partner[shared]] = True
            running_type = np.full(len(active), -1, dtype=np.int64)
            running_type[previous_owner[held]] = cluster.gpu_type[held]
            running_type[previous_partner[shared]] = cluster.gpu_type[shared]

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
            if job_set_changed or allocation is None or now >= reallocate_at:
                allocation = self.policy.allocate(
                    view, self.cluster_view, ThroughputView(active_rates, self.pair_rates)
                )
                allocation_integral = allocation.is_integral()
            share = allocation.share

            in_system = np.maximum(now - view.submit_time_s, 1e-9)
            received = time_alone_on_type[active] / in_system[:, None]
            partner = np.full(len(active), -1, dtype=np.int64)
            if allocation.has_pairs:
                pair_rows = active[allocation.pair_jobs]
                pair_in_system = np.minimum(in_system[allocation.pair_jobs[:, 0]], in_system[allocation.pair_jobs[:, 1]])
                pair_received = pair_clock.seconds(pair_rows) / pair_in_system[:, None]
                chosen, pair_chosen = choose_with_pairs(
                    share, received, allocation.pair_jobs, allocation.pair_share, pair_received,
                    view.num_gpus, cluster.capacity,
                )
                together = allocation.pair_jobs[pair_chosen >= 0]
                partner[together[:, 0]] = together[:, 1]
                partner[together[:, 1]] = together[:, 0]
            else:
                chosen = self.mechanism.choose(share, received, view.num_gpus, cluster.capacity)
            if shared.any() or (partner >= 0).any():
                owner, second, kept = _place_units(cluster, previous_owner, previous_partner, chosen, partner, view.num_gpus)
                gpu_partner = np.where(second >= 0, active[np.maximum(second, 0)], -1)
            else:
                owner, kept = place_on_gpus(cluster, previous_owner, chosen, view.num_gpus)
                gpu_partner[:] = -1
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
            run_partner = partner[running]
            paired = run_partner >= 0
            if paired.any():
                partner_kind = jobs.kind[active[run_partner[paired]]]
                run_rate[paired] = self.pair_rates[jobs.kind[run_rows[paired]], partner_kind, run_type[paired]]
            run_delay = delay[running]
            time_to_finish = run_delay + (jobs.total_steps[run_rows] - steps_done[run_rows]) / run_rate

            end = now + round_s
            whole_share = allocation.time_fraction() > 1 - 1e-9
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
            time_alone_on_type[run_rows[~paired], run_type[~paired]] += held_s[~paired]
            gpu_held_s = held_s * gpus[run_rows]
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
                shared_gpu_s += float(together.sum())
                pair_clock.add(np.column_stack([run_rows[lead], active[run_partner[lead]]]), run_type[lead], together)
            busy_gpu_s += float(np.sum(gpu_held_s))
            timeline.append((now, int(gpus[run_rows].sum()), len(run_rows), len(active) - len(run_rows)))
            decisions += 1

            done_rows = run_rows[finishing]
            if len(done_rows):
                finish[done_rows] = now + time_to_finish[finishing]
                status[done_rows] = JobStatus.COMPLETED
                ended += len(done_rows)
                active = active[status[active] != JobStatus.COMPLETED]
                gpu_job[np.isin(gpu_job, done_rows)] = -1
                gpu_partner[np.isin(gpu_partner, done_rows)] = -1
                lone = (gpu_job < 0) & (gpu_partner >= 0)  # the first of a pair finished: its partner stays
                gpu_job[lone], gpu_partner[lone] = gpu_partner[lone], -1
                allocation = None  # job set changed: re-solve next round
            elif not running.any() and next_arrival >= n:
                break  # nothing can run and nothing will arrive: leave the rest unfinished
            now = end
            if self.progress is not None and time.perf_counter() - last_report > 0.2:
                self.progress(ended, n, now)
                last_report = time.perf_counter()

        if self.progress is not None:
            self.progress(ended, n, now)
        result = SimResult.build(
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
            unschedulable_reason=reasons,
        )
        if getattr(self.policy, "space_sharing", False):
            result.summary["shared_gpu_hours"] = shared_gpu_s / 3600.0
        return result


class PairClock:
    """Seconds each pair of jobs has run together on each GPU type, as sorted keys and values."""

    def __init__(self, num_jobs: int, num_types: int) -> None:
        self.num_jobs = num_jobs
        self.num_types = num_types
        self.keys = np.zeros(0, dtype=np.int64)
        self.values = np.zeros(0)

    def _key(self, rows: np.ndarray) -> np.ndarray:
        """[P, T] keys of every type for each pair of JobTable rows."""
        low, high = rows.min(axis=1).astype(np.int64), rows.max(axis=1).astype(np.int64)
        return ((low * self.num_jobs + high) * self.num_types)[:, None] + np.arange(self.num_types)[None, :]

    def seconds(self, rows: np.ndarray) -> np.ndarray:
        """[P, T] seconds together so far."""
        keys = self._key(rows)
        if not len(self.keys):
            return np.zeros(keys.shape)
        position = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[position] == keys, self.values[position], 0.0)

    def add(self, rows: np.ndarray, gpu_type: np.ndarray, seconds: np.ndarray) -> None:
        keys = self._key(rows)[np.arange(len(rows)), gpu_type]
        keys, merged = np.unique(np.concatenate([self.keys, keys]), return_inverse=True)
        values = np.zeros(len(keys))
        np.add.at(values, merged.reshape(-1), np.concatenate([self.values, seconds]))
        self.keys, self.values = keys, values


def _place_units(
    cluster: Cluster,
    previous_owner: np.ndarray,
    previous_partner: np.ndarray,
    chosen: np.ndarray,
    partner: np.ndarray,
    num_gpus: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Placement when some jobs share GPUs: each pair is placed as one unit on its GPUs.

    Returns the first and second job on each GPU (-1 where idle or not shared) and, per job,
    whether it kept exactly its GPUs (a unit that is the same pair, or the same job alone,
    on the same type).
    """
    n = len(chosen)
    index = np.arange(n)
    lead = (chosen >= 0) & ((partner < 0) | (index < partner))
    unit_first = np.flatnonzero(lead)
    unit_second = partner[unit_first]
    unit_key = unit_first * (n + 1) + unit_second + 1
    order = np.argsort(unit_key)
    held = previous_owner >= 0
    low = np.where(previous_partner >= 0, np.minimum(previous_owner, previous_partner), previous_owner)
    high = np.where(previous_partner >= 0, np.maximum(previous_owner, previous_partner), -1)
    gpu_key = low * (n + 1) + high + 1
    position = np.minimum(np.searchsorted(unit_key[order], gpu_key), max(len(unit_key) - 1, 0))
    previous_unit = np.full(len(previous_owner), -1, dtype=np.int64)
    if len(unit_key):
        match = held & (unit_key[order][position] == gpu_key)
        previous_unit[match] = order[position[match]]
    unit_owner, unit_kept = place_on_gpus(cluster, previous_unit, chosen[unit_first], num_gpus[unit_first])
    busy = unit_owner >= 0
    first = np.full(len(unit_owner), -1, dtype=np.int64)
    second = np.full(len(unit_owner), -1, dtype=np.int64)
    first[busy] = unit_first[unit_owner[busy]]
    second[busy] = unit_second[unit_owner[busy]]
    kept = np.zeros(n, dtype=bool)
    kept[unit_first] = unit_kept
    paired = unit_second >= 0
    kept[unit_second[paired]] = unit_kept[paired]
    return first, second, kept


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
