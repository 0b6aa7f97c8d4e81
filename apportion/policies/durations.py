"""What a policy that needs job lengths (srtf, qssf, finish-time fairness) knows of them.

``oracle``: each job's true remaining steps, which no real scheduler is told (the simulator
knows them; the server takes the job file's ``total_steps``). ``predicted``: what the history
of finished jobs says (apportion.core.durations, the view's ``predicted_gpu_s``): the median of
what is left given what a job has done, so a job that outlives its prediction is taken to be a
long one. Either way the policy sees the jobs with ``total_steps`` set to what it believes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from apportion.core.durations import PRIOR_GPU_S, PRIOR_LOG_SD, gpu_seconds, remaining_gpu_s
from apportion.core.gittins import DONE_STEP, LOWEST_DOUBLING, sample_checkpoints, service_per_finish
from apportion.core.allocation import Allocation
from apportion.core.estimate_ratios import EstimateRatios
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import DEFAULT_RESTART_COST_S, OrderingPolicy, allocate_in_order, head_of_line

DURATIONS = ("oracle", "predicted")
CHECKPOINT_FACTOR = 2.0  # median-left: past its prediction, a job's rank is revisited each time its GPU time doubles
# predicted: a waiting job goes ahead of a running one only when it is believed to need less than
# a quarter of what the running one has left (predictions are rough: on Philly a median error of a
# factor 1.4, and often far more; a preemption costs a restart, and a wide job a long wait for room)
PREEMPT_MARGIN = 4.0
# ranked by its group's sample, a job's rank is what jobs like it did: a waiting one goes ahead when
# it needs less than half what the running one is believed to
SAMPLE_PREEMPT_MARGIN = 2.0
# ranked by its own estimate × the finished estimated jobs' ratios actual ÷ estimate, likewise (4 tried
# on Philly's VCs with Helios-like estimates: no better; docs/durations.md)
RATIO_PREEMPT_MARGIN = 2.0
LOOK_AHEAD = 4  # checkpoints looked at beyond what a job did, at each allocation


def check_durations(durations: str, policy: str) -> str:
    if durations not in DURATIONS:
        raise ValueError(f"{policy}: durations must be one of {', '.join(DURATIONS)}, got '{durations}'")
    return durations


def believed(jobs: JobView, throughputs: ThroughputView, durations: str) -> JobView:
    """``jobs`` with each job's ``total_steps`` as the policy believes it: true (oracle), or
    steps done plus the predicted median of what is left at the job's fastest speed."""
    if durations == "oracle" or not len(jobs):
        return jobs
    return replace(jobs, total_steps=believed_total_steps(jobs, throughputs.steps_per_s.max(axis=1)))


def believed_total_steps(jobs: JobView, fastest: np.ndarray) -> np.ndarray:
    """[n] each job's steps done plus the predicted median of what is left, as steps at its
    ``fastest`` steps/s (nothing left where it runs nowhere)."""
    predicted, log_sd = predictions(jobs)
    left_gpu_s = remaining_gpu_s(predicted, log_sd, gpu_seconds(jobs.steps_done, jobs.num_gpus, fastest))
    return jobs.steps_done + np.nan_to_num(left_gpu_s, nan=0.0) / jobs.num_gpus * fastest


def index_gpu_s(predicted: np.ndarray, log_sd: np.ndarray, done_gpu_s: np.ndarray) -> np.ndarray:
    """[n] the rank, in GPU-seconds, of jobs predicted lognormal (``predicted``, ``log_sd``) that did
    ``done_gpu_s``: 1 / their Gittins index (apportion.core.gittins), about the median left for a
    sure prediction, least-attained-service-like for a wide one. From its prediction on, a job is
    believed to have at least as much again to go as ``remaining_gpu_s`` says (the lognormal's
    tail would believe a job far past a sure prediction all but done)."""
    done = np.maximum(np.nan_to_num(done_gpu_s, nan=0.0), 0.0)
    key = service_per_finish(predicted, log_sd, done)
    past = done >= predicted
    if past.any():
        key[past] = np.maximum(key[past], remaining_gpu_s(predicted[past], log_sd[past], done[past]))
    return key


