"""A trace's ``cpu_speed`` column: each job's speed at a few counts of CPU cores per GPU.

A cell lists ``cores:speed`` pairs separated by spaces, e.g. ``1:0.3 2:0.66 3:1 6:1.75``: the job
trains at 0.3 (in any unit; only its ratio to the job's best speed counts) with 1 core beside each
of its GPUs. An empty cell: the job's speed does not depend on its cores. Each row may name its own
core counts (jobs are profiled where their curves bend); the table's curves are taken at the union
of every row's counts, which leaves each curve as it was, since ``core/cpu_speed.py`` reads a
curve linearly between points, in proportion to the cores below the first and flat beyond the last.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.cpu_speed import CoreCurves
from apportion.core.errors import InputError

FIELD = "cpu_speed"
MAX_POINTS = 256  # distinct core counts over the whole trace


def curves_of_column(text: np.ndarray, lines: np.ndarray, source: str) -> CoreCurves | None:
    """[n] each row's curve from the column ``text`` (one string a row); None when every cell is empty."""
    cells, inverse = np.unique(np.asarray(text, dtype=str), return_inverse=True)
    inverse = inverse.reshape(-1)
    first_row = np.full(len(cells), len(text))
    np.minimum.at(first_row, inverse, np.arange(len(text)))
    parsed = {}
    for cell, row in zip(cells.tolist(), first_row.tolist()):  # a few distinct profiles, not one a job
        if cell.strip():
            parsed[cell] = _pairs(cell, int(lines[row]), source)
    if not parsed:
        return None
    points = np.unique(np.concatenate([cores for cores, _ in parsed.values()]))
    if len(points) > MAX_POINTS:
        raise InputError(source, f"the rows name {len(points)} different core counts, more than {MAX_POINTS}",
                         field=FIELD)
    flat = np.ones(len(points))
    speed = np.stack([_at(points, *parsed[cell]) if cell in parsed else flat for cell in cells.tolist()])
    return CoreCurves(points, speed[inverse])


def pairs_of_cell(cell: str, source: str, line: int | None = None,
                  field: str = FIELD) -> tuple[np.ndarray, np.ndarray]:
    """One job's curve written as a cell (``1:0.3 2:0.66 4:1``): its ascending core counts and speeds,
    checked (InputError naming ``source``, ``line`` and ``field``); a server's job file reads it too."""
    return _pairs(cell, line, source, field)


def _pairs(cell: str, line: int | None, source: str, field: str = FIELD) -> tuple[np.ndarray, np.ndarray]:
    """The ascending core counts and speeds of one cell, checked."""
    def bad(message: str) -> InputError:
        return InputError(source, message, line=line, field=field)

    cores, speeds = [], []
    for pair in cell.split():
        bits = pair.split(":")
        if len(bits) != 2:
            raise bad(f"'{pair}' is not CORES:SPEED (e.g. '1:0.3 2:0.66 4:1')")
        try:
            count, speed = float(bits[0]), float(bits[1])
        except ValueError:
            raise bad(f"'{pair}' is not CORES:SPEED with two numbers (e.g. '2:0.66')") from None
        if not math.isfinite(count) or count <= 0:
            raise bad(f"'{pair}': cores per GPU must be a number > 0")
        if not math.isfinite(speed) or speed < 0:
            raise bad(f"'{pair}': speed must be a finite number >= 0")
        if count in cores:
            raise bad(f"{bits[0]} cores per GPU appears twice")
        cores.append(count)
        speeds.append(speed)
    order = np.argsort(cores)
    cores_arr, speed_arr = np.asarray(cores)[order], np.asarray(speeds)[order]
    if speed_arr.max() <= 0:
        raise bad("the speed is 0 at every core count: the job could never train")
    return cores_arr, speed_arr


def _at(points: np.ndarray, cores: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """One row's speed at ``points``: linear between its own, in proportion below the first, flat beyond."""
    best = np.maximum.accumulate(speed)
    return np.where(points < cores[0], best[0] * points / cores[0], np.interp(points, cores, best))
