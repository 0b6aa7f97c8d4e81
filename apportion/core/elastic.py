"""Elastic jobs: jobs whose GPU count and batch size may change from round to round.

``ElasticKinds`` is the library of models such jobs train (step-time parameters per GPU type,
batch limits, how the gradient noise scale grows as training progresses, how much progress
finishes a job); ``ElasticJobs`` the per-job columns a ``JobTable`` of elastic jobs carries;
``ElasticView`` what a policy sees of them each round. An elastic job's progress and target
(``JobTable.total_steps``) are counted in examples weighted by statistical efficiency: an
example at batch M counts E(M) ≤ 1 of an example at the batch M0 the job was tuned for.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from apportion.core.goodput import NUM_PARAMS, BatchLimits, best_batch, goodput_at, nodes_for


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one library per workload
class ElasticKinds:
    """Models elastic jobs train, indexed by ``JobTable.kind``; arrays over kinds (K) and GPU types (T)."""

    names: tuple[str, ...]
    gpu_types: tuple[str, ...]
    step_params: np.ndarray  # [K, T, 7] step-time parameters (core.goodput), NaN where a type is unknown
    init_batch: np.ndarray  # [K] M0
    max_batch: np.ndarray  # [K]
    min_local_batch: np.ndarray  # [K]
    max_local_batch: np.ndarray  # [K]
    target_examples: np.ndarray  # [K] efficiency-weighted examples that finish a job
    noise_fraction: np.ndarray  # [K, P] progress as a fraction of the target, ascending per row
    noise_scale: np.ndarray  # [K, P] gradient noise scale (examples) at those fractions

    def __post_init__(self) -> None:
        k, t = len(self.names), len(self.gpu_types)
        if self.step_params.shape != (k, t, NUM_PARAMS):
            raise ValueError(f"step_params has shape {self.step_params.shape}, expected {(k, t, NUM_PARAMS)}")
        if self.noise_fraction.shape != self.noise_scale.shape or self.noise_scale.shape[0] != k:
            raise ValueError("noise_fraction and noise_scale must both be [kinds, knots]")

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def limits(self, kind: np.ndarray) -> BatchLimits:
        """The batch limits of each job's kind."""
        return BatchLimits(self.init_batch[kind], self.max_batch[kind], self.min_local_batch[kind],
                           self.max_local_batch[kind])

    def noise_scale_at(self, kind: np.ndarray, progress_fraction: np.ndarray) -> np.ndarray:
        """[n] gradient noise scale of each job at its progress, log-linear between knots."""
        out = np.empty(len(kind))
        fraction = np.clip(progress_fraction, 0.0, 1.0)
        for k in np.unique(kind).tolist():
            rows = kind == k
            out[rows] = np.exp(np.interp(fraction[rows], self.noise_fraction[k], np.log(self.noise_scale[k])))
        return out

    def for_types(self, gpu_types: tuple[str, ...]) -> ElasticKinds:
        """The same kinds with step parameters for ``gpu_types``, in that order; KeyError naming a missing one."""
        if tuple(gpu_types) == self.gpu_types:
            return self
        missing = [t for t in gpu_types if t not in self.gpu_types]
        if missing:
            raise KeyError(missing[0])
        columns = [self.gpu_types.index(t) for t in gpu_types]
        return ElasticKinds(self.names, tuple(gpu_types), self.step_params[:, columns], self.init_batch,
                            self.max_batch, self.min_local_batch, self.max_local_batch, self.target_examples,
                            self.noise_fraction, self.noise_scale)

    def max_useful_gpus(self, kind: np.ndarray) -> np.ndarray:
        """[n] the most GPUs a job of each kind can use: its largest batch over its smallest micro-batch."""
        return np.maximum(np.floor(self.max_batch[kind] / self.min_local_batch[kind]), 1).astype(np.int64)


@dataclass(frozen=True)
class ElasticJobs:
    """The elastic columns of a JobTable: arrays over its rows, plus the kinds they train."""

    kinds: ElasticKinds
    min_gpus: np.ndarray  # [n] fewest GPUs each job runs on
    max_gpus: np.ndarray  # [n] most GPUs each job may be given
    batch_size: np.ndarray  # [n] the total batch its user picked (used as is by fixed-batch policies)

    def take(self, rows) -> ElasticJobs:
        return ElasticJobs(self.kinds, self.min_gpus[rows], self.max_gpus[rows], self.batch_size[rows])


