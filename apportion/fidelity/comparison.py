"""A finished serve run replayed in the simulator, and the two side by side.

The simulated workload is the run's: the jobs that completed, submitted when they were (seconds
after the first submission), with their GPU counts and steps, on a cluster of the run's slots,
under the run's policy and round length. The simulator is told what the run measured: each
job's own speed on each slot type (``speeds="job"``; ``"kind"``: one speed per job kind), the
start-up, stop and finish costs of each job kind, each start-up the kind's median scaled by how
slow the other jobs' start-ups were around the moment it begins (``costs="measured"``; ``"kind"``:
each kind's mean alone; ``"constant"``: the simulator's fixed restart cost), and it keeps rounds
as the server does from the server's first round on (``clock="wall"``; ``"rounds"``: the
simulator's own fixed rounds). The other settings are there to show how much each of these is
worth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.dependencies import Dependencies
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.experiment import policy_from_spec
from apportion.fidelity.measured import Measured, measure
from apportion.fidelity.served import RunSettings, ServedRun, read_served_run
from apportion.mechanism.node_per_type import node_per_type
from apportion.mechanism.round_state import MIN_WEIGHT
from apportion.perf.accelerators import list_prices
from apportion.policies.base import DEFAULT_RESTART_COST_S
from apportion.serve.jobs.records import JobRecord
from apportion.sim import SimConfig, SimResult, simulate
from apportion.sim.costs import AttemptCosts
from apportion.sim.simulator import ProgressCallback
from apportion.workloads.queues import load_queues

SPEEDS = ("job", "kind")
COSTS = ("measured", "kind", "constant")
CLOCKS = ("wall", "rounds")


@dataclass(frozen=True)
class JobComparison:
    """One job, for real and simulated: completion time, queueing (submit to first start), preemptions."""

    job_id: int
    name: str
    kind: str
    submitted_s: float  # after the run's first submission
    real_jct_s: float
    sim_jct_s: float  # NaN when the simulation did not finish it
    real_queueing_s: float
    sim_queueing_s: float
    real_preemptions: int
    sim_preemptions: int

    @property
    def jct_error(self) -> float:
        """(simulated - real) / real JCT."""
        return (self.sim_jct_s - self.real_jct_s) / self.real_jct_s

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "name": self.name, "kind": self.kind, "submitted_s": _round(self.submitted_s),
                "real_jct_s": _round(self.real_jct_s), "sim_jct_s": _round(self.sim_jct_s),
                "jct_error": _round(self.jct_error, 4), "real_queueing_s": _round(self.real_queueing_s),
                "sim_queueing_s": _round(self.sim_queueing_s), "real_preemptions": self.real_preemptions,
                "sim_preemptions": self.sim_preemptions}


@dataclass(frozen=True)
class Fidelity:
    """A run and its replay: per-job rows, the errors, and what the simulator was told."""

    state_dir: Path
    settings: RunSettings
    measured: Measured
    rows: list[JobComparison]  # the jobs that completed for real, by id
    left_out: list[JobRecord] = field(default_factory=list)  # jobs that did not complete for real: not replayed
    options: dict = field(default_factory=dict)  # speeds, costs, clock
    simulated: SimResult | None = None
    first_round_s: float | None = None  # the server's first round, seconds after the first submission

    @property
    def compared(self) -> list[JobComparison]:
        """The rows the simulation finished too."""
        return [r for r in self.rows if math.isfinite(r.sim_jct_s)]

    @property
    def errors(self) -> dict:
        """``avg_jct_error``: |simulated - real| / real average JCT; ``p90_job_error`` and
        ``mean_job_error``: the 90th percentile and mean over jobs of |simulated - real| / real JCT;
        ``avg_jct_bias``: the signed first (> 0: the simulation is slower)."""
        rows = self.compared
        if not rows:
            return {"avg_jct_error": math.nan, "avg_jct_bias": math.nan, "p90_job_error": math.nan,
                    "mean_job_error": math.nan, "unfinished_in_simulation": len(self.rows)}
        real = np.array([r.real_jct_s for r in rows])
        sim = np.array([r.sim_jct_s for r in rows])
        per_job = np.abs(sim / real - 1.0)
        bias = float(sim.mean() / real.mean() - 1.0)
        return {"avg_jct_error": abs(bias), "avg_jct_bias": bias, "p90_job_error": float(np.percentile(per_job, 90)),
                "mean_job_error": float(per_job.mean()), "unfinished_in_simulation": len(self.rows) - len(rows)}

    @property
    def totals(self) -> dict:
        """Average JCT and queueing, total preemptions and the makespan, real and simulated."""
        rows = self.compared

        def side(jct, queueing, preemptions, finish) -> dict:
            return {"avg_jct_s": float(np.mean(jct)) if rows else math.nan,
                    "avg_queueing_s": float(np.mean(queueing)) if rows else math.nan,
                    "preemptions": float(np.sum(preemptions)) if rows else 0.0,
                    "makespan_s": float(np.max(finish)) if rows else math.nan}

        return {
            "real": side([r.real_jct_s for r in rows], [r.real_queueing_s for r in rows],
                         [r.real_preemptions for r in rows], [r.submitted_s + r.real_jct_s for r in rows]),
            "simulated": side([r.sim_jct_s for r in rows], [r.sim_queueing_s for r in rows],
                              [r.sim_preemptions for r in rows], [r.submitted_s + r.sim_jct_s for r in rows]),
        }

    def to_dict(self) -> dict:
        """Everything, as JSON-ready data."""
        return {
            "state_dir": str(self.state_dir),
            "policy": self.settings.policy,
            "policy_options": self.settings.policy_options,
            "round_s": self.settings.round_s,
            "slots": self.settings.describe_slots(),
            "options": self.options,
            "server_first_round_s": None if self.first_round_s is None else round(self.first_round_s, 4),
            "jobs": len(self.rows),
            "left_out": [{"job_id": j.id, "name": j.name, "status": j.status} for j in self.left_out],
            "errors": {k: _round(v, 4) if isinstance(v, float) else v for k, v in self.errors.items()},
            "totals": {side: {k: _round(v) for k, v in values.items()} for side, values in self.totals.items()},
            "costs": self.measured.describe(),
            "startup_window_s": self.measured.best_window_s(),
            "speed_spread": self.measured.speed_spread(),
            "rows": [r.to_dict() for r in self.rows],
        }


def replay_run(state_dir: str | Path, *, speeds: str = "job", costs: str = "measured", clock: str = "wall",
               restart_cost_s: float = DEFAULT_RESTART_COST_S, progress: ProgressCallback | None = None) -> Fidelity:
    """Read the finished run in ``state_dir`` and replay it (InputError if it cannot be read)."""
    return replay(read_served_run(state_dir), speeds=speeds, costs=costs, clock=clock, restart_cost_s=restart_cost_s,
                  progress=progress)


def replay(run: ServedRun, *, speeds: str = "job", costs: str = "measured", clock: str = "wall",
           restart_cost_s: float = DEFAULT_RESTART_COST_S, progress: ProgressCallback | None = None) -> Fidelity:
    """Simulate ``run``'s workload as its server ran it, with what it measured; compare job by job.

    ``restart_cost_s`` is charged to a job kind the run never measured (and to every kind with
    ``costs="constant"``); ``progress(ended, total, now_s)`` is told how the simulation goes."""
    for name, value, choices in (("speeds", speeds, SPEEDS), ("costs", costs, COSTS), ("clock", clock, CLOCKS)):
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got '{value}'")
    settings = run.settings
    done = [j for j in run.jobs if j.status == "completed"]
    left_out = [j for j in run.jobs if j.status != "completed"]
    if not done:
        raise InputError(str(run.state_dir), "no job of the run completed: there is nothing to compare")
    measured = measure(run.jobs, run.attempts)
    jobs, table, kind_names = _workload(run, done, measured, per_job=speeds == "job")
    attempt_costs = None
    if costs in ("measured", "kind"):
        # measured: start-ups as slow as the machine was when they begin, when its slowness drifted
        window_s = measured.best_window_s() if costs == "measured" else math.inf
        drifts = math.isfinite(window_s)
        by_kind = measured.attempt_costs(restart_cost_s, typical_startups=drifts)
        attempt_costs = AttemptCosts(**{name: {label: getattr(by_kind, name)[kind] for label, kind in kind_names.items()
                                               if kind in getattr(by_kind, name)}
                                        for name in ("start_s", "restart_s", "stop_lead_s", "stop_s", "finish_s")},
                                     slowness=measured.slowness({int(job_id): i for i, job_id in enumerate(jobs.job_id)},
                                                                window_s) if drifts else None)
    first_submit = min(j.submitted for j in run.jobs)
    first_round_s = None if settings.first_round is None else min(settings.first_round - first_submit, 0.0)
    config = SimConfig(round_s=settings.round_s, restart_cost_s=restart_cost_s, costs=attempt_costs,
                       wall_clock=clock == "wall", plan_ahead_s=settings.plan_ahead_s, fill_gap_s=settings.fill_gap_s,
                       first_round_s=first_round_s, received_since=settings.received_since,
                       share_by_user=settings.share_by_user, user_weights=settings.user_weights)
    result = simulate(jobs, _cluster(settings), table, _policy(settings, str(run.state_dir)), config,
                      progress=progress)

    row_of = {int(job_id): i for i, job_id in enumerate(result.jobs.job_id)}
    rows = []
    for j in done:
        i = row_of[j.id]
        rows.append(JobComparison(
            job_id=j.id, name=j.name, kind=j.kind, submitted_s=j.submitted - first_submit,
            real_jct_s=j.finished - j.submitted, sim_jct_s=float(result.jct_s[i]),
            real_queueing_s=j.started - j.submitted,
            sim_queueing_s=float(result.first_start_s[i] - result.jobs.submit_time_s[i]),
            real_preemptions=int(j.preemptions), sim_preemptions=int(result.preemptions[i]),
        ))
    return Fidelity(run.state_dir, settings, measured, rows, left_out,
                    {"speeds": speeds, "costs": costs, "clock": clock}, result, first_round_s)


def _workload(run: ServedRun, done: list[JobRecord], measured: Measured,
              per_job: bool) -> tuple[JobTable, ThroughputTable, dict[str, str]]:
    """The completed jobs as a JobTable, their speeds as a ThroughputTable, and each kind label's
    job kind. With ``per_job`` each job is its own kind ("KIND #ID"), running at its own measured
    speed; else at its kind's. Where it never trained on a type: its kind's speed there, else the
    server's last estimate, else it cannot run there. Each keeps its user, name and queue (what the
    duration predictor groups by) and its job file's own estimate (``estimated_duration_s``)."""
    types = tuple(run.settings.capacity())
    scales = tuple(sorted({int(j.gpus) for j in done}))
    labels = [f"{j.kind} #{j.id}" if per_job else j.kind for j in done]
    kind_names = dict(zip(labels, (j.kind for j in done)))
    vocabulary = tuple(dict.fromkeys(labels))
    speeds = np.full((len(vocabulary), len(types), len(scales)), np.nan)
    for j, label in zip(done, labels):
        k, s = vocabulary.index(label), scales.index(int(j.gpus))
        allowed = j.allowed
        for t, gpu_type in enumerate(types):
            if allowed is not None and gpu_type not in allowed:
                continue
            rate = (measured.job_speed(j.id, gpu_type) if per_job else None) \
                or measured.kind_speed(j.kind, gpu_type) or run.estimates.get((j.kind, gpu_type, int(j.gpus)))
            speeds[k, t, s] = rate if rate else np.nan
    # a job file's own estimate of its wall time, as steps at the job's fastest speed (as the server reads it)
    fastest = np.array([np.nanmax(speeds[vocabulary.index(label), :, scales.index(int(j.gpus))], initial=0.0)
                        for j, label in zip(done, labels)])
    estimated_s = np.array([np.nan if (j.spec or {}).get("estimated_duration_s") is None
                            else float(j.spec["estimated_duration_s"]) for j in done])
    given = np.isfinite(estimated_s) & (fastest > 0)
    estimated_steps = np.where(given, estimated_s * fastest, np.nan) if given.any() else None
    first_submit = min(j.submitted for j in run.jobs)
    position = {int(j.id): p for p, j in enumerate(done)}  # a completed job's `after` jobs all completed
    # an array's tasks keep their `after` in its spec, not in their rows (state.py: after_edges)
    after = [[position[int(i)] for i in ((j.after or "").split(",") if j.after else (j.spec or {}).get("after") or ())
              if i and int(i) in position] for j in done]
    jobs = JobTable.build(
        job_id=[str(j.id) for j in done], submit_time_s=[j.submitted - first_submit for j in done],
        kind_names=labels, num_gpus=[j.gpus for j in done], total_steps=[j.total_steps for j in done],
        priority=[max(j.priority, MIN_WEIGHT) for j in done], user=[j.user for j in done],
        name=[j.name for j in done], queue=[j.queue for j in done], kinds=vocabulary, estimated_steps=estimated_steps,
        after=Dependencies.of_lists(after) if any(after) else None,
    )
    return jobs, ThroughputTable(vocabulary, types, scales, speeds), kind_names


def _cluster(settings: RunSettings) -> Cluster:
    """The run's slots as the server saw them: one node per slot type."""
    prices = list_prices(settings.capacity())
    capacity = settings.capacity()
    return node_per_type(tuple(capacity), tuple(capacity.values()), [prices.get(t, math.nan) for t in capacity])


def _policy(settings: RunSettings, source: str):
    """The run's policy, built as the server built it."""
    options = dict(settings.policy_options)
    if options.get("queues"):
        try:
            options["queues"] = load_queues(options["queues"])
        except OSError as err:
            raise InputError(source, f"the run's queues file cannot be read ({err})") from None
    try:
        return policy_from_spec(settings.policy, **options)
    except ValueError as err:
        raise InputError(source, f"the run's policy cannot be built: {err}") from None


def _round(value: float, digits: int = 3) -> float | None:
    return round(value, digits) if math.isfinite(value) else None
