"""What a replay produced: per-job outcomes, a timeline, and the summary figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.jobs import JobTable
from apportion.mechanism.privacy_budget import BudgetHistory, ClaimState, PrivacyStage
from apportion.sim.holdings import Holdings
from apportion.sim.rented_outcome import RentedOutcome


class JobStatus(IntEnum):
    PENDING = 0  # not yet submitted
    QUEUED = 1
    RUNNING = 2
    COMPLETED = 3
    UNSCHEDULABLE = 4  # can never run here; SimResult.unschedulable_reason says why


@dataclass(frozen=True)
class PrivacyOutcome:
    """What became of the jobs' privacy claims, and each block's budget over time."""

    policy: str
    asks: np.ndarray  # [n] the job claimed privacy budget
    state: np.ndarray  # [n] ClaimState
    delay_s: np.ndarray  # [n] seconds from the claim's arrival to its grant, NaN if not granted
    block_names: np.ndarray  # [B]
    history: BudgetHistory

    @classmethod
    def of(cls, stage: PrivacyStage) -> PrivacyOutcome:
        return cls(stage.policy.name, stage.claims.asks.copy(), stage.state.copy(), stage.delay_s(),
                   stage.blocks.name, stage.history())

    @property
    def words(self) -> np.ndarray:
        """[n] "granted", "rejected", "waiting" (asked, never decided) or "" (no claim)."""
        words = np.full(len(self.asks), "", dtype=object)
        words[self.asks] = "waiting"
        words[self.state == ClaimState.GRANTED] = "granted"
        words[self.state == ClaimState.REJECTED] = "rejected"
        return words

    def summary(self) -> dict:
        granted = self.state == ClaimState.GRANTED
        delays = self.delay_s[granted]
        return {
            "privacy_policy": self.policy,
            "privacy_claims": int(self.asks.sum()),
            "privacy_granted": int(granted.sum()),
            "privacy_rejected": int((self.state == ClaimState.REJECTED).sum()),
            "privacy_waiting": int((self.asks & ~granted & (self.state != ClaimState.REJECTED)).sum()),
            "privacy_mean_delay_s": float(delays.mean()) if len(delays) else None,
            "privacy_max_delay_s": float(delays.max()) if len(delays) else None,
        }


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: JobTable
    cluster: Cluster
    status: np.ndarray  # [n] JobStatus
    first_start_s: np.ndarray  # [n] NaN if never started
    finish_s: np.ndarray  # [n] NaN if not completed
    preemptions: np.ndarray  # [n] times stopped before finishing
    moves: np.ndarray  # [n] times moved to other GPUs between consecutive rounds
    steps_done: np.ndarray  # [n]
    time_on_type: np.ndarray  # [n, T] seconds each job held GPUs of each type
    timeline: np.ndarray  # [k, 4] time_s, busy GPUs, running jobs, queued jobs at each decision
    summary: dict = field(default_factory=dict)
    unschedulable_reason: np.ndarray | None = None  # [n] why each job can never run, "" if it can
    holdings: Holdings | None = None  # who held which GPUs when; recorded only when asked (record_holdings)
    privacy: PrivacyOutcome | None = None  # the jobs' privacy claims, when they made any
    rented: RentedOutcome | None = None  # what renting the instances cost, on a rented cluster
    # [n] the GPU-weighted fraction of its training time each job waited for data (1 - the fraction of its
    # best speed its CPU cores allowed), NaN where it never trained; None: no job's speed depends on cores
    data_stall: np.ndarray | None = None

    @classmethod
    def build(cls, *, policy, jobs, cluster, config, busy_gpu_s, decisions, sim_wall_s, **arrays) -> SimResult:
        result = cls(policy=policy, jobs=jobs, cluster=cluster, **arrays)
        result.summary.update(result._summarise(config, busy_gpu_s, decisions, sim_wall_s))
        if result.privacy is not None:
            result.summary.update(result.privacy.summary())
        if result.rented is not None:
            rented = result.rented
            result.summary.update(rented.summary())
            result.summary["cluster"] = f"rented from {rented.market.source}"
            result.summary["utilization"] = busy_gpu_s / rented.held_gpu_s if rented.held_gpu_s > 0 else 0.0
            result.summary["deadlines_met"] = int((np.isfinite(result.deadline_s) & ~result.missed_deadline).sum())
        return result

    @property
    def jct_s(self) -> np.ndarray:
        """Job completion time (finish − submit) of every job; NaN where not completed."""
        return self.finish_s - self.jobs.submit_time_s

    @property
    def deadline_s(self) -> np.ndarray:
        """Each job's absolute deadline, NaN where it has none."""
        return np.full(len(self.jobs), np.nan) if self.jobs.deadline_s is None else self.jobs.deadline_s

    @property
    def missed_deadline(self) -> np.ndarray:
        """Jobs with a deadline that finished after it, or never finished."""
        has = np.isfinite(self.deadline_s)
        late = ~(self.finish_s <= self.deadline_s)  # NaN finish counts as late
        return has & late

    @property
    def reasons(self) -> np.ndarray:
        """[n] why each job can never run ("" where it can, or where the replay gave no reasons)."""
        if self.unschedulable_reason is None:
            return np.full(len(self.jobs), "", dtype=object)
        return self.unschedulable_reason

    def gpu_types_used(self) -> list[str]:
        """Per job, the GPU types it ran on, '+'-joined in cluster order ('' if none)."""
        names = np.asarray(self.cluster.gpu_types, dtype=object)
        used = self.time_on_type > 0
        return ["+".join(names[row]) for row in used]

    def _summarise(self, config, busy_gpu_s: float, decisions: int, sim_wall_s: float) -> dict:
        completed = self.status == JobStatus.COMPLETED
        jct = self.jct_s[completed]
        started = ~np.isnan(self.first_start_s)
        queueing = (self.first_start_s - self.jobs.submit_time_s)[started]
        end = float(np.nanmax(self.finish_s)) if completed.any() else 0.0
        start = float(self.jobs.submit_time_s[0]) if len(self.jobs) else 0.0
        makespan = end - start
        capacity_gpu_s = self.cluster.num_gpus * makespan

        def stat(values: np.ndarray, fn) -> float | None:
            return float(fn(values)) if len(values) else None

        return {
            "policy": self.policy,
            "cluster": self.cluster.describe(),
            "round_s": config.round_s,
            "restart_cost_s": config.restart_cost_s,
            "jobs": int(len(self.jobs)),
            "completed": int(completed.sum()),
            "unschedulable": int((self.status == JobStatus.UNSCHEDULABLE).sum()),
            "unfinished": int(((self.status == JobStatus.QUEUED) | (self.status == JobStatus.RUNNING)).sum()),
            "avg_jct_s": stat(jct, np.mean),
            "p50_jct_s": stat(jct, lambda v: np.percentile(v, 50)),
            "p99_jct_s": stat(jct, lambda v: np.percentile(v, 99)),
            "makespan_s": makespan,
            "avg_queueing_s": stat(queueing, np.mean),
            "utilization": busy_gpu_s / capacity_gpu_s if capacity_gpu_s > 0 else 0.0,
            "busy_gpu_hours": busy_gpu_s / 3600.0,
            "jobs_with_deadline": int(np.isfinite(self.deadline_s).sum()),
            "deadlines_missed": int(self.missed_deadline.sum()),
            "preemptions": int(self.preemptions.sum()),
            "moves": int(self.moves.sum()),
            "decisions": int(decisions),
            "sim_wall_s": sim_wall_s,
        }
