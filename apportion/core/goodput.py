"""Goodput of a data-parallel job: throughput × statistical efficiency (Pollux, OSDI'21).

Step time, in Pollux's parametric form (seven parameters per job and GPU type)::

    compute(b)      = α_c + β_c·b                     one micro-batch of b examples on one GPU
    sync(N, K)      = 0                               K = 1 GPU
                    = α_r + β_r·max(K − 2, 0)         K GPUs on one node
                    = α_n + β_n·max(K − 2, 0)         K GPUs over N > 1 nodes
    step(N, K, b)   = (compute^γ + sync^γ)^(1/γ)      γ ≥ 1: how far compute and sync overlap
    iteration       = s·compute(b) + step(N, K, b)    with s extra accumulation micro-batches

A batch of M = K·b·(s + 1) examples takes one iteration, so throughput = M / iteration.
Statistical efficiency of M, relative to the batch M0 the job was tuned for, from the gradient
noise scale φ (variance of the per-example gradient over its squared norm):
E(M) = (φ + M0) / (φ + M) ≤ 1. Goodput = throughput × E(M): examples per second, each worth
what an example at M0 is worth to convergence.

Everything here is numpy over arrays of any broadcastable shape; ``params`` has the seven
parameters on its last axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARAM_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
NUM_PARAMS = len(PARAM_NAMES)
_EPS = 1e-8  # tolerance for the ceilings that turn batch sizes into whole examples
BATCH_CANDIDATES = 48  # batch sizes tried between the smallest and largest allowed, geometrically


@dataclass(frozen=True)
class BatchLimits:
    """What batch sizes a job accepts, as arrays broadcastable with the allocations asked about."""

    init_batch: np.ndarray  # M0: the batch its hyper-parameters were tuned for
    max_batch: np.ndarray  # largest total batch it may use
    min_local_batch: np.ndarray  # smallest micro-batch per GPU worth running
    max_local_batch: np.ndarray  # largest micro-batch that fits in one GPU's memory


def _param(params: np.ndarray, name: str) -> np.ndarray:
    return params[..., PARAM_NAMES.index(name)]


def compute_time_s(params: np.ndarray, local_batch) -> np.ndarray:
    """Seconds for one forward and backward pass of ``local_batch`` examples on one GPU."""
    return _param(params, "alpha_c") + _param(params, "beta_c") * np.asarray(local_batch, dtype=np.float64)


def sync_time_s(params: np.ndarray, nodes, gpus) -> np.ndarray:
    """Seconds to all-reduce the gradients across ``gpus`` GPUs on ``nodes`` nodes (0 on one GPU)."""
    nodes = np.asarray(nodes)
    gpus = np.asarray(gpus, dtype=np.float64)
    across = nodes > 1
    alpha = np.where(across, _param(params, "alpha_n"), _param(params, "alpha_r"))
    beta = np.where(across, _param(params, "beta_n"), _param(params, "beta_r"))
    return np.where(gpus > 1, alpha + beta * np.maximum(gpus - 2.0, 0.0), 0.0)


def step_time_s(params: np.ndarray, nodes, gpus, local_batch) -> np.ndarray:
    """Seconds for the micro-batch that ends an iteration: compute and sync, overlapped by γ."""
    gamma = _param(params, "gamma")
    compute = compute_time_s(params, local_batch)
    sync = sync_time_s(params, nodes, gpus)
    return (compute**gamma + sync**gamma) ** (1.0 / gamma)


def iteration_time_s(params: np.ndarray, nodes, gpus, local_batch, accum_steps) -> np.ndarray:
    """Seconds for one optimizer step: ``accum_steps`` micro-batches without sync, then one with."""
    return np.asarray(accum_steps) * compute_time_s(params, local_batch) + step_time_s(params, nodes, gpus, local_batch)


def throughput(params: np.ndarray, nodes, gpus, local_batch, accum_steps) -> np.ndarray:
    """Examples per second."""
    batch = np.asarray(gpus) * np.asarray(local_batch) * (np.asarray(accum_steps) + 1)
    return batch / iteration_time_s(params, nodes, gpus, local_batch, accum_steps)


def efficiency(noise_scale, init_batch, batch) -> np.ndarray:
    """Statistical efficiency of ``batch`` against ``init_batch``: (φ + M0) / (φ + M)."""
    noise_scale = np.asarray(noise_scale, dtype=np.float64)
    return (noise_scale + init_batch) / (noise_scale + np.asarray(batch, dtype=np.float64))


def split_batch(batch, gpus, limits: BatchLimits) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batch per GPU, extra accumulation steps) that run a total ``batch`` on ``gpus`` GPUs.

    As few accumulation steps as keep the micro-batch within ``max_local_batch``; on one GPU a
    batch above M0 takes at least one, so that the gradient noise can be measured across
    micro-batches (Pollux's rule). Micro-batches are whole examples, rounded up.
    """
    gpus = np.asarray(gpus, dtype=np.float64)
    per_gpu = np.asarray(batch, dtype=np.float64) / gpus
    accum = np.maximum(np.ceil(per_gpu / limits.max_local_batch - _EPS) - 1.0, 0.0)
    accum = np.where((gpus == 1) & (per_gpu > limits.init_batch + _EPS), np.maximum(accum, 1.0), accum)
    local = np.ceil(per_gpu / (accum + 1.0) - _EPS)
    return local, accum


