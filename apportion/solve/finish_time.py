"""Finish-time fairness's LP over single jobs, kept as one HiGHS model across re-solves.

For a worst ratio ρ, job j must run at least at r_j(ρ) = remaining_j / (ρ·D_j − elapsed_j)
steps/s (D_j: its finish time on an isolated share). Whether some allocation X meets every
r_j(ρ) is an LP; the policy finds the smallest such ρ by bisection. Every job differs in
remaining work and elapsed time, so each keeps its own columns and rows: there are no
classes to merge. Instead the model lives across re-solves and is edited in place — an
arriving job adds its columns and rows, a departed job's columns are fixed at zero and its
rows freed (and the model rebuilt once dead jobs outnumber live ones), and the floors r_j are
row bounds — so HiGHS restarts from the previous basis and nothing is rebuilt per re-solve.

The bisection walks the same midpoints as a cold one (a plain feasibility test at each) and
gets the same verdicts, most without an LP run: a feasible X meets every ratio at or above
the worst ratio it achieves, and feasibility is monotone in the ratio, so every midpoint
above a known feasible one (by ``_MARGIN``, far above HiGHS's tolerances) or below a known
infeasible one is decided. The first test, at ``low`` (running flat out less 1e-9 of it),
sits inside HiGHS's tolerances whenever the worst job's flat-out speed is what limits ρ; its
verdict then depends on how HiGHS solves from scratch, so it is taken from a model built
afresh, as the cold bisection does.
"""

from __future__ import annotations

from typing import Callable

import highspy
import numpy as np

from apportion.solve.highs import quiet_highs, run as run_highs
from apportion.solve.shares import SolveError, clean_shares

INF = highspy.kHighsInf
_MARGIN = 1e-6  # a bound decides a midpoint only this relatively far from it
_DEAD_SHARE = 0.5  # rebuild once departed jobs hold more than this fraction of the columns


