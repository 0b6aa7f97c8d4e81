"""Fit the step-time parameters of ``apportion.core.goodput`` to observed steps, and refine them.

Least squares (scipy) on the log of two measured times per observation: the compute time of
a micro-batch (step time minus sync time) and the whole step time, so that a model is judged
by relative error whatever the job's speed. Parameters the observations cannot pin down
(no multi-node run: α_n, β_n; no multi-GPU run on one node: α_r, β_r; never more than two
GPUs: β_n, β_r; one micro-batch size only: α_c) are held at a prior: the model being refined,
or else Pollux's optimistic defaults (a term never seen costs nothing). A refit starts from
the prior, so refining online as a job runs at new sizes is a call with the observations so
far and the model being refined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from apportion.core.goodput import NUM_PARAMS, PARAM_NAMES, compute_time_s, step_time_s

_FLOOR = 1e-8
GAMMA_RANGE = (1.0, 10.0)


class StepConfig(NamedTuple):
    """How a measured step was made: the key of a job's observations on one GPU type, the same
    in both clocks (the server's ``serve/estimates/elastic.py``, the simulator's ``sim/learnt_models.py``)."""

    nodes: int
    gpus: int
    local_batch: float

    @classmethod
    def of(cls, *, nodes, gpus, local_batch) -> StepConfig:
        return cls(int(nodes), int(gpus), float(local_batch))


@dataclass(frozen=True)
class StepObservations:
    """Measured steps: one entry per (nodes, GPUs, micro-batch) configuration, times in seconds."""

    nodes: np.ndarray
    gpus: np.ndarray
    local_batch: np.ndarray
    step_time_s: np.ndarray  # a whole step, sync included
    sync_time_s: np.ndarray  # the part of it spent synchronising gradients

    def __post_init__(self) -> None:
        sizes = {len(np.atleast_1d(getattr(self, f))) for f in self.__dataclass_fields__}
        if len(sizes) != 1:
            raise ValueError("StepObservations columns must have the same length")

    @classmethod
    def of(cls, *, nodes, gpus, local_batch, step_time_s, sync_time_s) -> StepObservations:
        def col(a):
            return np.atleast_1d(np.asarray(a, dtype=np.float64))
        return cls(col(nodes), col(gpus), col(local_batch), col(step_time_s), col(sync_time_s))

    @classmethod
    def seen(cls, steps: Mapping[StepConfig, Sequence[float]]) -> StepObservations | None:
        """One observation per configuration: ``steps`` maps each to its (step time, sync time, …
        whatever else its keeper keeps); None when there is none."""
        if not steps:
            return None
        keys = list(steps)
        return cls.of(nodes=[k.nodes for k in keys], gpus=[k.gpus for k in keys],
                      local_batch=[k.local_batch for k in keys], step_time_s=[steps[k][0] for k in keys],
                      sync_time_s=[steps[k][1] for k in keys])

    def __len__(self) -> int:
        return len(self.nodes)

    def plus(self, other: StepObservations) -> StepObservations:
        """These observations and ``other``'s together (refining online as a job runs at new sizes)."""
        return StepObservations(*(np.concatenate([getattr(self, f), getattr(other, f)])
                                  for f in self.__dataclass_fields__))

    @property
    def compute_time_s(self) -> np.ndarray:
        return np.maximum(self.step_time_s - self.sync_time_s, _FLOOR)


@dataclass(frozen=True)
class StepFit:
    params: np.ndarray  # [7], in PARAM_NAMES order
    rmsle: float  # root mean squared log error of the predicted step times
    median_abs_pct_error: float  # of the predicted step times, in percent
    fixed: tuple[str, ...]  # parameters held at the prior: the observations could not pin them down

    def as_dict(self) -> dict[str, float]:
        return dict(zip(PARAM_NAMES, (float(v) for v in self.params)))


def default_prior(observations: StepObservations) -> np.ndarray:
    """Pollux's starting point: 0.1 s and 0.01 s per example for compute and both links, γ ≈ 1."""
    return np.array([1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3])