def goodput_at(params: np.ndarray, nodes, gpus, batch, noise_scale, limits: BatchLimits) -> np.ndarray:
    """Goodput (M0-equivalent examples/s) of a total ``batch`` on ``gpus`` GPUs over ``nodes`` nodes."""
    local, accum = split_batch(batch, gpus, limits)
    actual = np.asarray(gpus) * local * (accum + 1.0)
    return throughput(params, nodes, gpus, local, accum) * efficiency(noise_scale, limits.init_batch, actual)


def best_batch(params: np.ndarray, nodes, gpus, noise_scale, limits: BatchLimits) -> tuple[np.ndarray, np.ndarray]:
    """(goodput, total batch) at the batch that maximises goodput for each allocation.

    Tries ``BATCH_CANDIDATES`` batch sizes spaced geometrically from the smallest allowed
    (M0, or ``min_local_batch`` on every GPU if that is more) to ``max_batch``; an allocation
    with more GPUs than ``max_batch / min_local_batch`` gets goodput 0. The batch returned is
    the one actually run (micro-batches rounded up to whole examples).
    """
    gpus = np.asarray(gpus, dtype=np.float64)
    shape = np.broadcast_shapes(np.shape(params)[:-1], np.shape(nodes), gpus.shape, np.shape(noise_scale),
                                *(np.shape(getattr(limits, f)) for f in limits.__dataclass_fields__))
    lowest = np.maximum(limits.init_batch, gpus * limits.min_local_batch)
    highest = np.broadcast_to(np.asarray(limits.max_batch, dtype=np.float64), shape)
    fits = np.broadcast_to(lowest <= highest + _EPS, shape)
    lowest = np.broadcast_to(np.minimum(lowest, highest), shape)
    ratio = np.linspace(0.0, 1.0, BATCH_CANDIDATES)
    candidates = lowest[..., None] * (highest / np.maximum(lowest, _EPS))[..., None] ** ratio  # [..., S]

    def widen(a):
        return np.asarray(a)[..., None]

    limits_s = BatchLimits(*(widen(getattr(limits, f)) for f in limits.__dataclass_fields__))
    local, accum = split_batch(candidates, widen(gpus), limits_s)
    local = np.minimum(local, np.floor(widen(highest) / (widen(gpus) * (accum + 1.0)) + _EPS))
    local = np.maximum(local, 1.0)
    actual = widen(gpus) * local * (accum + 1.0)
    per_candidate = np.asarray(params)[..., None, :]  # the same parameters for every candidate
    value = (throughput(per_candidate, widen(nodes), widen(gpus), local, accum)
             * efficiency(widen(noise_scale), limits_s.init_batch, actual))
    best = np.argmax(value, axis=-1)[..., None]
    goodput = np.where(fits, np.take_along_axis(value, best, axis=-1)[..., 0], 0.0)
    batch = np.where(fits, np.take_along_axis(actual, best, axis=-1)[..., 0], 0.0)
    return goodput, batch


def nodes_for(gpus, gpus_per_node) -> np.ndarray:
    """Nodes a gang of ``gpus`` GPUs spans when packed tightly."""
    return np.maximum(np.ceil(np.asarray(gpus, dtype=np.float64) / gpus_per_node - _EPS), 1.0)
