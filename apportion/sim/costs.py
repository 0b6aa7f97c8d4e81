"""The seconds an attempt spends around its training, charged by the simulator per job kind.

A real attempt does not train from its start to its stop: it first imports and builds its
model (and restores its checkpoint), and when told to stop it asks for its lease a little
ahead of the lease's end, then checkpoints and exits; a completing attempt reports and exits.
``AttemptCosts`` holds these per job kind, as a server measured them (``apportion.fidelity``
reads them from a finished run); kinds it does not name cost ``SimConfig``'s constants. On a
shared machine start-ups also follow its load, which drifts over tens of seconds:
``MachineSlowness`` scales an attempt's start-up (or restart) by how much slower than their
kind's mean the other jobs' attempts started up around the moment it begins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from apportion.core.jobs import JobTable


@dataclass(frozen=True)
class AttemptCosts:
    """Seconds per job kind; a kind missing from a mapping costs the simulator's constant (or 0)."""

    start_s: Mapping[str, float] = field(default_factory=dict)  # a first attempt: its start to its first step
    restart_s: Mapping[str, float] = field(default_factory=dict)  # a later one: the same, restore included
    stop_lead_s: Mapping[str, float] = field(default_factory=dict)  # told to stop: stops training this long
    # before its lease ends (it asks for the lease ahead of its end)
    stop_s: Mapping[str, float] = field(default_factory=dict)  # then exits this long after (checkpoint included)
    finish_s: Mapping[str, float] = field(default_factory=dict)  # a completing attempt: its last step to its exit
    slowness: MachineSlowness | None = None  # start-ups scaled by the moment they begin; None: never


@dataclass(frozen=True)
class MachineSlowness:
    """The machine's slowness over time, measured by start-ups: at ``times_s`` (seconds on the
    simulated clock) an attempt of the job at JobTable row ``rows`` began and took ``ratios`` times
    its kind's mean start-up. An attempt of job ``r`` beginning at ``t`` is charged its kind's
    mean times the mean ratio of the other jobs' start-ups that began within ``window_s`` of ``t``
    (1 if none did; 1 always with an infinite window): the slowness then, as others measured it,
    not the job's own cost replayed."""

    times_s: np.ndarray
    rows: np.ndarray
    ratios: np.ndarray
    window_s: float

    def at(self, t: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The factor for attempts of jobs ``rows`` beginning at ``t``."""
        t = np.asarray(t, dtype=np.float64)
        if math.isinf(self.window_s):
            return np.ones(len(t))
        near = (np.abs(t[:, None] - self.times_s[None, :]) <= self.window_s) \
            & (np.asarray(rows)[:, None] != self.rows[None, :])
        count = near.sum(axis=1)
        total = (near * self.ratios[None, :]).sum(axis=1)
        return np.where(count > 0, total / np.maximum(count, 1), 1.0)


@dataclass(frozen=True)
class JobCosts:
    """The costs of every job of a JobTable, as arrays [n] of seconds."""

    start_s: np.ndarray
    restart_s: np.ndarray
    stop_lead_s: np.ndarray
    stop_s: np.ndarray
    finish_s: np.ndarray

    @classmethod
    def of(cls, jobs: JobTable, costs: AttemptCosts | None, start_s: float, restart_s: float) -> JobCosts:
        """Each job's costs: its kind's in ``costs``, else ``start_s``/``restart_s`` and no stop or finish cost."""
        names = np.asarray(jobs.kinds, dtype=object)

        def per_job(by_kind: Mapping[str, float] | None, default: float) -> np.ndarray:
            per_kind = np.array([float((by_kind or {}).get(name, default)) for name in names], dtype=np.float64)
            return per_kind[jobs.kind] if len(per_kind) else np.zeros(len(jobs))

        costs = costs or AttemptCosts()
        return cls(per_job(costs.start_s, start_s), per_job(costs.restart_s, restart_s),
                   per_job(costs.stop_lead_s, 0.0), per_job(costs.stop_s, 0.0), per_job(costs.finish_s, 0.0))
