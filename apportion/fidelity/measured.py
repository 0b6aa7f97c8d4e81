"""What a run measured about its jobs: each attempt's start-up, stop and finish costs, and the
speed each job trained at on each slot type, taken from the times the server recorded.

An attempt's life, as the server saw it:

    started ──start-up── first lease call ──training── stop told (or last step) ──stop── exit

- start-up: from the process's start to its first lease call, which it makes just before its
  first step (imports, building the model, restoring a checkpoint): ``start_s`` for a job's
  first attempt, ``restart_s`` for later ones;
- training: steps done between the first lease call and the call that was answered
  ``renew: false`` (or the last step's report), over the time between them: the speed;
- stop: a preempted attempt asks for its lease ``stop_lead_s`` before it ends, then
  checkpoints and exits, ``stop_s`` after it asked; a completing one exits ``finish_s`` after
  reporting its last step.

On a shared machine start-ups follow its load, which drifts over tens of seconds: attempts that
begin around the same moment take alike longer or shorter than is typical of their kind (its
median). A few take far longer: a new server's first attempts wait for its spares to import
torch, 2-3 s where a warm start takes 0.1 s. ``startups`` keeps when each start-up began and how
it compared with its kind's median, for the simulator to charge start-ups by the moment they
begin (``apportion.sim.costs.MachineSlowness``): the median times how slow the other jobs'
start-ups around that moment were. When no moment is slower than another, a kind's mean is
charged instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.serve.jobs.records import AttemptRecord, JobRecord
from apportion.sim.costs import AttemptCosts, MachineSlowness

COSTS = ("start_s", "restart_s", "stop_lead_s", "stop_s", "finish_s")
STARTUPS = ("start_s", "restart_s")
# the slowness windows tried; the last, the whole run: start-ups that do not drift are charged their kind's mean
WINDOWS_S = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, math.inf)


@dataclass(frozen=True)
class Spread:
    """A measured quantity over several attempts."""

    mean: float
    std: float
    count: int
    values: tuple[float, ...] = ()  # each attempt's
    median: float = math.nan

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        array = np.asarray(values, dtype=np.float64)
        return cls(float(array.mean()), float(array.std()), len(array), tuple(values), float(np.median(array)))

    def describe(self) -> dict:
        return {"mean": round(self.mean, 3), "median": round(self.median, 3), "std": round(self.std, 3),
                "n": self.count}


@dataclass(frozen=True)
class AttemptSpeed:
    """One attempt's training: steps over seconds on one slot type."""

    job_id: int
    kind: str
    gpu_type: str
    steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


@dataclass(frozen=True)
class StartUp:
    """One attempt's start-up: when it began (seconds after the run's first submission), how long it took."""

    began_s: float
    job_id: int
    kind: str
    cost: str  # "start_s" (a first attempt) or "restart_s"
    seconds: float


