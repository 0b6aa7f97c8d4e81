"""Turn "ran for D seconds on N GPUs" into "needs S steps of kind K": shared by trace and generator.

A job's total steps are ``duration_s × steps_per_s(kind, reference GPU type, num_gpus)``, so the
job takes exactly its duration on the reference GPU type at its own GPU count.
"""

from __future__ import annotations

import numpy as np

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable


def check_reference_type(throughputs: ThroughputTable, reference_gpu_type: str, source: str) -> int:
    """Index of ``reference_gpu_type`` in the table; InputError listing the known types if absent."""
    try:
        return throughputs.gpu_types.index(reference_gpu_type)
    except ValueError:
        known = ", ".join(throughputs.gpu_types)
        raise InputError(
            source, f"unknown reference GPU type '{reference_gpu_type}' (known: {known})"
        ) from None


def runnable_kinds(
    throughputs: ThroughputTable, reference_gpu_type: str, source: str, num_gpus: int = 1
) -> np.ndarray:
    """Indices of the kinds with a finite, positive steps/s on ``num_gpus`` reference GPUs."""
    every_kind = np.arange(len(throughputs.kinds))
    rate = _rates_at(throughputs, reference_gpu_type, source, every_kind, np.full(1, num_gpus, np.int64))
    kinds = np.flatnonzero(np.isfinite(rate) & (rate > 0))
    if len(kinds) == 0 and num_gpus == 1:
        raise InputError(
            source, f"no job kind has a known throughput on one '{reference_gpu_type}' GPU"
        )
    return kinds


def draw_kinds(
    throughputs: ThroughputTable,
    reference_gpu_type: str,
    num_gpus: np.ndarray,
    rng: np.random.Generator,
    source: str,
) -> np.ndarray:
    """A kind for each job, uniform among the kinds that run on its GPU count of reference GPUs.

    One uniform draw per job, so a job's kind does not depend on which other jobs are kept.
    Where no kind is known at a job's GPU count, the kinds runnable on one GPU stand in.
    """
    num_gpus = np.asarray(num_gpus, dtype=np.int64)
    draw = rng.random(len(num_gpus))
    kind = np.empty(len(num_gpus), dtype=np.int64)
    single = runnable_kinds(throughputs, reference_gpu_type, source)
    for count in np.unique(num_gpus):
        choices = runnable_kinds(throughputs, reference_gpu_type, source, int(count))
        if len(choices) == 0:
            choices = single
        jobs = num_gpus == count
        kind[jobs] = choices[(draw[jobs] * len(choices)).astype(np.int64)]
    return kind


def steps_for_durations(
    throughputs: ThroughputTable,
    reference_gpu_type: str,
    kind: np.ndarray,
    num_gpus: np.ndarray,
    duration_s: np.ndarray,
    source: str,
) -> np.ndarray:
    """Steps that take ``duration_s`` on ``num_gpus`` reference GPUs; NaN where the kind cannot run there.

    The rate at a GPU count comes from ``throughputs.at_scales`` (which extrapolates beyond the
    measured scales). Where that rate is unknown, the scale-1 rate × ``num_gpus`` stands in
    (perfect linear scaling).
    """
    kind = np.asarray(kind, dtype=np.int64)
    num_gpus = np.asarray(num_gpus, dtype=np.int64)
    rate = _rates_at(throughputs, reference_gpu_type, source, kind, num_gpus)
    unknown = ~(np.isfinite(rate) & (rate > 0))
    if unknown.any():
        single = _rates_at(throughputs, reference_gpu_type, source, kind[unknown], np.ones(1, np.int64))
        rate[unknown] = single * num_gpus[unknown]
    return np.asarray(duration_s, dtype=np.float64) * rate


def _rates_at(
    throughputs: ThroughputTable, reference_gpu_type: str, source: str, kind: np.ndarray, num_gpus: np.ndarray
) -> np.ndarray:
    """steps/s of each ``kind`` on ``num_gpus`` (broadcast) reference GPUs, NaN where unknown."""
    type_index = check_reference_type(throughputs, reference_gpu_type, source)
    table = throughputs.at_scales(np.unique(num_gpus)) if len(num_gpus) else throughputs
    scale_index = np.searchsorted(np.asarray(table.scales), num_gpus)
    return table.steps_per_s[kind, type_index, scale_index].astype(np.float64)
