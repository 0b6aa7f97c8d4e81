"""What a round is decided from and what comes out, and the one builder of the jobs' view.

Both clocks build a round's :class:`RoundState` here from arrays (the simulator's over JobTable
rows, the server's from its state file's columns), so a policy sees the same view of the same
jobs whichever clock asks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster
from apportion.core.views import JobView
from apportion.mechanism.pair_clock import PairClock

MIN_WEIGHT = 1e-3  # priority 0 ("best effort") is this weight for the policies


@dataclass(frozen=True)
class RoundState:
    """What a round is decided from; positions are rows of ``jobs``, GPUs the cluster's ids.

    ``pinned`` and ``offline`` are how a round sees a cluster that changes under it: jobs whose
    attempts are still starting keep their GPUs (with whoever shares them) and stay out of the
    round, and offline GPUs (a node that went away) are given to nobody. Given (even all False),
    the round is planned as the server plans it: the rest of the jobs over one node per GPU
    type holding the GPUs left (``mechanism/node_per_type.py``).
    """

    jobs: JobView  # the active jobs (arrived, not finished), with attained service
    rates: np.ndarray  # [n, T] steps/s of each job alone on each type at its scale; 0 = cannot run
    time_alone_s: np.ndarray  # [n, T] seconds each job has held each type alone
    holder: np.ndarray  # [G] position of the job holding each GPU now, -1 when idle
    partner: np.ndarray  # [G] position of a second job sharing the GPU, -1 when not shared
    rates_version: int = 0  # bumped by the caller when measured speeds moved enough to re-solve
    together: PairClock | None = None  # seconds each pair has run together (None: no pair ever has)
    pair_rates: np.ndarray | None = None  # [K, K, T] steps/s of kind i sharing a GPU with kind j
    pinned: np.ndarray | None = None  # [n] attempts still starting: they keep their GPUs
    offline: np.ndarray | None = None  # [G] GPUs nobody may be given this round

    @property
    def around(self) -> bool:
        """Planned as the server plans: around pinned jobs and offline GPUs, one node per type."""
        return self.pinned is not None or self.offline is not None


@dataclass(frozen=True)
class RoundDecision:
    """Who runs where this round; positions are rows of the state's ``jobs``."""

    chosen_type: np.ndarray  # [n] type index each job runs on, -1 when it waits
    partner: np.ndarray  # [n] position of the job it shares its GPUs with, -1 when alone
    owner: np.ndarray  # [G] position of the job on each GPU, -1 when idle
    second: np.ndarray  # [G] position of the second job sharing each GPU, -1 when not shared
    kept: np.ndarray  # [n] kept exactly its GPUs (alone, or with the same partner): lease renewed
    was_running: np.ndarray  # [n] held GPUs before this round
    allocation: Allocation
    resolved: bool  # the policy was asked this round
    reallocate_at: float  # the policy must be asked again by then (inf: only on a change)
    num_gpus: np.ndarray | None = None  # [n] GPUs each job runs on when the policy sized it; None: its own
    unplaced: np.ndarray | None = None  # [n] chosen by GPUs, but no node had room for its cores or memory

    def gpus_of(self, jobs: JobView) -> np.ndarray:
        """[n] GPUs each job runs on this round when it runs."""
        return jobs.num_gpus if self.num_gpus is None else self.num_gpus

    @property
    def running(self) -> np.ndarray:
        return self.chosen_type >= 0

    @property
    def preempted(self) -> np.ndarray:
        """[n] jobs that held GPUs and lose them."""
        return self.was_running & ~self.running

    @property
    def moved(self) -> np.ndarray:
        """[n] jobs that keep running but on other GPUs (or with another partner): a restart."""
        return self.was_running & self.running & ~self.kept


def job_view(
    *,
    index: np.ndarray,
    submit_time_s: np.ndarray,
    kind: np.ndarray,
    num_gpus: np.ndarray,
    priority: np.ndarray,
    total_steps: np.ndarray,
    queue: np.ndarray,
    user: np.ndarray,
    now_s: float,
    steps_done: np.ndarray | None = None,
    attained_service_s: np.ndarray | None = None,
    first_start_s: np.ndarray | None = None,
    running_type: np.ndarray | None = None,
    deadline_s: np.ndarray | None = None,
    predicted_gpu_s: np.ndarray | None = None,
    predicted_log_sd: np.ndarray | None = None,
    sample_group: np.ndarray | None = None,
    duration_samples=None,
    estimated_gpu_s: np.ndarray | None = None,
    estimate_ratios=None,
    cpus: np.ndarray | None = None,
    memory_gib: np.ndarray | None = None,
) -> JobView:
    """The jobs' view a policy sees, from arrays over the jobs (left out: a job that never ran;
    ``cpus``, ``memory_gib``: None when no job asks for cores or memory beside its GPUs).

    Priorities under ``MIN_WEIGHT`` (0: best effort) count as ``MIN_WEIGHT``, so that a weight
    never divides by zero in a policy."""
    n = len(index)
    return JobView(
        index=index, submit_time_s=submit_time_s, kind=kind, num_gpus=num_gpus,
        priority=np.maximum(priority, MIN_WEIGHT), total_steps=total_steps,
        steps_done=np.zeros(n) if steps_done is None else steps_done,
        attained_service_s=np.zeros(n) if attained_service_s is None else attained_service_s,
        first_start_s=np.full(n, np.nan) if first_start_s is None else first_start_s,
        running_type=np.full(n, -1, dtype=np.int64) if running_type is None else running_type,
        queue=queue, user=user, now_s=now_s, deadline_s=deadline_s,
        predicted_gpu_s=predicted_gpu_s, predicted_log_sd=predicted_log_sd,
        sample_group=sample_group, duration_samples=duration_samples,
        estimated_gpu_s=estimated_gpu_s, estimate_ratios=estimate_ratios, cpus=cpus, memory_gib=memory_gib,
    )


def running_types(cluster: Cluster, holder: np.ndarray, partner: np.ndarray, num_jobs: int) -> np.ndarray:
    """[n] the GPU type each job holds now (-1: none), from who holds each GPU."""
    running_type = np.full(num_jobs, -1, dtype=np.int64)
    held = holder >= 0
    running_type[holder[held]] = cluster.gpu_type[held]
    shared = partner >= 0
    running_type[partner[shared]] = cluster.gpu_type[shared]
    return running_type


def was_running(holder: np.ndarray, partner: np.ndarray, num_jobs: int) -> np.ndarray:
    """[n] jobs that hold a GPU now, alone or shared."""
    held = np.zeros(num_jobs, dtype=bool)
    held[holder[holder >= 0]] = True
    held[partner[partner >= 0]] = True
    return held
