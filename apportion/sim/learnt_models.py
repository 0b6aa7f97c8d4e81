"""Elastic jobs' step-time models learnt online in the simulator, as Pollux and the server learn them.

With ``SimConfig.learn_models`` a policy is not given each job's true model: it is given, per
job and GPU type, the model fitted to the steps the job has made there (``fit_step_params``
with no prior, as ``serve/estimates/elastic.py`` fits a job that names no built-in kind), and before any
step there Pollux's starting point (``default_prior``, the server's too). Each configuration a
job runs at (GPU type, nodes, GPUs, micro-batch) is one observation, of the step time and sync
time its true model gives; the simulator's steps are exact, so a configuration is fitted once,
when first seen. A job may be given at most ``GROWTH`` times the most GPUs it has run on (Pollux's
rule is twice; one that never ran: its min_gpus). The gradient noise scale is not learnt: a job reports it
as it trains, and the simulator knows the true one at each point of its progress.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from apportion.core.elastic import ElasticKinds
from apportion.core.goodput import compute_time_s, step_time_s
from apportion.core.goodput_fit import StepConfig, StepObservations, default_prior, fit_step_params

# a job may grow to this many times the most GPUs it has run on. Pollux's rule is 2; on Pollux's own
# workloads 4 finishes them 1-5% sooner (two restarts from 1 to 16 GPUs, not four; docs/goodput.md)
GROWTH = 4
REFIT_TOLERANCE = 1e-2  # a new configuration timed within 1% (log) by the model fitted so far is not refitted


class LearntModels:
    """Every job's observed steps and fitted step-time model, as one kind a job (``kinds``, by row)."""

    def __init__(self, true_kinds: ElasticKinds, kind: np.ndarray, *, growth: int | None = None) -> None:
        """``true_kinds``: the models the jobs really train; ``kind`` [n]: each job's kind in it;
        ``growth``: how many times the most GPUs a job has run on it may be given (``GROWTH``)."""
        self.growth = GROWTH if growth is None else int(growth)
        prior = default_prior(StepObservations.of(nodes=[1], gpus=[1], local_batch=[1], step_time_s=[1],
                                                  sync_time_s=[0]))
        known = ~np.isnan(true_kinds.step_params[kind][..., 0])  # [n, T]: a type the job can run on
        params = np.where(known[..., None], prior, np.nan)
        self.kinds = ElasticKinds(
            names=tuple(str(row) for row in range(len(kind))), gpu_types=true_kinds.gpu_types,
            step_params=params, init_batch=true_kinds.init_batch[kind], max_batch=true_kinds.max_batch[kind],
            min_local_batch=true_kinds.min_local_batch[kind], max_local_batch=true_kinds.max_local_batch[kind],
            target_examples=true_kinds.target_examples[kind], noise_fraction=true_kinds.noise_fraction[kind],
            noise_scale=true_kinds.noise_scale[kind])
        self.largest_gpus = np.zeros(len(kind), dtype=np.int64)  # the most GPUs each job has run on
        self.fits = 0
        self._fits_of: dict[tuple[int, int], int] = {}  # (row, type): times that model was fitted
        self._seen: dict[tuple[int, int], dict[StepConfig, tuple[float, float]]] = {}

    def max_gpus(self, rows: np.ndarray, min_gpus: np.ndarray, max_gpus: np.ndarray) -> np.ndarray:
        """[rows] the most GPUs each job may be given: ``growth`` times the most it has run on, within its limits."""
        return np.clip(self.growth * self.largest_gpus[rows], min_gpus, max_gpus)

    def fits_of(self, rows: np.ndarray, gpu_type: np.ndarray) -> np.ndarray:
        """[rows] how many times each job's model on its type has been fitted."""
        return np.array([self._fits_of.get((int(r), int(t)), 0) for r, t in zip(rows.tolist(), gpu_type.tolist())],
                        dtype=np.int64)

    def observations(self, row: int, gpu_type: int) -> StepObservations | None:
        """What job ``row`` has been seen to do on type ``gpu_type`` (None: it never ran there)."""
        return StepObservations.seen(self._seen.get((row, gpu_type)))

    def observe(self, rows: np.ndarray, gpu_type: np.ndarray, nodes: np.ndarray, gpus: np.ndarray,
                local_batch: np.ndarray, step_time_s: np.ndarray, sync_time_s: np.ndarray) -> None:
        """Jobs ``rows`` ran a step of ``step_time_s`` (``sync_time_s`` of it synchronising) at these
        configurations: fit again each job whose configuration is new on its type."""
        np.maximum.at(self.largest_gpus, rows, gpus.astype(np.int64))
        refit = set()
        for j, row in enumerate(rows.tolist()):
            key = StepConfig.of(nodes=nodes[j], gpus=gpus[j], local_batch=local_batch[j])
            t = int(gpu_type[j])
            seen = self._seen.setdefault((row, t), {})
            if key not in seen:
                predicted_already = bool(seen) and self._predicts(self.kinds.step_params[row, t], key,
                                                                  step_time_s[j], sync_time_s[j])
                seen[key] = (float(step_time_s[j]), float(sync_time_s[j]))
                if not predicted_already:
                    refit.add((row, t))
        if not refit:
            return
        params = self.kinds.step_params.copy()
        for row, t in sorted(refit):
            params[row, t] = fit_step_params(self.observations(row, t)).params
            self._fits_of[row, t] = self._fits_of.get((row, t), 0) + 1
        self.fits += len(refit)
        self.kinds = replace(self.kinds, step_params=params)  # a new object: policies cache tables by identity

    @staticmethod
    def _predicts(params: np.ndarray, key: StepConfig, step: float, sync: float) -> bool:
        """Whether a fitted model already times a new configuration's step and compute within
        ``REFIT_TOLERANCE``: a refit would find the same model, so it is not made."""
        step_p = float(step_time_s(params, key.nodes, key.gpus, key.local_batch))
        compute_p = float(compute_time_s(params, key.local_batch))
        compute = max(step - sync, 1e-12)
        return (abs(math.log(step_p / step)) <= REFIT_TOLERANCE
                and abs(math.log(compute_p / compute)) <= REFIT_TOLERANCE)
