"""Dividing each node's CPU cores among the jobs on it, for the most progress (Synergy's idea).

Two rules. ``proportional_split`` is what a GPU-only scheduler gives: every GPU of a node gets the
same share of its cores. ``split_cores`` gives each job its minimum, then hands out the rest one
core per GPU at a time (or a finer ``step``, where a CPU quota can hold fractions of a core) to whichever job gains the most progress per core from it, until the
node's cores run out or no job would go faster. Progress is GPU-weighted: the sum over jobs of
their GPUs times the fraction of their best speed (``core/cpu_speed.py``), i.e. how many of the
node's GPUs are busy training rather than waiting for data. For curves with diminishing returns
this greedy order is optimal up to the last step that does not fit whole; a curve whose gains grow
is treated as if each step gained the least of it and the steps before it. Equal gains go in turn,
a step of each job before the second of any, so that jobs with the same curve end with the same share.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.cpu_speed import CoreCurves, relative_speed

SLACK = 1e-9


def proportional_split(node_cores: np.ndarray, node_gpus: np.ndarray, node: np.ndarray) -> np.ndarray:
    """[m] cores per GPU for placements on ``node`` [m]: each node's cores over each of its GPUs."""
    return np.asarray(node_cores, dtype=np.float64)[node] / np.asarray(node_gpus, dtype=np.float64)[node]


def split_cores(node_cores: np.ndarray, node: np.ndarray, job: np.ndarray, gpus: np.ndarray, curves: CoreCurves,
                minimum_per_gpu: np.ndarray, step: float = 1.0) -> np.ndarray:
    """[m] cores per GPU for each placement (a job's ``gpus`` [m] on ``node`` [m]), each at least its
    ``minimum_per_gpu`` [m], the cores given on each node within its ``node_cores`` [N], handed out
    ``step`` cores per GPU at a time.

    Raises ValueError when the minimums alone do not fit on a node.
    """
    node = np.asarray(node, dtype=np.int64)
    job = np.asarray(job, dtype=np.int64)
    gpus = np.asarray(gpus, dtype=np.float64)
    base = np.asarray(minimum_per_gpu, dtype=np.float64).copy()
    node_cores = np.asarray(node_cores, dtype=np.float64)
    free = node_cores - np.bincount(node, weights=gpus * base, minlength=len(node_cores))
    if np.any(free < -SLACK):
        short = int(np.flatnonzero(free < -SLACK)[0])
        raise ValueError(f"node {short}: the jobs' minimum cores ({node_cores[short] - free[short]:g}) are more than "
                         f"its {node_cores[short]:g} cores")
    room = np.maximum(curves.saturation[job] - base, 0.0)  # cores per GPU that can still speed each one up
    most_steps = math.ceil(float(room.max(initial=0.0)) / step - SLACK)
    if not len(node) or most_steps <= 0:
        return base
    done = np.arange(most_steps, dtype=np.float64) * step  # cores per GPU given before each step
    width = np.clip(room[:, None] - done[None, :], 0.0, step)  # [m, S] cores per GPU each step adds
    width[width <= SLACK] = 0.0
    start = base[:, None] + done[None, :]
    rows = np.repeat(np.arange(len(node)), most_steps)
    before = relative_speed(curves, job[rows], start.ravel()).reshape(width.shape)
    after = relative_speed(curves, job[rows], (start + width).ravel()).reshape(width.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_core = np.where(width > 0, (after - before) / width, -np.inf)  # progress per core: GPUs cancel
    per_core = np.minimum.accumulate(per_core, axis=1)
    cost = width * gpus[:, None]  # cores each step takes on the node

    entry, at = np.nonzero((per_core > SLACK) & (width > 0))
    if not len(entry):
        return base
    order = np.lexsort((entry, at, -per_core[entry, at], node[entry]))
    entry, at = entry[order], at[order]
    step_node = node[entry]
    spent = np.cumsum(cost[entry, at])
    first = np.searchsorted(step_node, step_node, side="left")
    spent_before_node = np.where(first > 0, spent[first - 1], 0.0)
    within = spent - spent_before_node
    # a node's steps are taken in order until the first that does not fit: the rest wait for cores
    fits = within <= free[step_node] + SLACK
    failed = ~fits
    first_fail = np.full(len(node_cores), len(fits))
    np.minimum.at(first_fail, step_node[failed], np.flatnonzero(failed))
    stopped = np.arange(len(fits)) >= first_fail[step_node]
    taken = fits & ~stopped
    return base + np.bincount(entry[taken], weights=width[entry[taken], at[taken]], minlength=len(node))
