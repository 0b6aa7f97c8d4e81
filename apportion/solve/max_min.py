"""The max-min share LP over job classes, kept as one HiGHS model across solves.

Given a[c, t] (normalised throughput a job of class c gets per unit of time on type t),
m[c] jobs in each class, s[c] GPUs each, and C[t] GPUs of each type:

    stage 1:  max z   s.t.  Σ_t a[c,t] x[c,t] ≥ z        for every class c with m[c] > 0
                            Σ_c m[c] s[c] x[c,t] ≤ C[t]   for every type t
                            Σ_t x[c,t] ≤ 1,  0 ≤ x ≤ 1, x[c,t] = 0 where a[c,t] = 0
    stage 2:  max Σ_c m[c] Σ_t a[c,t] x[c,t]  with z held at its stage-1 optimum,

so capacity that no job's minimum needs is still handed out (Gavel's LP). With
``water_filling``, stage 1 repeats level by level until no class can rise without lowering a
smaller one (max-min fairness in the strong sense), and stage 2 keeps every class at its
level. Jobs of one class share one row: by symmetry and convexity an optimum exists where
identical jobs get identical shares.

Between solves only the counts m[c] change (jobs arrive and leave), so the model is edited
in place and HiGHS restarts its simplex from the previous basis.
"""

from __future__ import annotations

import highspy
import numpy as np

from apportion.solve.highs import quiet_highs, run as run_highs
from apportion.solve.shares import SolveError, clean_shares

IPM_ABOVE_COLUMNS = 20_000  # larger models solve faster by interior point than by (warm) simplex

_Z_SLACK = 1e-7  # a frozen level gives up this relative fraction of z to stay numerically feasible
_RISE = 1e-4  # water-filling tests whether a class can rise by this fraction of the current level


