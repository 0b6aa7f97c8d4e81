"""Elastic jobs in a trace CSV: rows naming an elastic kind, its GPU limits, batch and target.

A trace is elastic when its header has any of ``ELASTIC_COLUMNS``; then every row is an
elastic job. ``job_id``, ``submit_time_s``, ``kind`` (one of the built-in elastic kinds) and
``num_gpus`` (the GPU count its user asked for, which fixed-size policies keep) are required;
``min_gpus`` (default 1), ``max_gpus`` (default: as many as its largest batch has
micro-batches, at most 64), ``batch_size`` (its user's batch, default the kind's M0),
``target_examples`` (efficiency-weighted examples that finish it, default the kind's target),
``priority``, ``user`` and ``queue`` are optional; ``duration_s`` is ignored. See
docs/workloads.md.
"""

from __future__ import annotations

import numpy as np

from apportion.core.elastic import ElasticJobs, ElasticKinds
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.limits import MAX_GPUS, MAX_STEPS
from apportion.workloads.elastic_kinds import builtin_elastic_kinds
from apportion.workloads.elastic_workload import MAX_ELASTIC_GPUS

ELASTIC_COLUMNS = ("min_gpus", "max_gpus", "batch_size", "target_examples")
ELASTIC_REQUIRED = ("job_id", "submit_time_s", "kind", "num_gpus")


def elastic_jobs_from_columns(
    columns: dict[str, np.ndarray], lines: np.ndarray, source: str, *, numbers, kinds: ElasticKinds | None = None,
) -> dict:
    """The elastic columns of a parsed trace, checked: kind, GPU counts and limits, batch, target.

    ``numbers(field, optional)`` parses a numeric column as the trace reader does its own.
    InputError naming the line and field of the first bad value.
    """
    kinds = kinds or builtin_elastic_kinds()
    n = len(lines)

    def fail(bad: np.ndarray, field: str, message) -> None:
        rows = np.flatnonzero(bad)
        if len(rows):
            row = int(rows[0])
            text = message(row) if callable(message) else message.replace("{value}", str(columns[field][row]))
            raise InputError(source, text, line=int(lines[row]), field=field)

    names = columns["kind"].astype(str)
    index = {k: i for i, k in enumerate(kinds.names)}
    kind = np.array([index.get(k, -1) for k in names.tolist()], dtype=np.int64)
    fail(kind < 0, "kind", "unknown elastic job kind '{value}' (known: " + ", ".join(kinds.names) + ")")
    safe = np.maximum(kind, 0)

    def whole(field: str, default: np.ndarray) -> np.ndarray:
        given = numbers(field, optional=True) if field in columns else np.full(n, np.nan)
        fail(~np.isnan(given) & ((given != np.round(given)) | (given < 1) | (given > MAX_GPUS)), field,
             f"must be a whole number from 1 to {MAX_GPUS:,} (2**20), got '{{value}}'")
        return np.where(np.isnan(given), default, given).astype(np.int64)

    num_gpus = numbers("num_gpus")
    fail((num_gpus != np.round(num_gpus)) | (num_gpus < 1) | (num_gpus > MAX_GPUS), "num_gpus",
         f"must be a whole number from 1 to {MAX_GPUS:,} (2**20), got '{{value}}'")
    num_gpus = num_gpus.astype(np.int64)
    min_gpus = whole("min_gpus", np.ones(n))
    fail(min_gpus > num_gpus, "min_gpus", lambda r: f"{min_gpus[r]} is more than the row's num_gpus, {num_gpus[r]}")
    most = np.minimum(kinds.max_useful_gpus(safe), MAX_ELASTIC_GPUS)
    max_gpus = whole("max_gpus", np.maximum(most, num_gpus))
    fail(max_gpus < num_gpus, "max_gpus", lambda r: f"{max_gpus[r]} is less than the row's num_gpus, {num_gpus[r]}")

    batch = numbers("batch_size", optional=True) if "batch_size" in columns else np.full(n, np.nan)
    batch = np.where(np.isnan(batch), kinds.init_batch[safe], batch)
    fail(batch < kinds.init_batch[safe], "batch_size", lambda r: (
        f"{batch[r]:g} is below {kinds.names[kind[r]]}'s smallest batch, {kinds.init_batch[kind[r]]:g} (its M0)"))
    fail(batch > kinds.max_batch[safe], "batch_size", lambda r: (
        f"{batch[r]:g} is above {kinds.names[kind[r]]}'s largest batch, {kinds.max_batch[kind[r]]:g}"))
    fail(batch / num_gpus < kinds.min_local_batch[safe], "batch_size", lambda r: (
        f"{batch[r]:g} on {num_gpus[r]} GPUs is {batch[r] / num_gpus[r]:g} examples a GPU, fewer than "
        f"{kinds.names[kind[r]]}'s smallest micro-batch, {kinds.min_local_batch[kind[r]]:g}"))

    target = numbers("target_examples", optional=True) if "target_examples" in columns else np.full(n, np.nan)
    fail(~np.isnan(target) & ((target <= 0) | (target > MAX_STEPS)), "target_examples",
         f"must be > 0 and at most {MAX_STEPS:,} (2**53), got '{{value}}'")
    target = np.where(np.isnan(target), kinds.target_examples[safe], target)
    return {"kind": kind, "num_gpus": num_gpus, "min_gpus": min_gpus, "max_gpus": max_gpus,
            "batch_size": batch, "target_examples": target, "kinds": kinds}


def elastic_table(parsed: dict, rows: np.ndarray, job_id, submit, priority, user, queue) -> JobTable:
    """A JobTable of the elastic rows ``rows`` (already in submit order and cut to the window)."""
    kinds: ElasticKinds = parsed["kinds"]
    return JobTable.build(
        job_id=job_id, submit_time_s=submit, kind_names=np.asarray(kinds.names, dtype=object)[parsed["kind"][rows]],
        num_gpus=parsed["num_gpus"][rows], total_steps=parsed["target_examples"][rows], priority=priority,
        user=user, queue=queue, kinds=kinds.names,
        elastic=ElasticJobs(kinds, parsed["min_gpus"][rows], parsed["max_gpus"][rows], parsed["batch_size"][rows]),
    )
