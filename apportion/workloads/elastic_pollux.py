"""Pollux's own simulator workloads as elastic jobs, to replay them beside Pollux's published figures.

Pollux's artifact (petuum/adaptdl, branch osdi21-artifact, ``simulator/workloads/workload-N.csv``)
gives one row a job: ``name``, ``time`` (submit, seconds), ``application`` (one of its six models,
apportion's built-in elastic kinds of the same names), ``num_replicas`` and ``batch_size`` (what
its user would run it at: the GPU count and batch fixed-size policies keep). Each job here is an
elastic job of that kind with its user's GPUs and batch, limits 1 to as many GPUs as its largest
batch has micro-batches (at most 64, as Pollux's simulator caps them), and its kind's target.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from apportion.core.elastic import ElasticJobs
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.workloads.elastic_kinds import builtin_elastic_kinds
from apportion.workloads.elastic_workload import MAX_ELASTIC_GPUS

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def read_pollux_workload(path: Path | str, gpu_types: tuple[str, ...] = ("t4",)) -> JobTable:
    """The jobs of one of Pollux's workload files; InputError naming the line and field of a bad value."""
    source = str(path)
    kinds = builtin_elastic_kinds(tuple(gpu_types))
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(source, f"missing column(s) {', '.join(missing)} (Pollux's columns: {', '.join(COLUMNS)})")
        names, submit, kind, gpus, batch = [], [], [], [], []
        for line, row in enumerate(reader, start=2):
            def number(field: str, whole: bool) -> float:
                text = (row.get(field) or "").strip()
                try:
                    value = float(text)
                except ValueError:
                    raise InputError(source, f"must be a number, got '{text}'", line=line, field=field) from None
                if not np.isfinite(value) or value < 0 or (whole and (value != int(value) or value < 1)):
                    wanted = "a whole number >= 1" if whole else "a number >= 0"
                    raise InputError(source, f"must be {wanted}, got '{text}'", line=line, field=field)
                return value

            application = (row.get("application") or "").strip()
            if application not in kinds.names:
                raise InputError(source, f"unknown application '{application}' (known: {', '.join(kinds.names)})",
                                 line=line, field="application")
            names.append((row.get("name") or "").strip() or f"job-{line - 2}")
            submit.append(number("time", whole=False))
            kind.append(kinds.index(application))
            gpus.append(int(number("num_replicas", whole=True)))
            batch.append(number("batch_size", whole=True))
    if not names:
        raise InputError(source, "no jobs")
    kind_arr = np.array(kind, dtype=np.int64)
    num_gpus = np.array(gpus, dtype=np.int64)
    max_gpus = np.maximum(np.minimum(kinds.max_useful_gpus(kind_arr), MAX_ELASTIC_GPUS), num_gpus)
    batch_arr = np.clip(np.array(batch), kinds.init_batch[kind_arr], kinds.max_batch[kind_arr])
    order = np.argsort(np.array(submit), kind="stable")
    return JobTable.build(
        job_id=[names[i] for i in order], submit_time_s=np.array(submit)[order],
        kind_names=np.asarray(kinds.names, dtype=object)[kind_arr[order]], num_gpus=num_gpus[order],
        total_steps=kinds.target_examples[kind_arr[order]], kinds=kinds.names,
        elastic=ElasticJobs(kinds, np.ones(len(names), dtype=np.int64), max_gpus[order], batch_arr[order]),
    )