class FinishTimeModel:
    """One HiGHS model with a column per (job, runnable type) and two rows per job, kept warm."""

    def __init__(self, capacity: np.ndarray) -> None:
        self.capacity = np.asarray(capacity, dtype=np.float64)
        self.num_types = len(self.capacity)
        self._reset()

    def _reset(self) -> None:
        h = self.highs = quiet_highs()
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        for cap in self.capacity:  # capacity rows 0..T-1
            h.addRow(-INF, float(cap), 0, np.zeros(0, np.int32), np.zeros(0))
        self.slot_of = np.full(0, -1, dtype=np.int64)  # job index -> slot, -1 when not in the model
        self.slot_speed = np.zeros((0, self.num_types))  # [slots, T] the speeds each slot was built with
        self.slot_gpus = np.zeros(0)
        self.slot_cols = np.zeros((0, self.num_types), dtype=np.int64)  # column of X[slot, t], -1 if none
        self.rate_row = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.probes = 0  # LP runs of the last solve, for checks and benchmarks

    # ---- keeping the model in step with the job set ----

    def sync(self, index: np.ndarray, steps_per_s: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
        """Bring the model to exactly these jobs; returns each job's slot.

        A job keeps its slot while its speeds and GPU count are unchanged; a departed (or
        changed) job's columns are fixed at zero and its rows freed, and once such dead slots
        hold most of the model it is rebuilt from the live jobs.
        """
        if len(index) and index.max() >= len(self.slot_of):
            grow = max(int(index.max()) + 1 - len(self.slot_of), len(self.slot_of))
            self.slot_of = np.concatenate([self.slot_of, np.full(grow, -1, dtype=np.int64)])
        slot = self.slot_of[index]
        known = slot >= 0
        same = np.zeros(len(index), dtype=bool)
        same[known] = ((self.slot_speed[slot[known]] == steps_per_s[known]).all(axis=1)
                       & (self.slot_gpus[slot[known]] == num_gpus[known]))
        keep = np.zeros(len(self.live), dtype=bool)
        keep[slot[same]] = True
        gone = np.flatnonzero(self.live & ~keep)
        new = np.flatnonzero(~same)
        dead_after = (~self.live).sum() + len(gone)
        if len(self.live) and dead_after > _DEAD_SHARE * (len(self.live) + len(new)):
            slot_of = np.full(len(self.slot_of), -1, dtype=np.int64)
            self._reset()
            self.slot_of = slot_of
            new = np.arange(len(index))
        elif len(gone):
            self._retire(gone)
        if len(new):
            self.slot_of[index[new]] = self._add(steps_per_s[new], num_gpus[new].astype(np.float64))
        return self.slot_of[index]

    def _retire(self, slots: np.ndarray) -> None:
        h = self.highs
        cols = self.slot_cols[slots]
        cols = cols[cols >= 0].astype(np.int32)
        h.changeColsBounds(len(cols), cols, np.zeros(len(cols)), np.zeros(len(cols)))
        rows = self.rate_row[slots].astype(np.int32)
        h.changeRowsBounds(len(rows), rows, np.full(len(rows), -INF), np.full(len(rows), INF))
        self.live[slots] = False
        # the slot's jobs may come back with other speeds: forget which job held it
        self.slot_of[np.isin(self.slot_of, slots)] = -1

    def _add(self, speed: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """New slots for jobs with these speeds and GPU counts: a time row (≤ 1), a rate row (free until
        a floor is set) and a column per runnable type in both and in that type's capacity row."""
        h = self.highs
        k = len(speed)
        first_slot = len(self.live)
        first_row = h.getNumRow()
        time_row = first_row + 2 * np.arange(k)
        rate_row = time_row + 1
        upper = np.column_stack([np.ones(k), np.full(k, INF)]).reshape(-1)
        h.addRows(2 * k, np.full(2 * k, -INF), upper, 0, np.zeros(2 * k, np.int32), np.zeros(0, np.int32), np.zeros(0))
        job, gpu_type = np.nonzero(speed > 0)
        m = len(job)
        first_col = h.getNumCol()
        indices = np.column_stack([time_row[job], rate_row[job], gpu_type]).reshape(-1).astype(np.int32)
        values = np.column_stack([np.ones(m), speed[job, gpu_type], gpus[job]]).reshape(-1)
        h.addCols(m, np.zeros(m), np.zeros(m), np.ones(m), 3 * m, (3 * np.arange(m)).astype(np.int32),
                  indices, values)
        cols = np.full((k, self.num_types), -1, dtype=np.int64)
        cols[job, gpu_type] = first_col + np.arange(m)
        self.slot_speed = np.vstack([self.slot_speed, speed])
        self.slot_gpus = np.append(self.slot_gpus, gpus)
        self.slot_cols = np.vstack([self.slot_cols, cols])
        self.rate_row = np.append(self.rate_row, rate_row)
        self.live = np.append(self.live, np.ones(k, dtype=bool))
        return first_slot + np.arange(k)

    # ---- solving ----

    def solve(self, slots: np.ndarray, remaining: np.ndarray, elapsed: np.ndarray, isolated_finish: np.ndarray,
              value: np.ndarray, capacity: np.ndarray, low: float, high: float,
              bisect: Callable[[float, float, Callable[[float], bool]], float],
              fresh_feasible: Callable[[float], bool]) -> tuple[float, np.ndarray]:
        """The smallest feasible worst ratio found by ``bisect`` from [low, high], and the shares.

        ``slots`` from sync(); ``value`` [n, T] what the last stage maximises with every job held
        at that ratio (as the cold policy: ratio·(1 + 1e-7)). ``low`` is where running flat out
        would put the worst job (less 1e-9 of it), so whether ``low`` itself passes rests on
        HiGHS's tolerances: that verdict is taken from ``fresh_feasible``, the cold bisection's
        first test on a model built afresh, whenever a ratio just above ``low`` is feasible.
        """
        h = self.highs
        self.probes = 0
        self.capacity = np.asarray(capacity, dtype=np.float64)
        h.changeRowsBounds(self.num_types, np.arange(self.num_types, dtype=np.int32),
                           np.full(self.num_types, -INF), self.capacity)
        rows = self.rate_row[slots].astype(np.int32)
        x_cols = self.slot_cols[slots]
        job, gpu_type = np.nonzero(x_cols >= 0)
        cols = x_cols[job, gpu_type].astype(np.int32)
        speed = self.slot_speed[slots][job, gpu_type]
        known = [-np.inf, np.inf]  # the largest ratio known infeasible, the smallest known feasible

        def set_floors(ratio: float) -> None:
            time_left = ratio * isolated_finish - elapsed
            floor = np.where(time_left > 0, remaining / np.maximum(time_left, 1e-12), INF)
            h.changeRowsBounds(len(rows), rows, floor, np.full(len(rows), INF))

        def test(ratio: float) -> bool:
            """The plain feasibility test on the warm model; a feasible X also bounds every ratio it meets."""
            set_floors(ratio)
            self.probes += 1
            run_highs(h)
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                known[0] = max(known[0], ratio)
                return False
            known[1] = min(known[1], ratio, self._witness(h, cols, job, speed, len(slots),
                                                          remaining, elapsed, isolated_finish))
            return True

        def feasible(ratio: float) -> bool:
            if ratio >= known[1] * (1 + _MARGIN):
                return True
            if ratio <= known[0]:
                return False
            if ratio == low:
                if not test(low * (1 + _MARGIN)):
                    return False  # clearly short of flat out: so is low
                self.probes += 1
                return fresh_feasible(low)
            return test(ratio)

        ratio = bisect(low, high, feasible)
        # last stage: every job held at the ratio, what is left spent on the objective
        set_floors(ratio * (1 + 1e-7))
        h.changeColsCost(len(cols), cols, value[job, gpu_type].astype(np.float64))
        self.probes += 1
        run_highs(h)
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolveError(f"finish-time-fairness LP: {h.modelStatusToString(status)}")
        values = np.asarray(h.getSolution().col_value)
        h.changeColsCost(len(cols), cols, np.zeros(len(cols)))
        share = np.zeros((len(slots), self.num_types))
        share[job, gpu_type] = values[cols]
        return ratio, clean_shares(share)

    @staticmethod
    def _witness(h, cols, job, speed, n, remaining, elapsed, isolated_finish) -> float:
        """The worst ratio the solver's current X achieves: every ratio at or above it is feasible."""
        col_value = np.asarray(h.getSolution().col_value)
        rate = np.bincount(job, weights=speed * col_value[cols], minlength=n)
        with np.errstate(divide="ignore", invalid="ignore"):
            worst = np.max((elapsed + remaining / rate) / isolated_finish)
        return float(worst) if np.isfinite(worst) else np.inf
