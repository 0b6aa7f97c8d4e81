"""A seeded workload of elastic jobs shaped like Pollux's evaluation (OSDI'21, §5).

- 160 jobs by default, arriving as a Poisson process over 8 hours (20 an hour);
- the six built-in models in the proportions of Pollux's workload (its Table 1): 72% small
  (cifar10, ncf, half each), 20% medium (deepspeech2, bert, half each), 6% large (yolov3),
  2% extra large (imagenet);
- each job with the GPU count and batch size its user would pick, as in Pollux's generator:
  one of the configurations whose GPU count runs the job alone at 50-80% of ideal scaling
  (its time on one GPU ÷ its time on K GPUs ÷ K, each at the batch among the validated ones,
  M0·2^i, that finishes soonest) within 12 hours, uniformly at random; a model with no such
  configuration runs on one GPU;
- each may be given 1 GPU to as many as its largest batch has micro-batches (at most 64),
  and finishes at its model's target.

Pollux drew arrival times from the Philly trace; these are Poisson, so bursts differ.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from apportion.core.elastic import ElasticJobs, ElasticKinds, time_to_target_s
from apportion.core.jobs import JobTable
from apportion.workloads.arrivals import checked_size, poisson_arrivals
from apportion.workloads.elastic_kinds import builtin_elastic_kinds

SOURCE = "elastic workload"
DEFAULT_JOBS = 160
DEFAULT_RATE_PER_HOUR = 20.0  # 160 jobs over 8 hours
MODEL_MIX = {"cifar10": 0.36, "ncf": 0.36, "deepspeech2": 0.10, "bert": 0.10, "yolov3": 0.06, "imagenet": 0.02}
USER_GPU_COUNTS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48)  # the sizes Pollux's users pick among
USER_SCALING = (0.5, 0.8)  # the fraction of ideal scaling a user's pick reaches
USER_MAX_HOURS = 12.0
REFERENCE_TYPE = "t4"  # the GPUs the models were measured on: users tune their jobs there
REFERENCE_GPUS_PER_NODE = 4
MAX_ELASTIC_GPUS = 64


def generate_elastic_workload(*, jobs: int = DEFAULT_JOBS, rate_per_hour: float = DEFAULT_RATE_PER_HOUR,
                              seed: int = 0, kinds: ElasticKinds | None = None) -> JobTable:
    """``jobs`` elastic jobs drawn with ``numpy.random.default_rng(seed)``."""
    n = checked_size(SOURCE, jobs, rate_per_hour)
    kinds = kinds or builtin_elastic_kinds()
    rng = np.random.default_rng(seed)
    submit = poisson_arrivals(rng, n, rate_per_hour)
    names = list(MODEL_MIX)
    weights = np.array([MODEL_MIX[m] for m in names])
    model = np.array([kinds.index(m) for m in names])[rng.choice(len(names), size=n, p=weights / weights.sum())]
    choices = {k: user_configurations(kinds, k) for k in np.unique(model).tolist()}
    pick = rng.random(n)
    num_gpus = np.empty(n, dtype=np.int64)
    batch = np.empty(n)
    for row, k in enumerate(model.tolist()):
        options = choices[k]
        num_gpus[row], batch[row] = options[min(int(pick[row] * len(options)), len(options) - 1)]
    max_gpus = np.minimum(kinds.max_useful_gpus(model), MAX_ELASTIC_GPUS)
    return JobTable.build(
        job_id=[f"{kinds.names[k]}-{i}" for i, k in enumerate(model.tolist())],
        submit_time_s=submit,
        kind_names=np.asarray(kinds.names, dtype=object)[model],
        num_gpus=num_gpus,
        total_steps=kinds.target_examples[model],
        kinds=kinds.names,
        elastic=ElasticJobs(kinds, np.ones(n, dtype=np.int64), max_gpus, batch),
    )


def user_configurations(kinds: ElasticKinds, kind: int) -> list[tuple[int, float]]:
    """(GPUs, batch) a user tuning ``kind`` by hand on the reference GPUs might pick (see the module)."""
    return _user_configurations(kinds, kind)


@lru_cache(maxsize=64)
def _user_configurations(kinds: ElasticKinds, kind: int) -> list[tuple[int, float]]:
    reference = kinds.gpu_types.index(REFERENCE_TYPE) if REFERENCE_TYPE in kinds.gpu_types else 0
    batches = []
    batch = float(kinds.init_batch[kind])
    while batch <= kinds.max_batch[kind] + 1e-9:
        batches.append(batch)
        batch *= 2
    best: dict[int, tuple[float, float]] = {}
    for gpus in USER_GPU_COUNTS:
        if gpus * kinds.min_local_batch[kind] > kinds.max_batch[kind]:
            break
        times = [(time_to_target_s(kinds, kind, reference, gpus, b, REFERENCE_GPUS_PER_NODE), b)
                 for b in batches if b / gpus >= kinds.min_local_batch[kind]]
        if times:
            best[gpus] = min(times)
    one_gpu_s, one_gpu_batch = best[1]
    low, high = USER_SCALING
    picks = [(gpus, b) for gpus, (t, b) in best.items()
             if gpus > 1 and t < USER_MAX_HOURS * 3600 and low < one_gpu_s / t / gpus < high]
    return picks or [(1, one_gpu_batch)]