@dataclass(frozen=True)
class Measured:
    """Per job kind: each cost's spread over attempts; per attempt: its speed and its start-up."""

    costs: dict[str, dict[str, Spread]]  # cost name (COSTS) -> kind -> its spread
    speeds: list[AttemptSpeed]  # every attempt that trained alone and stopped or finished cleanly
    startups: list[StartUp] = field(default_factory=list)  # every attempt that reached its first step, in order

    def attempt_costs(self, restart_s: float, typical_startups: bool = False) -> AttemptCosts:
        """The mean of each cost per kind, for the simulator (start-ups: the median with
        ``typical_startups``, for a slowness to scale). A kind never restarted costs its start-up
        to restart; one never started costs ``restart_s``, as does any unmeasured kind."""
        charged = {name: {kind: spread.median if typical_startups and name in STARTUPS else spread.mean
                          for kind, spread in by_kind.items()} for name, by_kind in self.costs.items()}
        restart = {**charged["start_s"], **charged["restart_s"]}
        return AttemptCosts(start_s=charged["start_s"], restart_s=restart, stop_lead_s=charged["stop_lead_s"],
                            stop_s=charged["stop_s"], finish_s=charged["finish_s"])

    def startup_ratios(self) -> np.ndarray:
        """Each start-up over its kind's median (start or restart), in the order of ``startups``."""
        typical = {name: {kind: spread.median for kind, spread in self.costs[name].items()} for name in STARTUPS}
        return np.array([s.seconds / typical[s.cost][s.kind] if typical[s.cost][s.kind] > 0 else 1.0
                         for s in self.startups], dtype=np.float64)

    def slowness(self, row_of: dict[int, int], window_s: float | None = None) -> MachineSlowness:
        """The run's start-ups over time for the simulator, each under its job's JobTable row
        (``row_of``: job id -> row), averaged over ``window_s`` either side of a moment (None: the
        window of ``WINDOWS_S`` that best predicts each start-up from the other jobs', ``best_window_s``)."""
        times = np.array([s.began_s for s in self.startups], dtype=np.float64)
        rows = np.array([row_of.get(s.job_id, -1) for s in self.startups], dtype=np.int64)
        return MachineSlowness(times, rows, self.startup_ratios(), self.best_window_s() if window_s is None else window_s)

    def best_window_s(self) -> float:
        """The window over which the other jobs' start-ups around an attempt's best predict its own
        (least squared error; the wider of equals): how fast the machine's load drifts. The whole
        run (infinite) stands for charging each start-up its kind's mean."""
        times = np.array([s.began_s for s in self.startups], dtype=np.float64)
        jobs = np.array([s.job_id for s in self.startups])
        ratios = self.startup_ratios()
        if len(times) < 3:
            return WINDOWS_S[0]
        seconds = np.array([s.seconds for s in self.startups])
        base = seconds / np.where(ratios > 0, ratios, 1.0)  # kind medians
        kind_mean = np.array([self.costs[s.cost][s.kind].mean for s in self.startups])
        order = np.argsort(times, kind="stable")
        times, jobs, ratios, base = times[order], jobs[order], ratios[order], base[order]
        seconds, kind_mean = seconds[order], kind_mean[order]
        summed = np.concatenate([[0.0], np.cumsum(ratios)])
        # pairs of one job's attempts (i, j), i != j: taken back out of each other's neighbours
        same = np.flatnonzero(jobs[:, None] == jobs[None, :]) if len(times) <= 2048 else \
            np.concatenate([np.flatnonzero(jobs[i] == jobs) + i * len(times) for i in range(len(times))])
        pair_i, pair_j = np.divmod(same, len(times))
        pair_i, pair_j = pair_i[pair_i != pair_j], pair_j[pair_i != pair_j]
        pair_gap = np.abs(times[pair_i] - times[pair_j])
        errors = []
        for window_s in WINDOWS_S:
            if math.isinf(window_s):  # the whole run: each kind's mean
                errors.append(float(np.mean((kind_mean - seconds) ** 2)))
                continue
            lo = np.searchsorted(times, times - window_s, side="left")
            hi = np.searchsorted(times, times + window_s, side="right")
            own = pair_gap <= window_s
            count = hi - lo - 1 - np.bincount(pair_i[own], minlength=len(times))  # less itself and its job's
            total = summed[hi] - summed[lo] - ratios - np.bincount(pair_i[own], weights=ratios[pair_j[own]],
                                                                   minlength=len(times))
            factor = np.where(count > 0, total / np.maximum(count, 1), 1.0)
            errors.append(float(np.mean((base * (factor - ratios)) ** 2)))
        best = min(errors)
        return max(w for w, e in zip(WINDOWS_S, errors) if e <= best * (1 + 1e-9))  # a tie: the wider window

    def job_speed(self, job_id: int, gpu_type: str) -> float | None:
        """Steps/s of job ``job_id`` over all its attempts on ``gpu_type`` (None: it never trained there)."""
        return _speed([s for s in self.speeds if s.job_id == job_id and s.gpu_type == gpu_type])

    def kind_speed(self, kind: str, gpu_type: str) -> float | None:
        """Steps/s of every job of ``kind`` on ``gpu_type``, together (None: none trained there)."""
        return _speed([s for s in self.speeds if s.kind == kind and s.gpu_type == gpu_type])

    def speed_factors(self) -> list[float]:
        """Each attempt's speed over its job's (on the same type): how much attempts of one job differ."""
        return [s.steps_per_s / self.job_speed(s.job_id, s.gpu_type) for s in self.speeds]

    def describe(self) -> dict:
        """Each cost per kind as {mean, std, n} (seconds)."""
        return {name: {kind: spread.describe() for kind, spread in sorted(by_kind.items())}
                for name, by_kind in self.costs.items()}

    def speed_spread(self) -> dict:
        """How far attempts' speeds stray from their job's (over all its attempts) and from their
        kind's, on the same type: the noise of the machine the run shared. Median and p90 of
        |speed / job's or kind's - 1|."""
        within_job = [abs(factor - 1.0) for factor in self.speed_factors()]
        within_kind = [abs(s.steps_per_s / self.kind_speed(s.kind, s.gpu_type) - 1.0) for s in self.speeds]

        def spread(values: list[float]) -> dict:
            return {"median": round(float(np.median(values)), 4), "p90": round(float(np.percentile(values, 90)), 4)}

        if not self.speeds:
            return {"attempts": 0}
        return {"attempts": len(self.speeds), "attempt_vs_job": spread(within_job), "attempt_vs_kind": spread(within_kind)}