class MaxMinModel:
    """One persistent HiGHS model; classes are registered once and never removed."""

    def __init__(self, capacity: np.ndarray, *, water_filling: bool = False) -> None:
        self.capacity = np.asarray(capacity, dtype=np.float64)
        self.water_filling = water_filling
        self.num_types = len(self.capacity)
        self.inf = highspy.kHighsInf
        # one model per stage, each restarting from its own last basis: the level's model always
        # maximises z, the total's always Σ m a x, so neither starts a solve dual infeasible
        self.highs = self._new_model()
        self.total_highs = None if water_filling else self._new_model()
        self._level_objective = False  # whether self.highs holds the level's objective (max z, z free)
        self.fair_row: list[int] = []  # per class: row z - Σ a x <= 0
        self.columns = np.zeros((0, self.num_types), dtype=np.int64)  # [C, T] column of x, -1 if none
        self.gpus = np.zeros(0)  # [C]
        self.count = np.zeros(0)  # [C] jobs in each class at the last solve
        self.col_class = np.zeros(0, dtype=np.int64)  # per x column: its class
        self.col_type = np.zeros(0, dtype=np.int64)
        self.col_a = np.zeros(0)
        self.col_index = np.zeros(0, dtype=np.int64)  # per x column: its index in the HiGHS model
        self.rise_col = np.zeros(0, dtype=np.int64)  # per class: column t_c, its rise above z in water-filling

    def _new_model(self) -> highspy.Highs:
        highs = quiet_highs()
        highs.changeObjectiveSense(highspy.ObjSense.kMaximize)
        highs.addCol(0.0, 0.0, self.inf, 0, np.zeros(0, np.int32), np.zeros(0))  # z, column 0
        for cap in self.capacity:  # capacity rows 0..T-1
            highs.addRow(-self.inf, float(cap), 0, np.zeros(0, np.int32), np.zeros(0))
        return highs

    @property
    def models(self) -> list[highspy.Highs]:
        return [self.highs] if self.total_highs is None else [self.highs, self.total_highs]

    @property
    def num_classes(self) -> int:
        return len(self.fair_row)

    def add_class(self, a_row: np.ndarray, gpus: float) -> int:
        """Register a class (its normalised throughputs and GPUs per job); returns its id."""
        return int(self.add_classes(a_row[None, :], np.array([gpus]))[0])

    def add_classes(self, a: np.ndarray, gpus: np.ndarray, count: np.ndarray | None = None) -> np.ndarray:
        """Register classes in one batch (two rows each, a column per runnable type); their ids.

        ``count`` (jobs in each new class at the next solve) is written into the model now, so
        that solve() need not edit those classes one coefficient at a time.
        """
        count = np.zeros(len(a)) if count is None else np.asarray(count, dtype=np.float64)
        h = self.highs
        k = len(a)
        first_class = self.num_classes
        first_row = h.getNumRow()
        fair = first_row + 2 * np.arange(k)
        one = fair + 1
        # rows, row-wise: fair rows hold z (column 0) and start inactive; "one" rows start empty
        row_lower = np.full(2 * k, -self.inf)
        row_upper = np.column_stack([np.where(count > 0, 0.0, self.inf), np.ones(k)]).reshape(-1)
        row_nnz = np.tile([1, 0], k)
        starts = np.concatenate([[0], np.cumsum(row_nnz)[:-1]]).astype(np.int32)
        for model in self.models:
            model.addRows(2 * k, row_lower, row_upper, k, starts, np.zeros(k, np.int32), np.ones(k))
        # columns x[c, t] for runnable (c, t), each in its fair row, its one row and capacity row t
        cls, typ = np.nonzero(a > 0)
        first_col = h.getNumCol()
        m = len(cls)
        indices = np.column_stack([fair[cls], one[cls], typ]).reshape(-1).astype(np.int32)
        values = np.column_stack([-a[cls, typ], np.ones(m), count[cls] * gpus[cls]]).reshape(-1)
        upper = np.where(count[cls] > 0, 1.0, 0.0)
        for model in self.models:
            model.addCols(m, np.zeros(m), np.zeros(m), upper, 3 * m, (3 * np.arange(m)).astype(np.int32),
                          indices, values)
        columns = np.full((k, self.num_types), -1, dtype=np.int64)
        columns[cls, typ] = first_col + np.arange(m)
        # rise columns t_c (fixed at 0 except while water-filling asks which classes can rise)
        rise = h.getNumCol() + np.arange(k)
        for model in self.models:
            model.addCols(k, np.zeros(k), np.zeros(k), np.zeros(k), k, np.arange(k, dtype=np.int32),
                          fair.astype(np.int32), np.ones(k))
        self.rise_col = np.append(self.rise_col, rise)
        self.fair_row.extend(fair.tolist())
        self.columns = np.vstack([self.columns, columns])
        self.gpus = np.append(self.gpus, gpus)
        self.count = np.append(self.count, count)
        self.col_class = np.append(self.col_class, first_class + cls)
        self.col_type = np.append(self.col_type, typ)
        self.col_a = np.append(self.col_a, a[cls, typ])
        self.col_index = np.append(self.col_index, first_col + np.arange(m))
        return first_class + np.arange(k)

    def solve(self, count: np.ndarray, *, level: bool = True) -> tuple[np.ndarray, float]:
        """Shares x[c, t] for every registered class given jobs per class, and the max-min value z.

        ``level=False`` skips the max-min stage: the most total Σ m a x alone (z = 0), which is
        max-throughput's LP on the same warm model.
        """
        h = self.highs
        changed = np.flatnonzero(count != self.count)
        if len(changed):  # the same edits as class by class, with the bounds set in two batched calls
            m = np.asarray(count, dtype=np.float64)[changed]
            member, gpu_type = np.nonzero(self.columns[changed] >= 0)
            cols = self.columns[changed][member, gpu_type]
            for model in self.models:
                for t, col, value in zip(gpu_type.tolist(), cols.tolist(), (m * self.gpus[changed])[member].tolist()):
                    model.changeCoeff(t, col, value)
                model.changeColsBounds(len(cols), cols.astype(np.int32), np.zeros(len(cols)),
                                       np.where(m[member] > 0, 1.0, 0.0))
                model.changeRowsBounds(len(changed), np.asarray(self.fair_row, dtype=np.int32)[changed],
                                       np.full(len(changed), -self.inf), np.where(m > 0, 0.0, self.inf))
        self.count = np.asarray(count, dtype=np.float64).copy()
        if not self.count.any():
            return np.zeros((self.num_classes, self.num_types)), 0.0

        x_cols = self.col_index.astype(np.int32)
        large = len(self.col_class) > IPM_ABOVE_COLUMNS
        h.setOptionValue("solver", "ipm" if large and level else "simplex")
        if level and not self.water_filling:
            values, z = self._level_then_total(x_cols)
        else:  # water-filling, or the total alone, on the one model
            h.changeColsCost(len(x_cols), x_cols, np.zeros(len(x_cols)))
            self._level_objective = False
            levels = np.full(self.num_classes, np.nan)  # classes whose fair rows were frozen at a level
            if level:
                levels, z = self._water_fill()
                z_bounds = (0.0, self.inf)  # every counted class is frozen at its own level
            else:  # the total alone is not degenerate like the max-min stage: simplex is quick
                z, z_bounds = 0.0, (0.0, 0.0)  # z = 0: presolve drops the fair rows
            # last stage: hand out what is left without lowering any class below its level
            h.changeColCost(0, 0.0)
            h.changeColBounds(0, *z_bounds)
            h.changeColsCost(len(x_cols), x_cols, self.count[self.col_class] * self.col_a)
            values = self._run("last stage")
            self._unfreeze(levels)

        x = np.zeros((self.num_classes, self.num_types))
        x[self.col_class, self.col_type] = values[x_cols]
        return clean_shares(x), z

    def _level_then_total(self, x_cols: np.ndarray) -> tuple[np.ndarray, float]:
        """Gavel's LP, each stage on its own warm model: the last stage's column values and z."""
        if not self._level_objective:
            self.highs.changeColsCost(len(x_cols), x_cols, np.zeros(len(x_cols)))
            self.highs.changeColCost(0, 1.0)
            self.highs.changeColBounds(0, 0.0, self.inf)
            self._level_objective = True
        z = float(self._run("max-min level", self.highs)[0])
        total = self.total_highs
        total.changeColBounds(0, *((z * (1 - _Z_SLACK),) * 2))
        total.changeColsCost(len(x_cols), x_cols, self.count[self.col_class] * self.col_a)
        return self._run("last stage", total), z

    def _water_fill(self) -> tuple[np.ndarray, float]:
        """Max-min fairness in the strong sense: no class can rise without lowering a smaller one.

        Each level: (1) maximise the common level z of the classes not yet frozen; (2) with z
        held, give each of them a rise t_c ≤ δ and maximise Σ t_c. Any class that could rise
        alone also rises here (the average of the single-class solutions raises them all
        together), so the classes left at t_c = 0 are exactly those z is limited by: freeze
        them at z and go on with the rest. Returns the levels (NaN where not counted) and the
        smallest level.
        """
        h = self.highs
        levels = np.full(self.num_classes, np.nan)
        waiting = np.flatnonzero(self.count > 0)
        smallest = None
        while len(waiting):
            h.changeColCost(0, 1.0)
            h.changeColBounds(0, 0.0, self.inf)
            z = float(self._run("water-filling level")[0])
            smallest = z if smallest is None else smallest
            frozen_now = waiting
            if len(waiting) > 1:
                delta = _RISE * max(z, 1e-9)
                rise = self.rise_col[waiting].astype(np.int32)
                h.changeColCost(0, 0.0)
                h.changeColBounds(0, z * (1 - _Z_SLACK), z * (1 - _Z_SLACK))
                h.changeColsCost(len(rise), rise, np.ones(len(rise)))
                h.changeColsBounds(len(rise), rise, np.zeros(len(rise)), np.full(len(rise), delta))
                values = self._run("water-filling rise")
                risen = values[self.rise_col[waiting]] > 0.5 * delta
                h.changeColsCost(len(rise), rise, np.zeros(len(rise)))
                h.changeColsBounds(len(rise), rise, np.zeros(len(rise)), np.zeros(len(rise)))
                if risen.any() and not risen.all():
                    frozen_now = waiting[~risen]
            level = z * (1 - _Z_SLACK)
            for c in frozen_now:
                h.changeCoeff(self.fair_row[c], 0, 0.0)
                h.changeRowBounds(self.fair_row[c], -self.inf, -level)
            levels[frozen_now] = level
            waiting = np.setdiff1d(waiting, frozen_now)
        return levels, (smallest or 0.0)

    def _unfreeze(self, levels: np.ndarray) -> None:
        for c in np.flatnonzero(~np.isnan(levels)):
            self.highs.changeCoeff(self.fair_row[c], 0, 1.0)
            self.highs.changeRowBounds(self.fair_row[c], -self.inf, 0.0)

    def _run(self, stage: str, highs: highspy.Highs | None = None) -> np.ndarray:
        highs = self.highs if highs is None else highs
        run_highs(highs)
        status = highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolveError(f"max-min LP {stage}: {highs.modelStatusToString(status)}")
        return np.asarray(highs.getSolution().col_value)


def solve_max_min(
    a: np.ndarray, count: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, *, water_filling: bool = False
) -> tuple[np.ndarray, float]:
    """One-off solve: shares x[c, t] and the max-min value z."""
    model = MaxMinModel(capacity, water_filling=water_filling)
    model.add_classes(np.asarray(a, dtype=np.float64), np.asarray(gpus, dtype=np.float64), np.asarray(count, dtype=np.float64))
    return model.solve(np.asarray(count, dtype=np.float64))
