"""Elastic jobs on the server: what each has measured, its fitted step-time model, and the view a
policy that sizes jobs is given of them.

A progress report of an elastic job carries, besides its steps/s, the gradient noise scale it
measures and how its step was made (replicas, micro-batch, micro-batches, seconds spent
synchronising). Each report becomes an observation of the job at its size (smoothed, one per
type, replicas, nodes and micro-batch), and when the observations change by more than
``REFIT_CHANGE`` the job's step-time model on that type is fitted again to all of them
(``apportion.core.goodput_fit.fit_step_params``, the prior being its built-in kind's model when
the job file names one). Observations, noise scale and fits live in the state file, so a
restarted server keeps them.

Each round, :meth:`ElasticModels.view` builds what ``sim/elastic.py`` gives a policy: an
``ElasticView`` with one kind per job (its own model on every slot type: fitted where it has
run, else its kind's prior, else Pollux's starting point). A fixed-size job in the same round
is a job of one size whose model runs at its measured steps/s, so a policy that sizes jobs
schedules both. The batch is the job's own at every size (``serve/jobs/elastic_spec.py``), unless its
target is in examples and it allows larger ones (``elastic.max_batch_size``): then, once it has
reported a noise scale, its model's batches run from M0 to that largest, the policy picks the
best for each allocation, and the job is started with it (``serve/estimates/elastic_batch.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from apportion.core.elastic import ElasticKinds, ElasticView
from apportion.core.errors import InputError
from apportion.core.goodput import NUM_PARAMS
from apportion.core.goodput_fit import StepConfig, StepObservations, default_prior, fit_step_params
from apportion.serve.jobs.elastic_spec import ElasticSpec
from apportion.serve.jobs.records import JobRecord
from apportion.serve.store.state import StateStore

SMOOTHING = 0.2  # weight of the newest report in an observation
REFIT_CHANGE = 0.1  # refit when an observation is new, or its step time moved by more than this
UNMEASURED_NOISE = 1e9  # a noise scale never reported: every example counts fully (E(M) = 1)
_FLOOR = 1e-8


@dataclass(frozen=True)
class StepReport:
    """How one elastic job's step was made, as a progress report says it."""

    steps_per_s: float  # whole steps (every micro-batch and the synchronisation)
    noise_scale: float | None = None  # gradient noise scale, in examples
    sync_s: float | None = None  # seconds of a step spent synchronising gradients
    micro_batch: float | None = None  # examples in one replica's micro-batch
    micro_batches: int | None = None  # micro-batches each replica runs a step (1: no accumulation)
    nodes: int | None = None  # nodes the replicas span


