"""Job durations in the server: the duration predictor (apportion.core.durations) over this
server's own finished jobs, for the policies that rank by predicted durations and for the
estimated finish time `apportion queue` shows.

Each completed job's GPU time is kept in the state file (the ``durations`` table) in the same
transaction that marks it completed, so a restarted server predicts from every job it ever
finished. A job's GPU time is its steps × GPUs ÷ its fastest steps/s over the slot types (the
throughput estimates), as in the simulator (each group's recent ones are also kept as a sample,
qssf's rank: apportion.core.duration_samples); what a job is believed to have left never goes
past its job file's ``total_steps``.

A job file may give the job's own estimate (``estimated_duration_s``: its wall seconds at its GPU
count on the fastest type it may use, so × its GPUs its GPU time in the same unit). Such a job is
predicted from it, corrected by how wrong its user's (and, while they have few, everyone's)
finished estimates were; each completed job's estimate is kept beside its GPU time, so a restarted
server corrects estimates as before it stopped.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.durations import DurationPredictor, Prediction, gpu_seconds, remaining_gpu_s
from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.jobs.records import JobRecord
from apportion.serve.store.state import ACTIVE, StateStore


class DurationHistory:
    """The predictor, fed with this server's completed jobs (those in the state file first)."""

    def __init__(self, store: StateStore, throughputs: ThroughputEstimates, gpu_types: tuple[str, ...]) -> None:
        self.store = store
        self.throughputs = throughputs
        self.gpu_types = gpu_types
        self.predictor = DurationPredictor()
        self.predictor.keep_samples()  # each group's recent GPU times, for qssf's index over them
        self.predictor.keep_estimate_ratios()  # the finished estimated jobs' actual ÷ estimate: qssf:estimate-ratios
        self._groups: dict[int, np.ndarray] = {}  # job id -> its group ids (what they depend on never changes)
        finished = store.durations()
        if finished:
            self.predictor.observe(self.group_ids([r.job_id for r in finished], [r.user for r in finished],
                                                  [r.name for r in finished], [r.queue for r in finished],
                                                  [r.gpus for r in finished], [r.submitted for r in finished]),
                                   [r.gpu_s for r in finished],
                                   [math.nan if r.estimated_gpu_s is None else r.estimated_gpu_s for r in finished])

    def record(self, row: JobRecord, now: float) -> None:
        """Job ``row`` (a state-file row) completed at ``now``: keep its GPU time and learn from it."""
        fastest = self.fastest_rate(row.kind, row.gpus, row.allowed)
        if fastest <= 0:
            return
        steps = row.steps_done or row.total_steps  # a job that never reported progress did all it said
        gpu_s = steps * row.gpus / fastest
        estimated = estimated_gpu_s(row)
        self.store.put_duration(row.id, user=row.user, name=row.name, queue=row.queue, gpus=row.gpus,
                                submitted=row.submitted, finished=now, gpu_s=gpu_s,
                                estimated_gpu_s=None if math.isnan(estimated) else estimated)
        self.predictor.observe(self._row_group_ids(row), [gpu_s], [estimated])

    def predict(self, ids, users, names, queues, gpus, submitted, estimated_duration_s=None) -> Prediction:
        """The GPU time of the jobs with these ids (and users, names, queues, GPUs, submission times, and
        their job files' own estimates in seconds, NaN: none)."""
        groups = self.group_ids(ids, users, names, queues, gpus, submitted)
        if estimated_duration_s is None:
            return self.predictor.predict(groups)
        return self.predictor.predict(groups, np.asarray(estimated_duration_s, dtype=np.float64)
                                      * np.asarray(gpus, dtype=np.float64))

    def ranked_estimates(self, ids, estimated_duration_s, gpus) -> np.ndarray:
        """[n] the jobs' own estimates in GPU-seconds (NaN: none), as qssf:estimate-ratios reads them: each
        stretched by how much more wrong its user's estimates were than everyone's (jobs predicted already)."""
        groups = (np.stack([self._groups[job_id] for job_id in ids]) if len(ids)
                  else np.zeros((0, len(self.predictor.levels)), dtype=np.int64))
        return self.predictor.ranked_estimates(groups, np.asarray(estimated_duration_s, dtype=np.float64)
                                               * np.asarray(gpus, dtype=np.float64))

    def fastest_rate(self, kind: str, gpus: int, allowed: tuple[str, ...] | None) -> float:
        return max((self.throughputs.rate(kind, t, gpus, allowed) for t in self.gpu_types), default=0.0)

    def estimate(self, row: JobRecord, now: float) -> dict:
        """When an active job is expected to finish: at its own average speed so far once it has
        run, else at its kind's speed on its fastest type (a waiting job finishes no sooner).
        Fields for the API's job; None when it ended, or while no speed is known (neither its
        own, measured, nor from the catalog)."""
        none = {"estimated_finish": None, "predicted_remaining_s": None, "estimate_from": None}
        if row.status not in ACTIVE:
            return none
        kind, gpus, allowed = row.kind, row.gpus, row.allowed
        fastest = self.fastest_rate(kind, gpus, allowed)
        rates = {t: self.throughputs.rate(kind, t, gpus, allowed) for t in self.gpu_types}
        on = row.gpu_type if row.attempt_live and row.gpu_type in rates else max(rates, key=rates.get)
        if fastest <= 0 or rates[on] <= 0:
            return none
        # a job that has run goes at about its own speed so far (the estimates take a few reports to get there)
        own = row.steps_done / row.run_s if row.steps_done > 0 and row.run_s >= 1.0 else None
        if own is None and not self.speed_known(kind, on, gpus):  # 1 step/s until measured: no time to tell
            return dict(none, estimate_from="speed not measured yet")
        rate = own if own is not None else rates[on]
        estimated = estimated_gpu_s(row)
        groups = self._row_group_ids(row)
        prediction = self.predictor.predict(groups, np.array([estimated]))
        done = gpu_seconds(np.array([row.steps_done]), np.array([row.gpus]), np.array([fastest]))
        left_gpu_s = remaining_gpu_s(prediction.gpu_s, prediction.log_sd, done)[0]
        declared = max(row.total_steps - row.steps_done, 0)
        left_steps = left_gpu_s / row.gpus * fastest
        source = self.predicted_from(int(prediction.level[0]), estimated, groups, row.user)
        if left_steps >= declared:
            left_steps, source = declared, "job file: total_steps"
        seconds = left_steps / rate
        return {"estimated_finish": round(now + seconds, 3) if math.isfinite(seconds) else None,
                "predicted_remaining_s": round(seconds, 3), "estimate_from": source}

    def predicted_from(self, level: int, estimated_gpu_s: float, groups: np.ndarray, user: str) -> str:
        """What a job's prediction came from, as ``estimate_from`` says it: its job file's estimate and
        how many of its user's finished estimates correct it (none yet: read as given), else the
        ladder's most specific level with history (``level``, -1: none)."""
        if math.isnan(estimated_gpu_s):
            return f"history: {self.predictor.level_names[level]}" if level >= 0 else "no history yet"
        users = self.predictor.users_of(groups)
        if users is None or users[0] < 0:  # no user: everyone's finished estimates correct it
            everyone = self.predictor.estimates.seen
            return (f"job file: estimated_duration_s, corrected by {everyone:,} finished" if everyone else
                    "job file: estimated_duration_s, not corrected yet (no estimated job finished)")
        own = self.predictor.estimates.seen_of(int(users[0]))
        if not own:
            return f"job file: estimated_duration_s, as given ({user} has no estimated job finished yet)"
        return f"job file: estimated_duration_s, corrected by {own:,} of {user}'s finished"

    def speed_known(self, kind: str, gpu_type: str, gpus: int) -> bool:
        """Whether ``kind``'s speed on ``gpu_type`` is measured here or given by the prior table."""
        prior = self.throughputs.prior
        return (kind, gpu_type, gpus) in self.throughputs.table or (prior is not None and kind in prior.kinds)

    def group_ids(self, ids, users, names, queues, gpus, submitted) -> np.ndarray:
        """[jobs, levels] each job's group ids, computed once per job id."""
        new = [i for i, job_id in enumerate(ids) if job_id not in self._groups]
        if new:
            groups = self.predictor.groups(user=[users[i] for i in new], name=[names[i] for i in new],
                                           queue=[queues[i] for i in new], num_gpus=[gpus[i] for i in new],
                                           submit_time_s=[submitted[i] for i in new])
            self._groups.update(zip((ids[i] for i in new), groups))
        if not len(ids):
            return np.zeros((0, len(self.predictor.levels)), dtype=np.int64)
        return np.stack([self._groups[job_id] for job_id in ids])

    def _row_group_ids(self, row: JobRecord) -> np.ndarray:
        return self.group_ids([row.id], [row.user], [row.name], [row.queue], [row.gpus],
                              [row.submitted])


def estimated_seconds(value: object) -> float:
    """A stored spec's ``estimated_duration_s`` (checked at submit) as a float; NaN: none or unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return math.nan


def estimated_gpu_s(row: JobRecord) -> float:
    """A job's own estimate of its GPU time (its job file's ``estimated_duration_s`` × its GPUs); NaN: none."""
    spec = row.spec if isinstance(row.spec, dict) else {}
    return estimated_seconds(spec.get("estimated_duration_s")) * row.gpus
