"""Alibaba's 2023 GPU cluster trace (``openb_pod_list*.csv``, cluster-trace-gpu-v2023) read as it ships.

Header ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time`` (alibaba/clusterdata). Each pod is a job: ``name`` is ``job_id``, ``creation_time``
(seconds) counts from the earliest GPU pod, ``deletion_time - scheduled_time`` is ``duration_s``,
``num_gpu`` is ``num_gpus``, ``cpu_milli / 1000`` is ``cpus``, ``memory_mib / 1024`` is ``memory_gib``,
``gpu_spec`` (empty = any; ``|`` between alternatives) is ``gpu_type``, ``qos`` is ``queue``,
``pod_phase`` becomes ``status``.

apportion gives a job whole GPUs. A pod asking a share of one GPU (``num_gpu`` 1, ``gpu_milli`` under
1000) is read as a one-GPU job, counted in the notes: it holds its GPU alone, which is what the
whole-GPU policies can model (the load it puts is overstated by the unused share). A pod asking a
share of each of several GPUs cannot be modelled so and is refused, naming its line. CPU-only pods
(``num_gpu`` 0) and pods never scheduled or never deleted are left out, counted.
"""

from __future__ import annotations

import numpy as np

from apportion.core.errors import InputError
from apportion.workloads.trace_formats import CommonRows, common_rows, numbers_of, refuse_where

REQUIRED = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")
RENAMED = {"job_id": "name", "submit_time_s": "creation_time", "duration_s": "deletion_time", "num_gpus": "num_gpu",
           "cpus": "cpu_milli", "memory_gib": "memory_mib", "gpu_type": "gpu_spec", "queue": "qos",
           "status": "pod_phase"}  # read as -> in the file
STATUSES = {"Succeeded": "completed", "Failed": "failed", "Running": "running", "Pending": "pending"}
WHOLE_GPU_MILLI = 1000


def from_pod_list(columns: dict[str, np.ndarray], lines: np.ndarray, source: str) -> CommonRows:
    """The GPU pods of an ``openb_pod_list*.csv`` in the common schema."""
    for name in REQUIRED:
        if name not in columns:
            raise InputError(source, "missing required column of an openb_pod_list file", line=1, field=name)
    gpus = numbers_of(columns["num_gpu"], lines, source, "num_gpu", empty=0.0)
    refuse_where((gpus < 0) | (gpus != np.floor(gpus)), columns["num_gpu"], lines, source, "num_gpu",
                 "must be a whole number >= 0, got '{value}'")
    milli = numbers_of(columns["gpu_milli"], lines, source, "gpu_milli", empty=0.0)
    refuse_where((milli < 0) | (milli > WHOLE_GPU_MILLI), columns["gpu_milli"], lines, source, "gpu_milli",
                 f"must be from 0 to {WHOLE_GPU_MILLI} (thousandths of a GPU), got '{{value}}'")
    refuse_where((gpus > 1) & (milli < WHOLE_GPU_MILLI), columns["gpu_milli"], lines, source, "gpu_milli",
                 "a share ('{value}' thousandths) of each of several GPUs cannot be modelled: apportion gives a job "
                 "whole GPUs; leave the row out or make it gpu_milli 1000")
    created = numbers_of(columns["creation_time"], lines, source, "creation_time")
    refuse_where(np.isnan(created), columns["creation_time"], lines, source, "creation_time", "empty creation time")
    scheduled = numbers_of(columns["scheduled_time"], lines, source, "scheduled_time")
    deleted = numbers_of(columns["deletion_time"], lines, source, "deletion_time")
    duration = deleted - scheduled
    gpu_pod = gpus > 0
    unfinished = gpu_pod & (np.isnan(duration) | (scheduled <= 0))
    refuse_where(gpu_pod & ~unfinished & (duration < 0), columns["deletion_time"], lines, source, "deletion_time",
                 "'{value}' is before the pod's scheduled_time")
    never_ran = gpu_pod & ~unfinished & (duration == 0)
    kept = gpu_pod & ~unfinished & ~never_ran
    shared = kept & (milli < WHOLE_GPU_MILLI)
    extra: dict[str, np.ndarray] = {}
    if "cpu_milli" in columns:
        extra["cpus"] = numbers_of(columns["cpu_milli"], lines, source, "cpu_milli") / 1000
    if "memory_mib" in columns:
        extra["memory_gib"] = numbers_of(columns["memory_mib"], lines, source, "memory_mib") / 1024
    for name, own in (("gpu_type", "gpu_spec"), ("queue", "qos")):
        if own in columns:
            extra[name] = columns[own]
    if "pod_phase" in columns:
        extra["status"] = np.array([STATUSES.get(s, s.lower()) for s in columns["pod_phase"].tolist()], dtype=object)
    rows = common_rows(source, kept, lines, columns["name"], created, duration, gpus,
                       {"CPU-only pods (num_gpu 0)": int((~gpu_pod).sum()),
                        "pods never scheduled or not yet deleted": int(unfinished.sum()),
                        "pods that ran 0 s": int(never_ran.sum())}, RENAMED, **extra)
    if shared.any():
        rows.notes.append(f"{int(shared.sum())} pods asked for a share of one GPU (gpu_milli under 1000); "
                          "each is read as a job holding one whole GPU")
    return rows
