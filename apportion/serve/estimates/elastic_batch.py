"""The examples an elastic job with a target in examples has done, and the batch and steps of its
next attempt.

Such a job (``elastic.target_examples``, or ``epochs`` × ``dataset_size``) may run each attempt
at another batch: the one its round chose (the ``batch_size`` column, within M0 and
``elastic.max_batch_size``), else its own. An attempt trains at one batch throughout, so the
job's ``batch_log`` of segments ``[first step, examples before it, batch]``, one an attempt,
turns any step into the examples done by then, exactly: a checkpoint's step after a preemption
or a crash is enough to know the examples it resumes from. At each start the segments from
the resume step on are dropped, one is added, and the job's ``total_steps`` becomes the step at
which its examples reach the target at this batch (``APPORTION_TOTAL_STEPS``; the job also
gets ``APPORTION_TARGET_EXAMPLES`` and stops there itself, apportion.runtime.elastic).
"""

from __future__ import annotations

import json

import numpy as np

from apportion.core.goodput import efficiency
from apportion.serve.jobs.elastic_spec import ElasticSpec
from apportion.serve.jobs.records import JobRecord


def batch_log(text: str) -> list[list[int]]:
    """The segments of a ``batch_log`` column ('' : none)."""
    return [[int(v) for v in segment] for segment in json.loads(text)] if text else []


def examples_at(log: tuple | list, step: int, batch_size: int) -> int:
    """Examples done after ``step`` steps: through the segment the step lies in (``batch_size`` a step before any)."""
    for start, before, batch in reversed(log):
        if start <= step:
            return before + (step - start) * batch
    return step * batch_size


def examples_done(row: JobRecord, steps_done: int) -> int | None:
    """The examples job ``row`` has done at ``steps_done`` (None: its target is in steps)."""
    spec = _spec(row.elastic)
    if spec is None or spec.target_examples is None:
        return None
    return examples_at(row.batch_log, int(steps_done), spec.batch_size)


def examples_info(row: JobRecord) -> dict:
    """What the API adds for a job whose target is in examples: ``examples_done``, ``target_examples`` and
    ``batch_size`` (its live or last attempt's batch); nothing for any other job."""
    spec = _spec(row.elastic)
    if spec is None or spec.target_examples is None:
        return {}
    log = row.batch_log
    return {"examples_done": examples_at(log, int(row.steps_done), spec.batch_size),
            "target_examples": spec.target_examples, "batch_size": log[-1][2] if log else spec.batch_size}


def attempt_batch(row: JobRecord) -> tuple[int | None, dict]:
    """(the batch the next attempt of job ``row`` trains at, the job's fields that change:
    ``total_steps`` and ``batch_log``); (None, {}) when its target is in steps: nothing changes."""
    spec = _spec(row.elastic)
    if spec is None or spec.target_examples is None:
        return None, {}
    chosen = row.batch_size
    batch = spec.batch_size
    if chosen and spec.chooses_batch:
        batch = min(max(int(chosen), spec.m0, len(row.slot_list) or 1), spec.largest_batch)
    step = int(row.steps_done)
    done = examples_at(row.batch_log, step, spec.batch_size)
    log = tuple(segment for segment in row.batch_log if segment[0] < step) + ((step, done, batch),)
    left = max(spec.target_examples - done, 0)
    return batch, {"total_steps": step + -(-left // batch), "batch_log": log}


def examples_work(table: dict, rows: np.ndarray, noise_scale: np.ndarray, per_step: np.ndarray) -> tuple[np.ndarray,
                                                                                                     np.ndarray]:
    """([n] work done, [n] work in all) of the round's job rows ``rows`` of ``table``, in the examples the
    policy's model counts (as the simulator counts them: examples at M0, an example at batch M worth
    E(M) = (φ + M0)/(φ + M)). A job with a target in examples: its examples, each worth what one is at the
    batch it runs at now (``noise_scale`` [n] its φ); any other: its steps × ``per_step`` [n] examples."""
    done = np.asarray(table["steps_done"], dtype=np.float64)[rows] * per_step
    total = np.asarray(table["total_steps"], dtype=np.float64)[rows] * per_step
    for j, i in enumerate(rows.tolist()):
        text = table["elastic"][i]
        spec = _spec(json.loads(text) if text else None)
        if spec is None or spec.target_examples is None:
            continue
        log = batch_log(table["batch_log"][i])
        now = log[-1][2] if log else spec.batch_size
        worth = float(efficiency(noise_scale[j], spec.m0, now))
        done[j] = examples_at(log, int(table["steps_done"][i]), spec.batch_size) * worth
        total[j] = spec.target_examples * worth
    return done, total


def _spec(elastic: dict | None) -> ElasticSpec | None:
    return ElasticSpec.from_dict(elastic) if elastic else None
