"""A replay in progress: the per-job arrays both simulators and the admission stage read and write."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.core.cluster import Cluster
from apportion.mechanism.pair_clock import PairClock
from apportion.sim.result import JobStatus


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
    wait_left: np.ndarray  # [n] seconds before a new attempt starts (its GPUs are being left)
    delay_left: np.ndarray  # [n] seconds before a started attempt trains (its start or restart cost)
    lease_end: np.ndarray  # [n] wall clock: when each running job's lease ends
    known_end: np.ndarray  # [n] wall clock: the lease end each running job was last told (it asks before it)
    gpu_free_at: np.ndarray  # [G] when the attempt leaving each GPU will have gone
    last_type: np.ndarray  # [n] the type each job ran on in the last span, -1 if none
    last_rate: np.ndarray  # [n] its steps/s then
    last_progress_s: np.ndarray  # [n] its seconds of progress then
    last_alone: np.ndarray  # [n] it ran alone (not sharing its GPU)
    local_of: np.ndarray  # [n] position of each active job in ``active`` (scratch)
    gpu_job: np.ndarray  # [G] JobTable row on each GPU, -1 idle
    gpu_partner: np.ndarray  # [G] the second job sharing it, -1 if none
    together: PairClock  # seconds each pair has run together on each type
    active: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    next_arrival: int = 0
    ended: int = 0
    now: float = 0.0
    allocation_integral: bool = False
    early: bool = False  # wall clock: this decision is an early round (else a regular one, decided ahead)
    round_end: float = 0.0  # wall clock: when the current round ends and the next starts
    last_round_at: float = -math.inf  # wall clock: when the last round was decided
    tail_done: tuple = (np.zeros(0, dtype=np.int64), np.zeros(0))  # stopped jobs that finished, and when
    busy_gpu_s: float = 0.0
    shared_gpu_s: float = 0.0
    decisions: int = 0
    timeline: list = field(default_factory=list)  # (time_s, busy GPUs, running jobs, queued jobs)
    trained_gpu_s: np.ndarray | None = None  # [n] GPU-seconds training, where speeds depend on CPU cores
    stalled_gpu_s: np.ndarray | None = None  # [n] of them, the GPU-seconds lost waiting for data

    @classmethod
    def empty(cls, n: int, cluster: Cluster) -> Replay:
        num_types = len(cluster.gpu_types)
        return cls(
            status=np.full(n, JobStatus.PENDING, dtype=np.int8), schedulable=np.ones(n, dtype=bool),
            steps_done=np.zeros(n), attained_gpu_s=np.zeros(n), time_on_type=np.zeros((n, num_types)),
            time_alone_on_type=np.zeros((n, num_types)), first_start=np.full(n, np.nan), finish=np.full(n, np.nan),
            preemptions=np.zeros(n, dtype=np.int64), moves=np.zeros(n, dtype=np.int64),
            wait_left=np.zeros(n), delay_left=np.zeros(n), lease_end=np.full(n, -np.inf),
            known_end=np.full(n, -np.inf), gpu_free_at=np.full(cluster.num_gpus, -np.inf),
            last_type=np.full(n, -1, dtype=np.int64), last_rate=np.zeros(n), last_progress_s=np.zeros(n),
            last_alone=np.zeros(n, dtype=bool), local_of=np.full(n, -1, dtype=np.int64),
            gpu_job=np.full(cluster.num_gpus, -1, dtype=np.int64),
            gpu_partner=np.full(cluster.num_gpus, -1, dtype=np.int64), together=PairClock(num_types),
        )
