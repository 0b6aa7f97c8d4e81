"""A maximisation LP assembled from index arrays and solved with HiGHS.

Policies describe their LPs as blocks of columns and rows (numpy arrays of indices and
values), never as per-job constraint objects. The algorithm is picked by size: dual simplex
for small problems, interior point (with crossover) above ``IPM_ABOVE_COLUMNS``, where
simplex is slow on these degenerate LPs.
"""

from __future__ import annotations

import highspy
import numpy as np

from apportion.solve.highs import quiet_highs, run as run_highs
from apportion.solve.shares import SolveError, clean_shares

INF = highspy.kHighsInf
IPM_ABOVE_COLUMNS = 20_000


class LinearProgram:
    """Columns and rows added in blocks; ``solve`` maximises ``cost · x``."""

    def __init__(self) -> None:
        self._cost: list[np.ndarray] = []
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self._rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._row_lower: list[np.ndarray] = []
        self._row_upper: list[np.ndarray] = []
        self.num_cols = 0
        self.num_rows = 0

    def add_columns(self, count: int, *, cost=0.0, lower=0.0, upper=INF) -> np.ndarray:
        """``count`` new columns; returns their indices."""
        self._cost.append(np.broadcast_to(np.asarray(cost, np.float64), (count,)).copy())
        self._lower.append(np.broadcast_to(np.asarray(lower, np.float64), (count,)).copy())
        self._upper.append(np.broadcast_to(np.asarray(upper, np.float64), (count,)).copy())
        first = self.num_cols
        self.num_cols += count
        return np.arange(first, self.num_cols)

    def add_rows(self, count: int, row: np.ndarray, col: np.ndarray, value, *, lower=-INF, upper=INF) -> np.ndarray:
        """``count`` new rows with entries (row within this block, column, value); returns their indices."""
        first = self.num_rows
        row = np.asarray(row, np.int64) + first
        self._rows.append((row, np.asarray(col, np.int64), np.broadcast_to(np.asarray(value, np.float64), row.shape)))
        self._row_lower.append(np.broadcast_to(np.asarray(lower, np.float64), (count,)).copy())
        self._row_upper.append(np.broadcast_to(np.asarray(upper, np.float64), (count,)).copy())
        self.num_rows += count
        return np.arange(first, self.num_rows)

    def build(self, highs: highspy.Highs | None = None) -> Solver:
        """The HiGHS model; in ``highs`` (cleared first, as good as a new one) if given, saving its set-up."""
        lp = highspy.HighsLp()
        lp.num_col_ = self.num_cols
        lp.num_row_ = self.num_rows
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.col_cost_ = np.concatenate(self._cost) if self._cost else np.zeros(0)
        lp.col_lower_ = np.concatenate(self._lower) if self._lower else np.zeros(0)
        lp.col_upper_ = np.concatenate(self._upper) if self._upper else np.zeros(0)
        lp.row_lower_ = np.concatenate(self._row_lower) if self._row_lower else np.zeros(0)
        lp.row_upper_ = np.concatenate(self._row_upper) if self._row_upper else np.zeros(0)
        if self._rows:
            rows = np.concatenate([r for r, _, _ in self._rows])
            cols = np.concatenate([c for _, c, _ in self._rows])
            vals = np.concatenate([v for _, _, v in self._rows])
        else:
            rows = cols = np.zeros(0, np.int64)
            vals = np.zeros(0)
        start, index, value = _column_wise(rows, cols, vals, self.num_rows, self.num_cols)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = start
        lp.a_matrix_.index_ = index
        lp.a_matrix_.value_ = value
        return Solver(lp, highs)


def _column_wise(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, num_rows: int, num_cols: int):
    """The compressed-column arrays of a matrix given as (row, column, value) entries: rows sorted
    within each column and repeated entries summed, as scipy's csc_matrix gives them, without
    building a scipy matrix (a fixed cost that dominated small models)."""
    key = cols * max(num_rows, 1) + rows
    order = np.argsort(key, kind="stable")
    key, vals = key[order], vals[order]
    if len(key) > 1 and (key[1:] == key[:-1]).any():
        key, inverse = np.unique(key, return_inverse=True)
        vals = np.bincount(inverse.reshape(-1), weights=vals, minlength=len(key))
    col_of = key // max(num_rows, 1)
    start = np.searchsorted(col_of, np.arange(num_cols + 1)).astype(np.int32)
    return start, (key - col_of * max(num_rows, 1)).astype(np.int32), np.ascontiguousarray(vals, dtype=np.float64)


class Solver:
    """One HiGHS model; bounds and costs may change between runs, which then start warm."""

    def __init__(self, lp: highspy.HighsLp, highs: highspy.Highs | None = None) -> None:
        if highs is None:
            highs = quiet_highs()
        else:
            highs.clearModel()
            highs.clearSolver()
        self.highs = highs
        self.highs.setOptionValue("solver", "ipm" if lp.num_col_ > IPM_ABOVE_COLUMNS else "choose")
        self.highs.passModel(lp)

    def run(self, what: str = "LP") -> np.ndarray:
        """Solve; the column values, or SolveError naming ``what`` and HiGHS's status."""
        run_highs(self.highs)
        status = self.highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolveError(f"{what}: {self.highs.modelStatusToString(status)}")
        return np.asarray(self.highs.getSolution().col_value)

    def feasible(self) -> bool:
        """Solve and say whether the model has a feasible (optimal) solution."""
        run_highs(self.highs)
        return self.highs.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def set_row_bounds(self, rows: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        self.highs.changeRowsBounds(len(rows), rows.astype(np.int32), lower.astype(np.float64), upper.astype(np.float64))

    def set_costs(self, cols: np.ndarray, cost: np.ndarray) -> None:
        self.highs.changeColsCost(len(cols), cols.astype(np.int32), cost.astype(np.float64))

    def set_col_bounds(self, cols: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        self.highs.changeColsBounds(len(cols), cols.astype(np.int32), lower.astype(np.float64), upper.astype(np.float64))


def add_share_columns(lp: LinearProgram, runnable: np.ndarray, num_gpus: np.ndarray, capacity: np.ndarray,
                      cost: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns X[j, t] for the runnable (job, type) pairs with the constraints every allocation has:

    Σ_t X[j, t] ≤ 1 (a job holds at most all of its time) and Σ_j s_j X[j, t] ≤ C_t (capacity).
    Returns (columns, job of each column, type of each column).
    """
    job, gpu_type = np.nonzero(runnable)
    cols = lp.add_columns(len(job), cost=cost, upper=1.0)
    n, num_types = runnable.shape
    lp.add_rows(n, job, cols, 1.0, upper=1.0)
    lp.add_rows(num_types, gpu_type, cols, num_gpus[job].astype(np.float64), upper=capacity.astype(np.float64))
    return cols, job, gpu_type


def shares_from(values: np.ndarray, cols: np.ndarray, job: np.ndarray, gpu_type: np.ndarray, shape) -> np.ndarray:
    """The [n, T] share matrix from solved column values, solver noise removed."""
    share = np.zeros(shape)
    share[job, gpu_type] = values[cols]
    return clean_shares(share)