def measure(jobs: list[JobRecord], attempts: list[AttemptRecord]) -> Measured:
    """The costs and speeds in a run's ``attempts`` (the store's rows), by the kind of their ``jobs``."""
    kind_of = {j.id: j.kind for j in jobs}
    total_of = {j.id: j.total_steps for j in jobs}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in COSTS}
    speeds: list[AttemptSpeed] = []
    startups: list[StartUp] = []
    first_submit = min((j.submitted for j in jobs), default=0.0)

    def add(name: str, kind: str, value: float) -> None:
        samples[name].setdefault(kind, []).append(value)

    for a in attempts:
        kind = kind_of.get(a.job_id)
        if kind is None or a.first_lease is None:
            continue  # it never reached its first step: nothing was measured
        cost = "start_s" if a.attempt == 1 else "restart_s"
        add(cost, kind, a.first_lease - a.started)
        startups.append(StartUp(a.started - first_submit, a.job_id, kind, cost, a.first_lease - a.started))
        stopped = a.how in ("preempted", "moved") and a.stop_told is not None and a.stop_told > a.first_lease
        if stopped:
            if a.stop_lease_end is not None:
                add("stop_lead_s", kind, a.stop_lease_end - a.stop_told)
            add("stop_s", kind, a.ended - a.stop_told)
        finished = a.how == "completed" and a.done is not None
        if finished:
            add("finish_s", kind, a.ended - a.done)
        if (stopped or finished) and a.partner is None and a.first_step is not None:
            until = a.stop_told if stopped else a.done
            steps = ((a.stop_step if a.stop_step is not None else a.end_step) if stopped
                     else total_of[a.job_id]) - a.first_step
            if until > a.first_lease and steps > 0:
                speeds.append(AttemptSpeed(a.job_id, kind, a.gpu_type, steps, until - a.first_lease))
    costs = {name: {kind: Spread.of(values) for kind, values in by_kind.items()} for name, by_kind in samples.items()}
    startups.sort(key=lambda s: s.began_s)
    return Measured(costs, speeds, startups)


def _speed(speeds: list[AttemptSpeed]) -> float | None:
    seconds = sum(s.seconds for s in speeds)
    return sum(s.steps for s in speeds) / seconds if seconds > 0 else None