@dataclass(frozen=True)
class ElasticView:
    """What a policy sees of the active elastic jobs this round, as arrays over its JobView's rows."""

    kinds: ElasticKinds  # step parameters for the cluster's GPU types, in the cluster's order
    min_gpus: np.ndarray  # [n]
    max_gpus: np.ndarray  # [n]
    batch_size: np.ndarray  # [n] the user's batch
    noise_scale: np.ndarray  # [n] gradient noise scale now
    gpus_now: np.ndarray  # [n] GPUs held now, 0 when waiting
    restarts: np.ndarray  # [n] times each job has been restarted (moved, rescaled or resumed)
    gpus_per_node: np.ndarray  # [T] GPUs in a node of each type
    # [n] nodes each job's GPUs lie on now (0 when waiting); None: unknown, taken as tightly packed
    nodes_now: np.ndarray | None = None

    def subset(self, rows: np.ndarray) -> ElasticView:
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = value if f.name in ("kinds", "gpus_per_node") or value is None else value[rows]
        return ElasticView(**values)


def goodput_table(kinds: ElasticKinds, kind: np.ndarray, gpus: np.ndarray, noise_scale: np.ndarray,
                  gpus_per_node: np.ndarray, *, batch_size: np.ndarray | None = None,
                  nodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """([n, T, C] goodput, [n, T, C] batch) of n jobs on each GPU type at ``gpus`` [n, C] GPUs each.

    The batch is the best for each allocation, or ``batch_size`` [n] for every one of a job's
    allocations (a fixed-batch job). Nodes are as few as hold the GPUs, unless ``nodes`` [n, C]
    says. Goodput is 0 where the kind has no parameters for a type or the allocation is invalid
    (0 GPUs; more GPUs than the batch has micro-batches).
    """
    params = kinds.step_params[kind][:, :, None, :]  # [n, T, 1, 7]
    gpus = np.asarray(gpus, dtype=np.float64)[:, None, :]  # [n, 1, C]
    if nodes is None:
        nodes = nodes_for(gpus, np.asarray(gpus_per_node, dtype=np.float64)[None, :, None])
    else:
        nodes = np.asarray(nodes, dtype=np.float64)[:, None, :]
    limits = BatchLimits(*(np.asarray(getattr(kinds.limits(kind), f.name))[:, None, None]
                           for f in fields(BatchLimits)))
    noise = np.asarray(noise_scale)[:, None, None]
    valid = (gpus >= 1) & ~np.isnan(params[..., 0])
    safe_gpus = np.maximum(gpus, 1.0)
    safe_params = np.nan_to_num(params, nan=1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        if batch_size is None:
            value, batch = best_batch(safe_params, nodes, safe_gpus, noise, limits)
        else:
            batch = np.broadcast_to(np.asarray(batch_size, dtype=np.float64)[:, None, None], valid.shape)
            value = goodput_at(safe_params, nodes, safe_gpus, batch, noise, limits)
            valid = valid & (batch / safe_gpus >= limits.min_local_batch - 1e-9)
    value = np.where(valid, value, 0.0)
    return value, np.where(valid, batch, 0.0)


def time_to_target_s(kinds: ElasticKinds, kind: int, gpu_type: int, gpus: int, batch_size: float | None,
                     gpus_per_node: int, *, points: int = 64) -> float:
    """Seconds a job of ``kind`` takes alone from start to target on ``gpus`` GPUs of one type.

    At ``batch_size`` throughout, or (None) at the best batch at each point of its training:
    progress is integrated over ``points`` equal slices, each at the noise scale of its middle.
    """
    middles = (np.arange(points) + 0.5) / points
    rows = np.full(points, kind)
    noise = kinds.noise_scale_at(rows, middles)
    value, _ = goodput_table(kinds, rows, np.full((points, 1), gpus), noise, np.full(len(kinds.gpu_types), gpus_per_node),
                             batch_size=None if batch_size is None else np.full(points, float(batch_size)))
    rate = value[:, gpu_type, 0]
    if np.any(rate <= 0):
        return float("inf")
    return float(np.sum(kinds.target_examples[kind] / points / rate))
