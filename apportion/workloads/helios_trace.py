"""SenseTime's Helios trace (``cluster_log.csv`` of Earth, Saturn, Uranus or Venus) read as it ships.

Header ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue``
(S-Lab-System-Group/HeliosData). ``submit_time`` (wall clock) counts from the earliest GPU job,
``duration`` (seconds it ran) is ``duration_s``, ``gpu_num`` is ``num_gpus``, ``cpu_num`` is ``cpus``,
``vc`` (the virtual cluster) is ``queue``, ``state`` becomes ``status``. Helios's own ``queue`` column
is the time a job waited, which a simulation recomputes: it is dropped, as are ``node_num`` and the
start and end times. CPU-only jobs (``gpu_num`` 0) and jobs that ran for 0 s are left out, counted.
"""

from __future__ import annotations

import numpy as np

from apportion.core.errors import InputError
from apportion.workloads.trace_formats import CommonRows, common_rows, numbers_of, refuse_where, seconds_of_times

REQUIRED = ("job_id", "gpu_num", "submit_time", "duration")
RENAMED = {"submit_time_s": "submit_time", "duration_s": "duration", "num_gpus": "gpu_num", "queue": "vc",
           "status": "state", "cpus": "cpu_num"}  # read as -> in the file
STATUSES = {"COMPLETED": "completed", "CANCELLED": "killed", "FAILED": "failed", "TIMEOUT": "failed",
            "NODE_FAIL": "failed"}


def from_helios(columns: dict[str, np.ndarray], lines: np.ndarray, source: str) -> CommonRows:
    """The GPU jobs of a Helios ``cluster_log.csv`` in the common schema."""
    for name in REQUIRED:
        if name not in columns:
            raise InputError(source, "missing required column of a Helios cluster_log.csv", line=1, field=name)
    gpus = numbers_of(columns["gpu_num"], lines, source, "gpu_num")
    refuse_where((np.isnan(gpus) | (gpus < 0) | (gpus != np.floor(gpus))), columns["gpu_num"], lines, source,
           "gpu_num", "must be a whole number >= 0, got '{value}'")
    duration = numbers_of(columns["duration"], lines, source, "duration", empty=0.0)
    refuse_where(duration < 0, columns["duration"], lines, source, "duration", "must be >= 0, got '{value}'")
    submit = seconds_of_times(columns["submit_time"], lines, source, "submit_time")
    cpu_only = gpus == 0
    never_ran = ~cpu_only & (duration <= 0)
    kept = ~cpu_only & ~never_ran
    extra = {}
    if "cpu_num" in columns:
        extra["cpus"] = numbers_of(columns["cpu_num"], lines, source, "cpu_num")
    for name, own in (("user", "user"), ("queue", "vc")):
        if own in columns:
            extra[name] = columns[own]
    if "state" in columns:
        extra["status"] = np.array([STATUSES.get(s, s.lower()) for s in columns["state"].tolist()], dtype=object)
    return common_rows(source, kept, lines, columns["job_id"], submit, duration, gpus,
                       {"CPU-only jobs (gpu_num 0)": int(cpu_only.sum()),
                        "jobs that ran 0 s": int(never_ran.sum())}, RENAMED, **extra)