class ElasticModels:
    """Every elastic job's observations, noise scale and fitted models, kept in the state file."""

    def __init__(self, store: StateStore, gpu_types: tuple[str, ...], capacity: dict[str, int]) -> None:
        self.store = store
        self.gpu_types = gpu_types
        self.capacity = capacity
        self.version = 0  # bumped when a model is refitted: a policy's allocation may be stale
        self._steps: dict[tuple[int, str], dict[StepConfig, list[float]]] = {}
        for r in store.elastic_steps():
            key = StepConfig.of(nodes=r.nodes, gpus=r.gpus, local_batch=r.local_batch)
            # step time, sync time, reports, and the step time when the model was last fitted
            self._steps.setdefault((r.job_id, r.gpu_type), {})[key] = [r.step_s, r.sync_s, r.samples,
                                                                            r.step_s]
        self._noise: dict[int, float | None] = {}
        self._params: dict[int, dict[str, list[float]]] = {}
        for job_id, (noise, params) in store.elastic_models().items():
            self._noise[job_id] = noise
            self._params[job_id] = params
        self._kinds: ElasticKinds | None = None
        self._kinds_key: bytes | None = None

    # what the jobs report ---------------------------------------------------------------

    def noise_scale(self, job_id: int) -> float | None:
        return self._noise.get(job_id)

    def params(self, job_id: int, gpu_type: str) -> list[float] | None:
        """The step-time parameters fitted to job ``job_id``'s steps on ``gpu_type`` (None: none yet)."""
        return self._params.get(job_id, {}).get(gpu_type)

    def observations(self, job_id: int, gpu_type: str) -> StepObservations | None:
        return StepObservations.seen(self._steps.get((job_id, gpu_type)))

    def record(self, row: JobRecord, spec: ElasticSpec, report: StepReport, now: float) -> None:
        """Fold one progress report of an elastic job's live attempt in; refit its model when it moved."""
        job_id, gpu_type = int(row.id), row.gpu_type
        replicas = max(1, len(row.slot_list))
        changed_noise = report.noise_scale is not None and report.noise_scale != self._noise.get(job_id)
        if report.noise_scale is not None:
            self._noise[job_id] = report.noise_scale
        refit = False
        if gpu_type and report.steps_per_s > 0:
            whole_s = 1.0 / report.steps_per_s
            micro_batches = max(1, report.micro_batches or 1)
            local = report.micro_batch or math.ceil(spec.batch_size / replicas / micro_batches)
            sync = min(max(report.sync_s or 0.0, 0.0), whole_s) if replicas > 1 else 0.0
            compute = max(whole_s - sync, _FLOOR) / micro_batches
            step = compute + sync  # one micro-batch and the synchronisation (they do not overlap in such a job)
            key = StepConfig.of(nodes=max(1, report.nodes or 1), gpus=replicas, local_batch=local)
            seen = self._steps.setdefault((job_id, gpu_type), {})
            old = seen.get(key)
            if old is None:
                seen[key] = [step, sync, 1, step]
                refit = True
            else:
                new_step = (1 - SMOOTHING) * old[0] + SMOOTHING * step
                new_sync = (1 - SMOOTHING) * old[1] + SMOOTHING * sync
                refit = abs(new_step - old[3]) > REFIT_CHANGE * old[3] or self.params(job_id, gpu_type) is None
                seen[key] = [new_step, new_sync, old[2] + 1, new_step if refit else old[3]]
            self.store.put_elastic_step(job_id, gpu_type, key.gpus, key.nodes, key.local_batch, seen[key][0],
                                        seen[key][1], int(seen[key][2]), now)
        if refit:
            self._refit(job_id, gpu_type, spec)
        if refit or changed_noise:
            self.store.put_elastic_model(job_id, self._noise.get(job_id), self._params.get(job_id, {}), now)

    def _refit(self, job_id: int, gpu_type: str, spec: ElasticSpec) -> None:
        observations = self.observations(job_id, gpu_type)
        fit = fit_step_params(observations, prior=prior_params(spec, gpu_type))
        self._params.setdefault(job_id, {})[gpu_type] = [float(v) for v in fit.params]
        self.version += 1

    def forget(self, job_id: int) -> None:
        """Drop a finished job's models from memory (the state file keeps them)."""
        self._noise.pop(job_id, None)
        self._params.pop(job_id, None)
        for key in [k for k in self._steps if k[0] == job_id]:
            del self._steps[key]

    # what a policy sees -----------------------------------------------------------------

    def view(self, table: dict, rows: np.ndarray, rates: np.ndarray, live: dict[int, dict],
             nodes: dict[int, int] | None = None, gpus_per_node: dict[str, int] | None = None) -> ElasticView:
        """The elastic view of the round's job rows ``rows`` of ``table`` (one kind per row, in order);
        ``rates`` [n, T] the steps/s of each at its own size (a fixed-size job's model); ``nodes`` row ->
        the nodes a live job's slots lie on (None, or a row not in it: one, this machine);
        ``gpus_per_node`` the slots of each type on its largest node (None, or a type not in it: all of
        the type's, this machine's one node)."""
        n, num_types = len(rows), len(self.gpu_types)
        params = np.full((n, num_types, NUM_PARAMS), np.nan)
        init_batch = np.ones(n)
        max_batch = np.ones(n)
        min_local = np.ones(n)
        max_local = np.ones(n)
        min_gpus = np.ones(n, dtype=np.int64)
        max_gpus = np.ones(n, dtype=np.int64)
        batch = np.ones(n)
        noise = np.full(n, UNMEASURED_NOISE)
        gpus_now = np.zeros(n, dtype=np.int64)
        nodes_now = np.zeros(n, dtype=np.int64)  # 0: not running
        restarts = np.zeros(n, dtype=np.int64)
        allowed_types = table["gpu_types"]
        for j, i in enumerate(rows.tolist()):
            job_id = int(table["id"][i])
            allowed = allowed_types[i].split(",") if allowed_types[i] else None
            row = live.get(i)
            gpus_now[j] = len(row["slot_list"]) if row is not None else 0
            nodes_now[j] = (nodes or {}).get(i, 1) if gpus_now[j] else 0
            restarts[j] = max(int(table["attempt"][i]) - 1, 0)
            if table["elastic"][i]:
                spec = ElasticSpec.from_dict(json.loads(table["elastic"][i]))
                for t, gpu_type in enumerate(self.gpu_types):
                    if allowed is None or gpu_type in allowed:
                        params[j, t] = self.params(job_id, gpu_type) or prior_params(spec, gpu_type) or _DEFAULT
                # the batch is the job's own at every size: the model's smallest and largest batch both
                init_batch[j] = max_batch[j] = batch[j] = spec.batch_size
                min_local[j], max_local[j] = spec.min_local_batch, spec.largest_local_batch
                min_gpus[j], max_gpus[j] = spec.min_gpus, spec.max_gpus
                measured = self.noise_scale(job_id)
                if measured is not None and math.isfinite(measured) and measured > 0:
                    noise[j] = measured
                    if spec.chooses_batch:  # a target in examples: any batch from M0 to its largest, once
                        init_batch[j], max_batch[j] = spec.m0, spec.largest_batch  # its efficiency is measured
            else:  # one size; a step of `gpus` examples, one a slot, at its measured speed on each type
                gpus = int(table["gpus"][i])
                params[j, :, 2:6] = _FLOOR
                params[j, :, 6] = 1.0
                params[j, :, 1] = 0.0
                with np.errstate(divide="ignore"):
                    params[j, :, 0] = np.where(rates[j] > 0, 1.0 / np.maximum(rates[j], 1e-300), np.nan)
                init_batch[j] = max_batch[j] = batch[j] = gpus
                min_gpus[j] = max_gpus[j] = gpus
        key = b"".join(np.ascontiguousarray(a).tobytes() for a in (params, init_batch, max_batch, min_local, max_local))
        if key != self._kinds_key:  # a new object only when a model changed (policies cache by identity)
            self._kinds = ElasticKinds(
                names=tuple(str(int(table["id"][i])) for i in rows.tolist()), gpu_types=self.gpu_types,
                step_params=params, init_batch=init_batch, max_batch=max_batch, min_local_batch=min_local,
                max_local_batch=max_local, target_examples=np.asarray(table["total_steps"], dtype=np.float64)[rows] * batch,
                noise_fraction=np.zeros((n, 1)), noise_scale=noise[:, None].copy())
            self._kinds_key = key
        per_node = np.array([max(1, (gpus_per_node or {}).get(t, self.capacity[t])) for t in self.gpu_types],
                            dtype=np.int64)
        return ElasticView(kinds=self._kinds, min_gpus=min_gpus, max_gpus=max_gpus, batch_size=batch,
                           noise_scale=noise, gpus_now=gpus_now, restarts=restarts, gpus_per_node=per_node,
                           nodes_now=nodes_now)


_DEFAULT = [float(v) for v in default_prior(StepObservations.of(nodes=[1], gpus=[1], local_batch=[1], step_time_s=[1],
                                                                 sync_time_s=[0]))]


def prior_params(spec: ElasticSpec, gpu_type: str) -> list[float] | None:
    """The step-time model of the job's built-in kind on ``gpu_type``, or None (no kind, or a type it has no model for)."""
    if spec.model is None:
        return None
    from apportion.workloads.elastic_kinds import builtin_elastic_kinds

    try:
        kinds = builtin_elastic_kinds((gpu_type,))
    except InputError:  # a slot type the catalogs do not know (cpu, say): no prior there
        return None
    values = kinds.step_params[kinds.index(spec.model), 0]
    return None if np.isnan(values).any() else [float(v) for v in values]