def fit_step_params(observations: StepObservations, prior: np.ndarray | None = None) -> StepFit:
    """The parameters that best explain ``observations``; refining ``prior`` if given."""
    from scipy.optimize import least_squares

    obs = observations
    if len(obs) == 0:
        raise ValueError("no observations to fit")
    if np.any(obs.step_time_s <= 0) or np.any(obs.local_batch <= 0) or np.any(obs.gpus < 1):
        raise ValueError("observations need positive step times, micro-batches and GPU counts")
    start = np.array(default_prior(obs) if prior is None else prior, dtype=np.float64)
    held = _unidentifiable(obs, has_prior=prior is not None)
    if prior is None:  # unseen terms cost nothing (optimistic); γ = 1 if nothing was ever synchronised
        start[held] = _FLOOR
        start[-1] = 1.0 if held[-1] else start[-1]
        if held[0]:
            start[0] = float(np.mean(obs.compute_time_s)) / 2.0
        _seed_compute(obs, start, held)
    free = ~held
    lower = np.full(NUM_PARAMS, _FLOOR)
    upper = np.full(NUM_PARAMS, np.inf)
    lower[-1], upper[-1] = GAMMA_RANGE
    start = np.clip(start, lower + 1e-12, np.where(np.isfinite(upper), upper - 1e-12, np.inf))
    log_compute = np.log(obs.compute_time_s)
    log_step = np.log(obs.step_time_s)
    scale = 1.0 / np.sqrt(len(obs))

    def full(x: np.ndarray) -> np.ndarray:
        params = start.copy()
        params[free] = x
        return params

    def residuals(x: np.ndarray) -> np.ndarray:
        params = full(x)
        pred_compute = compute_time_s(params, obs.local_batch)
        pred_step = step_time_s(params, obs.nodes, obs.gpus, obs.local_batch)
        parts = [scale * (np.log(pred_compute) - log_compute), scale * (np.log(pred_step) - log_step),
                 # Pollux's regularisers: a smaller γ, and retrogression terms small against the constants
                 [np.sqrt(1e-3) * (params[-1] - 1.0),
                  0.1 * params[3] / max(params[2], _FLOOR), 0.1 * params[5] / max(params[4], _FLOOR)]]
        return np.concatenate([np.ravel(p) for p in parts])

    nodes, gpus, local = obs.nodes, obs.gpus, obs.local_batch
    across = (nodes > 1) & (gpus > 1)
    within = (nodes <= 1) & (gpus > 1)
    extra = np.maximum(gpus - 2.0, 0.0)

    def jacobian(x: np.ndarray) -> np.ndarray:
        """The residuals' derivatives (analytic: a numerical one costs eight evaluations a step)."""
        params = full(x)
        gamma = params[-1]
        compute = compute_time_s(params, local)
        sync = np.where(across, params[2] + params[3] * extra, np.where(within, params[4] + params[5] * extra, 0.0))
        synced = sync > 0
        safe_sync = np.where(synced, sync, 1.0)
        c_g = compute**gamma
        s_g = np.where(synced, safe_sync**gamma, 0.0)
        total = c_g + s_g
        d_compute = c_g / compute / total  # ∂ log step / ∂ compute
        d_sync = np.where(synced, s_g / safe_sync, 0.0) / total
        d_gamma = (-np.log(total) / gamma + (c_g * np.log(compute) + np.where(synced, s_g * np.log(safe_sync), 0.0))
                   / total) / gamma
        m = len(obs)
        jac = np.zeros((2 * m + 3, NUM_PARAMS))
        jac[:m, 0], jac[:m, 1] = scale / compute, scale * local / compute
        jac[m:2 * m, 0], jac[m:2 * m, 1] = scale * d_compute, scale * d_compute * local
        jac[m:2 * m, 2], jac[m:2 * m, 3] = scale * d_sync * across, scale * d_sync * across * extra
        jac[m:2 * m, 4], jac[m:2 * m, 5] = scale * d_sync * within, scale * d_sync * within * extra
        jac[m:2 * m, 6] = scale * d_gamma
        jac[2 * m, 6] = np.sqrt(1e-3)
        if params[2] > _FLOOR:
            jac[2 * m + 1, 2], jac[2 * m + 1, 3] = -0.1 * params[3] / params[2] ** 2, 0.1 / params[2]
        else:
            jac[2 * m + 1, 3] = 0.1 / _FLOOR
        if params[4] > _FLOOR:
            jac[2 * m + 2, 4], jac[2 * m + 2, 5] = -0.1 * params[5] / params[4] ** 2, 0.1 / params[4]
        else:
            jac[2 * m + 2, 5] = 0.1 / _FLOOR
        return jac[:, free]

    solution = least_squares(residuals, start[free], jac=jacobian, bounds=(lower[free], upper[free]), method="trf",
                             x_scale="jac", max_nfev=2000)
    params = full(solution.x)
    if prior is None and not np.any(obs.nodes > 1):
        # nothing seen across nodes: assume crossing nodes costs at least 10% more than staying on one
        params[2] = max(params[2], params[4] * 1.1)
        params[3] = max(params[3], params[5] * 1.1)
    predicted = step_time_s(params, obs.nodes, obs.gpus, obs.local_batch)
    log_error = np.log(predicted) - log_step
    return StepFit(
        params=params,
        rmsle=float(np.sqrt(np.mean(log_error**2))),
        median_abs_pct_error=float(np.median(np.abs(predicted / obs.step_time_s - 1.0)) * 100.0),
        fixed=tuple(name for name, h in zip(PARAM_NAMES, held) if h),
    )


def _unidentifiable(obs: StepObservations, *, has_prior: bool) -> np.ndarray:
    """[7] which parameters the observations say nothing about."""
    held = np.zeros(NUM_PARAMS, dtype=bool)
    if len(np.unique(obs.local_batch)) == 1:
        held[0] = True
    if not np.any(obs.nodes > 1):
        held[2:4] = True
    if not np.any((obs.nodes == 1) & (obs.gpus > 1)):
        held[4:6] = True
    if not np.any(obs.gpus > 2):
        held[3] = held[5] = True
    if not np.any(obs.gpus > 1):
        held[6] = True
    return held


def _seed_compute(obs: StepObservations, start: np.ndarray, held: np.ndarray) -> None:
    """Start α_c, β_c from a straight line through compute time against micro-batch size."""
    if held[0]:
        start[1] = max(float(np.mean((obs.compute_time_s - start[0]) / obs.local_batch)), _FLOOR * 10)
        return
    slope, intercept = np.polyfit(obs.local_batch, obs.compute_time_s, 1)
    start[0] = max(float(intercept), 1e-4)
    start[1] = max(float(slope), 1e-6)
