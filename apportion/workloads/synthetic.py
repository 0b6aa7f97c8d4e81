"""A seeded synthetic workload whose job sizes and durations follow the Philly trace.

Distributions (parameters from the stats in ../shared/traces/README.md, Philly trace, ATC'19):

- arrivals: Poisson at ``rate_per_hour`` (exponential gaps, mean 3600 / rate s); first job at 0;
- GPUs: 1, 2, 4, 8 with weights 76,627 : 1,818 : 1,870 : 1,643, Philly's counts of jobs with
  those sizes, renormalised over the jobs with ≤ 8 GPUs (the 2.4% larger ones are left out);
- duration: lognormal with median 1,144 s (mu = ln 1144) and p90 11,265 s
  (sigma = (ln 11265 − ln 1144) / z_0.9 ≈ 1.785), clipped to [60 s, 30 days];
- kind: uniform among kinds with a finite positive steps/s on one reference GPU;
- steps: duration × steps/s of the kind on ``num_gpus`` reference GPUs (as for traces).

``shape="gavel"`` draws GPUs and durations as Gavel's generator does instead
(apportion.workloads.gavel_shape), so that results can be set beside Gavel's simulator;
``shape="gavel-1gpu"`` is the same with every job on one GPU (Gavel's default). Arrivals,
kinds and steps are drawn as above in every shape. ``shape="pollux"`` is a workload of elastic
jobs shaped like Pollux's evaluation instead (apportion.workloads.elastic_workload).
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.arrivals import checked_size, poisson_arrivals
from apportion.workloads.conversion import check_reference_type, draw_kinds, steps_for_durations
from apportion.workloads.gavel_shape import gavel_durations, gavel_gpu_counts

GPU_COUNTS = np.array([1, 2, 4, 8])
PHILLY_JOBS_AT_GPU_COUNT = np.array([76_627, 1_818, 1_870, 1_643])
GPU_COUNT_PROBABILITIES = PHILLY_JOBS_AT_GPU_COUNT / PHILLY_JOBS_AT_GPU_COUNT.sum()

MEDIAN_DURATION_S = 1_144.0
P90_DURATION_S = 11_265.0
Z_90 = 1.2815515655446004  # standard normal 90th percentile
DURATION_MU = math.log(MEDIAN_DURATION_S)
DURATION_SIGMA = (math.log(P90_DURATION_S) - DURATION_MU) / Z_90
MIN_DURATION_S = 60.0
MAX_DURATION_S = 30 * 24 * 3600.0

SOURCE = "synthetic workload"
SHAPES = ("philly", "gavel", "gavel-1gpu", "pollux")  # the first is the default


def generate_workload(
    *,
    jobs: int,
    rate_per_hour: float,
    throughputs: ThroughputTable,
    reference_gpu_type: str = "v100",
    seed: int = 0,
    shape: str = "philly",
) -> JobTable:
    """``jobs`` jobs drawn with ``numpy.random.default_rng(seed)`` from the distributions of ``shape``."""
    n = checked_size(SOURCE, jobs, rate_per_hour)
    if shape not in SHAPES:
        raise InputError(SOURCE, f"unknown shape '{shape}' (known: {', '.join(SHAPES)})", field="shape")
    if shape == "pollux":
        from apportion.workloads.elastic_workload import generate_elastic_workload

        return generate_elastic_workload(jobs=jobs, rate_per_hour=rate_per_hour, seed=seed)
    check_reference_type(throughputs, reference_gpu_type, SOURCE)
    rng = np.random.default_rng(seed)

    submit = poisson_arrivals(rng, n, rate_per_hour)
    if shape == "philly":
        num_gpus = GPU_COUNTS[rng.choice(len(GPU_COUNTS), size=n, p=GPU_COUNT_PROBABILITIES)]
        duration = np.clip(rng.lognormal(DURATION_MU, DURATION_SIGMA, size=n), MIN_DURATION_S, MAX_DURATION_S)
    else:
        num_gpus = gavel_gpu_counts(rng, n, multi_gpu=shape == "gavel")
        duration = gavel_durations(rng, n)
    kind = draw_kinds(throughputs, reference_gpu_type, num_gpus, rng, SOURCE)
    steps = steps_for_durations(throughputs, reference_gpu_type, kind, num_gpus, duration, SOURCE)

    return JobTable.build(
        job_id=[f"job-{i:06d}" for i in range(1, n + 1)],
        submit_time_s=submit,
        kind_names=np.asarray(throughputs.kinds, dtype=object)[kind],
        num_gpus=num_gpus,
        total_steps=steps,
        kinds=throughputs.kinds,
    )