def sampled(jobs: JobView) -> np.ndarray:
    """[n] the group whose sample of finished jobs ranks each job (-1: none: by its lognormal)."""
    if jobs.sample_group is None or jobs.duration_samples is None:
        return np.full(len(jobs), -1, dtype=np.int64)
    return jobs.sample_group


def ratio_ranked(jobs: JobView) -> np.ndarray:
    """[n] whether each job is ranked by its own estimate × the sample of finished estimated jobs'
    actual ÷ estimate (apportion.core.estimate_ratios): it has an estimate and the sample is ready."""
    if jobs.estimated_gpu_s is None or jobs.estimate_ratios is None or not jobs.estimate_ratios.ready:
        return np.zeros(len(jobs), dtype=bool)
    return np.isfinite(jobs.estimated_gpu_s)


def predictions(jobs: JobView) -> tuple[np.ndarray, np.ndarray]:
    """The view's predicted GPU time and its log standard deviation; with none (no history was
    given), every job alike: the predictor's prior."""
    if jobs.predicted_gpu_s is None or jobs.predicted_log_sd is None:
        return np.full(len(jobs), PRIOR_GPU_S), np.full(len(jobs), PRIOR_LOG_SD)
    return jobs.predicted_gpu_s, jobs.predicted_log_sd


