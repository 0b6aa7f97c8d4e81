"""A replay on a rented cluster: each job rents market instances for itself, round by round.

Every ``round_s`` (from time 0) a provisioning policy (``apportion.policies.provisioning``)
chooses the instance type each arrived, unfinished job holds; a job submitted inside a round
starts at the next. A job on a new type makes no progress for a start-up (the first time), a
restart (``restart_cost_s``) and, when its checkpoint is in another region, the checkpoint's
transfer, and pays its egress. Within a round a job progresses at its kind's speed on the type's
GPU type at its GPU count, and pays the type's price × the instances it needs until it finishes,
is preempted or the round ends. A spot preemption stops it where it is (the cloud's notice lets it
checkpoint), and it restarts elsewhere from the next round. A job whose spending reached its
budget at a round's start is stopped for good. Arrays over the jobs; one pass per round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.jobs import JobTable
from apportion.core.market import Market
from apportion.core.throughputs import ThroughputTable
from apportion.policies.provisioning import ProvisioningPolicy, RentalView, checked_choice
from apportion.sim.rented_outcome import RentedOutcome
from apportion.sim.result import JobStatus, SimResult
from apportion.sim.simulator import ProgressCallback, SimConfig, job_throughputs


@dataclass(frozen=True)
class RentalConfig:
    checkpoint_gb: float = 10.0  # what a move between regions transfers (and pays egress for)
    transfer_gbps: float = 1.0  # between regions or clouds
    max_days: float = 365.0  # a replay stops this long after the last submission, finished or not

    @property
    def transfer_s(self) -> float:
        return self.checkpoint_gb * 8.0 / self.transfer_gbps


def market_cluster(market: Market) -> Cluster:
    """The market's GPU types as a cluster (one node group each), for speeds and the result's columns."""
    types = tuple(dict.fromkeys(market.gpu_type.tolist()))
    return Cluster(tuple(NodeGroup(t, int(market.gpus[market.gpu_type == t].max()),
                                   int(market.gpus[market.gpu_type == t].max())) for t in types))


def simulate_rented(jobs: JobTable, market: Market, throughputs: ThroughputTable, policy: ProvisioningPolicy,
                    config: SimConfig = SimConfig(), rental: RentalConfig = RentalConfig(),
                    progress: ProgressCallback | None = None) -> SimResult:
    """Replay ``jobs`` on instances rented from ``market`` as ``policy`` chooses them."""
    return RentedReplay(jobs, market, throughputs, policy, config, rental).run(progress)


class RentedReplay:
    """The per-job state of a rented replay, as arrays over JobTable rows, and its rounds."""

    def __init__(self, jobs: JobTable, market: Market, throughputs: ThroughputTable, policy: ProvisioningPolicy,
                 config: SimConfig, rental: RentalConfig) -> None:
        if jobs.elastic is not None:
            raise ValueError("a rented cluster takes jobs of a fixed size, not elastic ones")
        self.jobs, self.market, self.policy, self.config, self.rental = jobs, market, policy, config, rental
        self.cluster = market_cluster(market)
        gpu_index = {t: i for i, t in enumerate(self.cluster.gpu_types)}
        self.type_gpu = np.array([gpu_index[t] for t in market.gpu_type], dtype=np.int64)  # [K]
        self.speed = job_throughputs(jobs, self.cluster, throughputs)[:, self.type_gpu]  # [n, K]
        self.instances = -(-jobs.num_gpus[:, None] // market.gpus[None, :])  # [n, K]
        every = np.arange(len(market))
        self.same_region = market.same_region(every[:, None], every[None, :])  # [K, K]
        self.move_usd = market.egress_between(every[:, None], every[None, :]) * rental.checkpoint_gb  # [K, K]
        n, k = len(jobs), len(market)
        self.held = np.full(n, -1, dtype=np.int64)
        self.checkpoint_at = np.full(n, -1, dtype=np.int64)  # the type whose region holds its checkpoint
        self.chosen_at_s = np.full(n, -np.inf)
        self.paused_until_s = np.zeros(n)
        self.steps_done = np.zeros(n)
        self.spent_usd = np.zeros(n)
        self.first_start_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.moves = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=bool)
        self.out_of_budget = np.zeros(n, dtype=bool)
        self.time_on_type = np.zeros((n, len(self.cluster.gpu_types)))
        self.usd_by_type = np.zeros(k)
        self.spot_preemptions = np.zeros(k, dtype=np.int64)
        self.egress_usd = 0.0
        self.checkpoint_transfers = 0
        self.busy_gpu_s = 0.0
        self.held_gpu_s = 0.0
        self.never_runs = ~(self.speed > 0).any(axis=1)
        self.deadline = np.full(n, np.nan) if jobs.deadline_s is None else jobs.deadline_s
        self.budget = np.full(n, np.inf) if jobs.budget_usd is None else np.nan_to_num(jobs.budget_usd, nan=np.inf)
        self.timeline: list[tuple[float, float, float, float]] = []
        self.preempted_types, self.preempted_s = market.preemptions_in_time_order()
        self.last_preempted_s = np.full(k, -np.inf)  # each type's last preemption up to the round, for the policy
        self.preemptions_seen = 0

    def run(self, progress: ProgressCallback | None) -> SimResult:
        jobs, round_s = self.jobs, self.config.round_s
        started = time.perf_counter()
        horizon = (float(jobs.submit_time_s[-1]) if len(jobs) else 0.0) + self.rental.max_days * 86400
        now, rounds = 0.0, 0
        while now <= horizon:
            arrived = jobs.submit_time_s <= now
            active = arrived & ~self.done & ~self.out_of_budget & ~self.never_runs
            if not active.any():
                if arrived.all():
                    break
                now = float(np.ceil(jobs.submit_time_s[~arrived][0] / round_s) * round_s)
                continue
            rows = self._settle(np.flatnonzero(active), now)
            if len(rows):
                self._apply(rows, self._choose(rows, now), now)
                self._advance(rows, now)
            self.timeline.append((now, float(jobs.num_gpus[self.held >= 0].sum()), float((self.held >= 0).sum()),
                                  float((arrived & ~self.done & (self.held < 0) & ~self.never_runs).sum())))
            rounds += 1
            if progress is not None and rounds % 200 == 0:
                progress(int((self.done | self.never_runs).sum()), len(jobs), now)
            now += round_s
        if progress is not None:
            progress(int((self.done | self.never_runs).sum()), len(jobs), now)
        return self._result(rounds, time.perf_counter() - started)

    def _settle(self, rows: np.ndarray, now: float) -> np.ndarray:
        """Release types no longer offered and stop jobs out of budget; the rows left to choose for."""
        held = self.held[rows]
        gone = (held >= 0) & np.isnan(self.market.prices_at(now)[np.maximum(held, 0)])
        self._release(rows[gone])
        broke = self.spent_usd[rows] >= self.budget[rows]
        self._release(rows[broke & (self.held[rows] >= 0)])
        self.out_of_budget[rows[broke]] = True
        return rows[~broke]

    def _release(self, rows: np.ndarray) -> None:
        self.preemptions[rows] += 1
        self.held[rows] = -1

    def _view(self, rows: np.ndarray, now: float) -> RentalView:
        market, held = self.market, self.held[rows]
        started = ~np.isnan(self.first_start_s[rows])
        at = np.maximum(self.checkpoint_at[rows], 0)
        has_checkpoint = (self.checkpoint_at[rows] >= 0)[:, None]
        overhead = np.where(started, self.config.restart_cost_s, self.config.start_cost_s)[:, None] \
            + np.where(has_checkpoint & ~self.same_region[at], self.rental.transfer_s, 0.0)
        holding = np.flatnonzero(held >= 0)
        overhead[holding, held[holding]] = np.maximum(self.paused_until_s[rows[holding]] - now, 0.0)
        move_usd = np.where(has_checkpoint, self.move_usd[at], 0.0)
        move_usd[holding, held[holding]] = 0.0
        return RentalView(
            now_s=now, round_s=self.config.round_s, rows=rows, held=held, chosen_at_s=self.chosen_at_s[rows],
            speed=self.speed[rows], instances=self.instances[rows], price_per_hour=market.prices_at(now),
            is_spot=market.is_spot, remaining_steps=self.jobs.total_steps[rows] - self.steps_done[rows],
            overhead_s=overhead, move_usd=move_usd, deadline_s=self.deadline[rows],
            worst_restart_s=max(self.config.restart_cost_s, self.config.start_cost_s) + self.rental.transfer_s,
            last_preempted_s=self._last_preemptions(now),
        )

    def _last_preemptions(self, now: float) -> np.ndarray:
        """[K] each type's last preemption at or before ``now`` (rounds only move forward)."""
        upto = int(np.searchsorted(self.preempted_s, now, side="right"))
        if upto > self.preemptions_seen:
            seen = slice(self.preemptions_seen, upto)
            np.maximum.at(self.last_preempted_s, self.preempted_types[seen], self.preempted_s[seen])
            self.preemptions_seen = upto
        return self.last_preempted_s

    def _choose(self, rows: np.ndarray, now: float) -> np.ndarray:
        view = self._view(rows, now)
        return checked_choice(self.policy, view)

    def _apply(self, rows: np.ndarray, choice: np.ndarray, now: float) -> None:
        """Start, move or stop the jobs whose type changed; charge restarts, transfers and egress."""
        old = self.held[rows]
        changed = choice != old
        self._release(rows[changed & (old >= 0) & (choice < 0)])
        start = changed & (choice >= 0)
        rows, new, old = rows[start], choice[start], old[start]
        if not len(rows):
            return
        first = np.isnan(self.first_start_s[rows])
        self.first_start_s[rows[first]] = now
        self.moves[rows[old >= 0]] += 1
        at = self.checkpoint_at[rows]
        crossing = (at >= 0) & ~self.same_region[np.maximum(at, 0), new]
        egress = np.where(at >= 0, self.move_usd[np.maximum(at, 0), new], 0.0)
        self.spent_usd[rows] += egress
        self.egress_usd += float(egress.sum())
        self.checkpoint_transfers += int(crossing.sum())
        delay = np.where(first, self.config.start_cost_s, self.config.restart_cost_s) \
            + np.where(crossing, self.rental.transfer_s, 0.0)
        self.paused_until_s[rows] = now + delay
        self.held[rows] = new
        self.checkpoint_at[rows] = new
        self.chosen_at_s[rows] = now

    def _advance(self, rows: np.ndarray, now: float) -> None:
        """One round of progress and billing for the jobs holding a type; finishes and preemptions."""
        rows = rows[self.held[rows] >= 0]
        if not len(rows):
            return
        market, held, end = self.market, self.held[rows], now + self.config.round_s
        preempted_at = market.next_preemption(held, now, end)
        stop = np.minimum(preempted_at, end)
        begin = np.maximum(self.paused_until_s[rows], now)
        speed = self.speed[rows, held]
        finish = begin + (self.jobs.total_steps[rows] - self.steps_done[rows]) / speed
        finishes = finish <= stop
        until = np.where(finishes, finish, stop)
        work = np.maximum(until - begin, 0.0)
        self.steps_done[rows] = np.where(finishes, self.jobs.total_steps[rows], self.steps_done[rows] + speed * work)
        paid = self.instances[rows, held] * market.cost(held, np.full(len(rows), now), until)
        self.spent_usd[rows] += paid
        np.add.at(self.usd_by_type, held, paid)
        self.busy_gpu_s += float((self.jobs.num_gpus[rows] * work).sum())
        self.held_gpu_s += float((self.instances[rows, held] * market.gpus[held] * (until - now)).sum())
        np.add.at(self.time_on_type, (rows, self.type_gpu[held]), until - now)
        self.finish_s[rows[finishes]] = finish[finishes]
        self.done[rows[finishes]] = True
        self.held[rows[finishes]] = -1
        lost = ~finishes & np.isfinite(preempted_at)
        self._release(rows[lost])
        np.add.at(self.spot_preemptions, held[lost], 1)

    def _result(self, rounds: int, wall_s: float) -> SimResult:
        jobs = self.jobs
        status = np.full(len(jobs), JobStatus.QUEUED, dtype=np.int64)
        status[self.held >= 0] = JobStatus.RUNNING
        status[self.done] = JobStatus.COMPLETED
        status[self.never_runs] = JobStatus.UNSCHEDULABLE
        reason = np.where(self.never_runs, "no instance type of the market runs it", "").astype(object)
        outcome = RentedOutcome(self.policy.name, self.market, self.spent_usd.copy(), self.usd_by_type.copy(),
                                self.egress_usd, self.spot_preemptions.copy(), self.checkpoint_transfers,
                                self.out_of_budget.copy(), self.held_gpu_s)
        result = SimResult.build(
            policy=self.policy.name, jobs=jobs, cluster=self.cluster, config=self.config,
            busy_gpu_s=self.busy_gpu_s, decisions=rounds, sim_wall_s=wall_s, status=status,
            first_start_s=self.first_start_s, finish_s=self.finish_s, preemptions=self.preemptions,
            moves=self.moves, steps_done=self.steps_done, time_on_type=self.time_on_type,
            timeline=np.array(self.timeline).reshape(-1, 4), unschedulable_reason=reason, rented=outcome,
        )
        return result