class DurationOrdering(OrderingPolicy):
    """An ordering policy whose rank is a job's remaining duration, oracle or predicted.

    A subclass says how what is left of a job (GPU-seconds at its fastest speed) becomes its
    rank (``key_of``). With predicted durations a running job's rank changes by itself once
    it outlives its prediction (what it is believed to have left grows again); it is revisited
    at checkpoints of its GPU time (its prediction, then twice it, four times, …, as LAS's
    queues are, at fewer places), and only at the first one where it would rank behind a job
    that waits: before that, ranking it again changes nothing.
    """

    # predicted: rank by 1 / the Gittins index of the prediction (``index_gpu_s``) rather than by the
    # median left (qssf's; srtf's rank is the time left, so it keeps the median); ``by_sample``: the
    # index over the job's group's sample of finished jobs where it has one (qssf's default)
    by_index = False
    by_sample = False
    # ``by_sample`` too: an estimated job by its estimate × the index over the finished estimated jobs'
    # ratios actual ÷ estimate (qssf's ``estimate_ratios``; default: by its corrected lognormal)
    by_ratios = False

    def __init__(self, *, durations: str = "oracle", agnostic: bool = False,
                 restart_cost_s: float = DEFAULT_RESTART_COST_S) -> None:
        super().__init__(agnostic=agnostic, restart_cost_s=restart_cost_s)
        self.durations = check_durations(durations, self.name)
        # Helios's forms (qssf's options): a started job keeps its GPUs to the end, ranked ahead of
        # every waiting job; no waiting job starts behind one that waits
        self.non_preemptive = False
        self.head_of_line = False
        # at the last allocate: the jobs (their index), their fastest steps/s, and the GPU time at
        # which each job it ran should be ranked again (inf: none)
        self._ranked: tuple[bytes, np.ndarray, np.ndarray] | None = None

    def key_of(self, left_gpu_s: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        """The rank of jobs with ``left_gpu_s`` GPU-seconds to go at their fastest speed."""
        raise NotImplementedError

    def rank_of(self, left_steps: np.ndarray, fastest: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        """The rank of jobs with ``left_steps`` to go at ``fastest`` steps/s (inf where it is 0)."""
        return np.nan_to_num(self.key_of(gpu_seconds(left_steps, num_gpus, fastest), num_gpus), nan=np.inf)

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        return self._rank(jobs, throughputs.steps_per_s.max(axis=1))

    def _rank(self, jobs: JobView, fastest: np.ndarray) -> np.ndarray:
        """[n] each job's rank from what the policy believes it has left (inf: runs nowhere)."""
        if self.durations == "oracle":
            return self.rank_of(jobs.remaining_steps, fastest, jobs.num_gpus)
        if self.by_index:
            predicted, log_sd = predictions(jobs)
            done = gpu_seconds(jobs.steps_done, jobs.num_gpus, fastest)
            rank = self.key_of(self._index_gpu_s(jobs, predicted, log_sd, done), jobs.num_gpus.astype(np.float64))
            rank[~(fastest > 0)] = np.inf
            return rank
        # what is left as ``believed`` has it (total less done): ranks tie exactly where the beliefs do
        return self.rank_of(believed_total_steps(jobs, fastest) - jobs.steps_done, fastest, jobs.num_gpus)

    def _ratio_ranked(self, jobs: JobView) -> np.ndarray:
        """[n] the jobs this policy ranks by the estimates' ratios (``ratio_ranked``, if ``by_ratios``)."""
        return ratio_ranked(jobs) if self.by_sample and self.by_ratios else np.zeros(len(jobs), dtype=bool)

    def _ranked_by(self, jobs: JobView, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Of the jobs at ``rows`` (all: None), the group whose sample ranks each (-1: none) and whether
        the estimates' ratios rank it (only where no group does); neither: its lognormal."""
        if not self.by_sample:
            n = len(jobs) if rows is None else len(rows)
            return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)
        group, ratios = sampled(jobs), self._ratio_ranked(jobs)
        if rows is not None:
            group, ratios = group[rows], ratios[rows]
        return group, ratios & (group < 0)

    def preempt_margin(self, jobs: JobView) -> np.ndarray:
        """[n] how many times less a waiting job must be believed to need than each running one to go
        ahead: ``SAMPLE_PREEMPT_MARGIN`` for a job ranked by its group's sample, else ``PREEMPT_MARGIN``."""
        if not self.by_sample:
            return np.full(len(jobs), PREEMPT_MARGIN)
        return np.where(sampled(jobs) >= 0, SAMPLE_PREEMPT_MARGIN,
                        np.where(self._ratio_ranked(jobs), RATIO_PREEMPT_MARGIN, PREEMPT_MARGIN))

    def _index_gpu_s(self, jobs: JobView, predicted: np.ndarray, log_sd: np.ndarray, done: np.ndarray,
                     rows: np.ndarray | None = None) -> np.ndarray:
        """1 / the Gittins index of the jobs at ``rows`` (all: None) having done ``done`` ([rows] or
        [rows, k]: k points of each one's GPU time): over its group's sample where it has one
        (``by_sample``), or over the estimated jobs' ratios × its own estimate where it has one and they
        are ready, else of its lognormal prediction (``predicted``, ``log_sd``: at ``rows``)."""
        shape = done.shape
        k = 1 if done.ndim == 1 else shape[1]
        done = done.ravel()
        group, ratios = (np.repeat(a, k) for a in self._ranked_by(jobs, rows))
        own = group >= 0
        if own.all():
            return jobs.duration_samples.keys(group, done).reshape(shape)
        key = np.empty(len(done))
        rest = np.flatnonzero(~own & ~ratios)
        key[rest] = index_gpu_s(np.repeat(predicted, k)[rest], np.repeat(log_sd, k)[rest], done[rest])
        if own.any():
            use = np.flatnonzero(own)
            key[use] = jobs.duration_samples.keys(group[use], done[use])
        if ratios.any():
            use = np.flatnonzero(ratios)
            estimated = jobs.estimated_gpu_s if rows is None else jobs.estimated_gpu_s[rows]
            key[use] = jobs.estimate_ratios.keys(np.repeat(estimated, k)[use], done[use])
        return key.reshape(shape)

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        fastest = throughputs.steps_per_s.max(axis=1)
        rank = self._rank(jobs, fastest)
        if self.non_preemptive:
            rank[jobs.running_type >= 0] = -np.inf
        elif self.durations == "predicted":
            running = jobs.running_type >= 0
            rank[running] /= self.preempt_margin(jobs)[running]
        order = self.by_user(np.lexsort((jobs.submit_time_s, rank)), jobs)
        share = allocate_in_order(
            order, jobs.num_gpus, throughputs.steps_per_s, cluster.capacity,
            agnostic=self.agnostic, current_type=jobs.running_type, remaining_steps=jobs.remaining_steps,
            restart_cost_s=self.restart_cost_s,
        )
        if self.head_of_line:
            head_of_line(order, share, jobs, throughputs.steps_per_s, cluster.capacity)
        if self.durations == "predicted" and not self.non_preemptive:
            runs = share.sum(axis=1) > 0
            self._ranked = (jobs.index.tobytes(), fastest, self._revisit_at(jobs, fastest, runs, rank))
        return Allocation(jobs.index, share)

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        if self.durations == "oracle" or self.non_preemptive or not running.any():
            return math.inf  # ranks that change as jobs run change nothing: none is preempted
        if self._ranked is None or self._ranked[0] != jobs.index.tobytes():
            return 0.0  # not the jobs it ranked: rank them again
        _, fastest, revisit_at = self._ranked
        if revisit_at is None:  # no job to revisit
            return math.inf
        gpus = jobs.num_gpus[running].astype(np.float64)
        done = np.nan_to_num(gpu_seconds(jobs.steps_done[running], gpus, fastest[running]), nan=0.0)
        # a job's GPU time grows by at most its GPUs a second (at its fastest speed)
        return float(np.min(np.maximum(revisit_at[running] - done, 0.0) / gpus))

    def _revisit_at(self, jobs: JobView, fastest: np.ndarray, runs: np.ndarray,
                    rank: np.ndarray) -> np.ndarray | None:
        """[n] for each job that ``runs``, the first checkpoint of its GPU time past what it did at
        which it would rank behind the first job left waiting, looking ``LOOK_AHEAD`` checkpoints
        ahead (the last of them if none); inf for the jobs that do not run. None: no job to revisit
        (none runs, or none waits that could run)."""
        rows = np.flatnonzero(runs)
        if not len(rows) or len(rows) == len(runs):
            return None
        first_waiting = float(np.min(rank[~runs]))
        if not math.isfinite(first_waiting):
            return None
        revisit = np.full(len(jobs), np.inf)
        gpus = jobs.num_gpus.astype(np.float64)
        predicted, log_sd = predictions(jobs)
        done = np.nan_to_num(gpu_seconds(jobs.steps_done[rows], gpus[rows], fastest[rows]), nan=0.0)
        # the next LOOK_AHEAD checkpoints past what each job did: its prediction × FACTOR**k, k >= passed
        # (ranked by the index: from its prediction × 2**LOWEST_DOUBLING on, each quarter doubling)
        step, lowest, ahead = ((DONE_STEP, LOWEST_DOUBLING / DONE_STEP, int(LOOK_AHEAD / DONE_STEP)) if self.by_index
                               else (1.0, 0.0, LOOK_AHEAD))
        passed = np.maximum(np.ceil(np.log2(np.maximum(done, 1e-9) / predicted[rows]) / step + 1e-9), lowest)
        checkpoint = predicted[rows, None] * np.exp2(step * (passed[:, None] + np.arange(ahead)))
        if self.by_index:
            group, ratios = self._ranked_by(jobs, rows)
            if (group >= 0).any():  # ranked by a sample: quarter doublings of a GPU-second, from 1 on
                checkpoint = np.where((group >= 0)[:, None], sample_checkpoints(done, ahead), checkpoint)
            if ratios.any():  # ranked by the ratios: quarter doublings of its estimate ÷ their SCALE
                own = EstimateRatios.checkpoints(jobs.estimated_gpu_s[rows], done, ahead)
                checkpoint = np.where(ratios[:, None], own, checkpoint)
            left = self._index_gpu_s(jobs, predicted[rows], log_sd[rows], checkpoint, rows)
        else:
            left = remaining_gpu_s(np.repeat(predicted[rows], ahead), np.repeat(log_sd[rows], ahead),
                                   checkpoint.ravel()).reshape(checkpoint.shape)
        behind = self.key_of(left, gpus[rows, None]) / self.preempt_margin(jobs)[rows, None] > first_waiting
        behind[:, -1] = True  # none within sight: look again from the last one
        revisit[rows] = checkpoint[np.arange(len(rows)), np.argmax(behind, axis=1)]
        return revisit

