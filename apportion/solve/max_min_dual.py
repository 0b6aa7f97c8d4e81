"""Gavel's two-stage max-min LP solved through its capacity prices: fast when classes are many.

The problem and the answer are those of :func:`apportion.solve.max_min.solve_max_min` (one
level, no water-filling). Pricing the T capacity rows at λ splits the LP into one tiny LP per
class (its shares on T types, a level row and a time row), solved in closed form for all
classes at once: its optimum is one type, or a mix of two that takes all of the class's time.
A level (bundle) method over λ finds near-optimal prices; every class whose choice is clear at
them is fixed to it, and one small HiGHS LP over the rest (identical classes merged) finishes
the job. An answer is returned only when that LP's own prices prove it optimal (the Lagrangian
bound they give meets its value); when that cannot be shown, or HiGHS fails, the full LP is
solved by ``solve_max_min`` instead, as it is for a few hundred classes, where it is faster.
"""

from __future__ import annotations

import highspy
import numpy as np

from apportion.solve.highs import quiet_highs, run as run_highs
from apportion.solve.lp import LinearProgram
from apportion.solve.max_min import _Z_SLACK, solve_max_min
from apportion.solve.shares import clean_shares

PROOF_GAP = 1e-9  # accept when the price bound exceeds the value found by at most this fraction
DESCENT_GAP = 1e-6  # the price search stops this close (relative) to the best bound
DESCENT_ROUNDS = 150
REPAIR_ROUNDS = 12  # small LPs, each adding the classes the last one's prices disagree with
CLEAR = 1e-3  # a class's choice is clear when prices (or z) must move this fraction to change it
SMALL = 500  # up to this many classes with jobs the full LP is faster than searching for prices
INF = highspy.kHighsInf


def solve_max_min_fast(
    a: np.ndarray, count: np.ndarray, gpus: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, float]:
    """Shares x[c, t] and the max-min value z, as ``solve_max_min`` gives them, found by prices.

    Up to SMALL classes, and whenever the price method cannot prove its answer optimal, this is
    ``solve_max_min`` itself (the full HiGHS LP).
    """
    x, z, _ = solve_with_prices(a, count, gpus, capacity)
    return x, z


def solve_with_prices(
    a: np.ndarray, count: np.ndarray, gpus: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, float, str]:
    """``solve_max_min_fast`` that also says how: "prices", "small" (the full LP, as there are
    few classes) or "fallback" (the full LP, as prices proved nothing)."""
    a = np.asarray(a, dtype=np.float64)
    count = np.asarray(count, dtype=np.float64)
    gpus = np.asarray(gpus, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    if not count.any():
        return np.zeros(a.shape), 0.0, "small"
    counted = np.flatnonzero(count > 0)
    if len(counted) <= SMALL:
        return (*solve_max_min(a, count, gpus, capacity), "small")
    types = np.flatnonzero(capacity > 0)
    if np.any(gpus[counted] <= 0) or np.any(capacity < 0) or np.any(a < 0) or not np.all(np.isfinite(a)):
        return (*solve_max_min(a, count, gpus, capacity), "fallback")
    sub = np.ascontiguousarray(a[np.ix_(counted, types)])
    m = count[counted]
    w = m * gpus[counted]
    cap = capacity[types]
    reach = sub.max(axis=1, initial=0.0)
    z = 0.0
    if reach.min() > 0:
        found = _level(sub, w, cap)
        if found is None:
            return (*solve_max_min(a, count, gpus, capacity), "fallback")
        z = found
    live = reach > 0  # a class that runs nowhere keeps no time
    share = _spread(sub[live], m[live], w[live], cap, z * (1 - _Z_SLACK))
    if share is None:
        return (*solve_max_min(a, count, gpus, capacity), "fallback")
    x = np.zeros(a.shape)
    x[np.ix_(counted[live], types)] = share
    x = clean_shares(x)
    used = (count * gpus) @ x
    over = used > capacity
    if over.any():  # rounding only: never hand out more than there is
        x[:, over] *= capacity[over] / used[over]
    return x, z, "prices"


def _descend(oracle, start: np.ndarray, upper: np.ndarray, tolerance) -> tuple[np.ndarray, float, float]:
    """min over 0 ≤ λ ≤ upper of a convex ``oracle(λ) -> (value, subgradient)`` by the level
    method (cutting planes, each step the nearest point, in the max norm, where the model is
    down to a level between its bound and the best value). Returns the best λ seen, a lower
    bound on the minimum and the best value. Works in λ/upper."""
    num = len(start)
    model, step = quiet_highs(), quiet_highs()
    for h in (model, step):
        h.setOptionValue("primal_feasibility_tolerance", 1e-10)
        h.setOptionValue("dual_feasibility_tolerance", 1e-10)
        h.addCols(num, np.zeros(num), np.zeros(num), np.ones(num), 0,
                  np.zeros(num, np.int32), np.zeros(0, np.int32), np.zeros(0))
        h.addCol(1.0, -INF if h is model else 0.0, INF, 0, np.zeros(0, np.int32), np.zeros(0))
    cols = np.arange(num + 1, dtype=np.int32)
    for j in range(num):  # |μ_j − centre_j| ≤ r: rows 2j, 2j+1
        step.addRow(-INF, 0.0, 2, np.array([j, num], np.int32), np.array([1.0, -1.0]))
        step.addRow(-INF, 0.0, 2, np.array([j, num], np.int32), np.array([-1.0, -1.0]))
    mu = start / upper
    best, centre, bound = np.inf, mu, -np.inf
    offsets: list[float] = []
    scale, stale = None, 0
    for _ in range(DESCENT_ROUNDS):
        value, grad = oracle(mu * upper)
        scale = scale or abs(value) or 1.0  # the model sees values of order 1
        value, grad = value / scale, grad * upper / scale
        stale += 1
        if value < best:
            best, centre, stale = value, mu, 0
        if stale > 5 * num + 20:  # no progress left at this precision
            break
        offset = float(grad @ mu - value)  # cut: value + grad·(ν − μ) ≤ θ
        model.addRow(-INF, offset, num + 1, cols, np.append(grad, -1.0))
        run_highs(model)
        if model.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        solution = np.asarray(model.getSolution().col_value)
        bound = max(bound, float(solution[num]))
        if best - bound <= tolerance(best * scale) / scale:
            break
        level = bound + 0.3 * (best - bound)
        offsets.append(offset)
        step.addRow(-INF, offset + level, num, cols[:num], grad)
        k = len(offsets)
        step.changeRowsBounds(k, np.arange(2 * num, 2 * num + k, dtype=np.int32), np.full(k, -INF),
                              np.asarray(offsets) + level)
        step.changeRowsBounds(2 * num, np.arange(2 * num, dtype=np.int32), np.full(2 * num, -INF),
                              np.column_stack([centre, -centre]).ravel())
        run_highs(step)
        if step.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            mu = np.clip(np.asarray(step.getSolution().col_value)[:num], 0.0, 1.0)
        else:
            mu = np.clip(solution[:num], 0.0, 1.0)
    return centre * upper, bound * scale, best * scale


# ---- stage 1: the level z -------------------------------------------------------------------------


class _LevelPrices:
    """Stage 1 priced: L(λ) = λ·C + max_z [z − Σ_c w_c cost_c(λ, z)] ≥ z* for λ ≥ 0, where
    cost_c(λ, z) is the cheapest λ·x with a_c·x ≥ z and Σ_t x_t ≤ 1: the lower hull of the
    origin and the points (a_ct, λ_t). min over λ of L is z*. Arrays are type-major, [T, n],
    each class's types slowest first."""

    def __init__(self, a: np.ndarray, w: np.ndarray, capacity: np.ndarray) -> None:
        n, num = a.shape
        self.n, self.num, self.w, self.capacity = n, num, w, capacity
        by_a = np.argsort(a, axis=1, kind="stable")
        self.kind = np.ascontiguousarray(by_a.T)
        self.a = np.ascontiguousarray(np.take_along_axis(a, by_a, axis=1).T)
        self.runs = self.a > 0
        self.inverse = 1.0 / np.where(self.runs, self.a, 1.0)  # slope from the origin: price / a
        order = np.argsort(self.a.ravel(), kind="stable")  # the hull's corners lie at the a_ct
        self.sorted_a = self.a.ravel()[order]
        self.rank = np.empty(n * num, np.int64)
        self.rank[order] = np.arange(n * num)
        self.rank = self.rank.reshape(num, n)
        self.top = float(a.max(axis=1).min())  # no class reaches more than its best a

    def __call__(self, lam: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad, _ = self.evaluate(lam)
        return value, grad

    def evaluate(self, lam: np.ndarray) -> tuple[float, np.ndarray, float]:
        """L(λ), a subgradient (C minus the GPUs used at the inner optimum), and that inner z."""
        with np.errstate(divide="ignore", invalid="ignore"):
            corners, rise, ranks, bends = self._hull(lam)
            z = 0.0
            if rise < 1.0:  # z − Σ w cost rises until the summed hull slopes reach 1
                z = self.top
                if ranks:
                    bend = np.bincount(np.concatenate(ranks), np.concatenate(bends), minlength=self.sorted_a.size)
                    climbed = rise + np.cumsum(bend) >= 1.0
                    if climbed[-1]:
                        z = min(self.sorted_a[np.argmax(climbed)], z)
            cost, used = self._at(corners, z)
        return float(lam @ self.capacity + z - self.w @ cost), self.capacity - used, z

    def _hull(self, lam: np.ndarray):
        """Gift-wrap every class's lower hull from the origin. Returns its corners after the
        origin, each as (the classes that have it, in order; a; price; type), Σ w·slope at
        z = 0+, and where (rank of the corner's a) the summed slope grows, by how much."""
        num, w = self.num, self.w
        price = lam[self.kind]
        corners, ranks, bends = [], [], []
        rise = 0.0
        rows = np.arange(self.n)
        prev_a = prev_p = prev_slope = prev_rank = 0.0
        for k in range(1, num + 1):  # corner k lies at sorted position k - 1 or later
            if k == 1:
                ahead_a, ahead_p, ahead_t, ahead_r = self.a, price, self.kind, self.rank
            else:  # only the classes whose hull goes on
                ahead_a, ahead_p = self.a[k - 1:, rows], price[k - 1:, rows]
                ahead_t, ahead_r = self.kind[k - 1:, rows], self.rank[k - 1:, rows]
            size = len(rows)
            low, pick = np.full(size, np.inf), np.zeros(size, np.int64)
            for j in range(len(ahead_a)):
                if k == 1:
                    slope = np.where(self.runs[j], ahead_p[j] * self.inverse[j], np.inf)
                else:
                    run = ahead_a[j] - prev_a
                    slope = np.where(run > 0, (ahead_p[j] - prev_p) / run, np.inf)
                pick = np.where(slope <= low, j, pick)  # ties go to the farther point
                low = np.minimum(low, slope)
            at_a, at_p, at_t, at_rank = (np.take_along_axis(x, pick[None, :], axis=0)[0]
                                         for x in (ahead_a, ahead_p, ahead_t, ahead_r))
            keep = np.flatnonzero(np.isfinite(low))
            if not len(keep):
                break
            if len(keep) < len(rows):
                rows, low = rows[keep], low[keep]
                at_a, at_p, at_t, at_rank = at_a[keep], at_p[keep], at_t[keep], at_rank[keep]
                if k > 1:
                    prev_slope, prev_rank = prev_slope[keep], prev_rank[keep]
            if k == 1:
                rise = float(w[rows] @ low)
            else:
                ranks.append(prev_rank)
                bends.append(w[rows] * (low - prev_slope))
            prev_a, prev_p, prev_slope, prev_rank = at_a, at_p, low, at_rank
            corners.append((rows, at_a, at_p, at_t))
        return corners, rise, ranks, bends

    def _at(self, corners, z: float) -> tuple[np.ndarray, np.ndarray]:
        """Per class the hull's price at z, and the GPUs of each type all classes use there."""
        n, num, w = self.n, self.num, self.w
        a0, p0, t0 = np.zeros(n), np.zeros(n), np.full(n, -1)  # the last corner at or before z
        a1, p1, t1 = np.full(n, np.inf), np.zeros(n), np.full(n, -1)  # the first after it
        for rows, ca, cp, ct in corners:
            before = ca <= z
            if len(rows) == n:  # every class has this corner
                after = ~before & (a1 == np.inf)
                a0, p0, t0 = np.where(before, ca, a0), np.where(before, cp, p0), np.where(before, ct, t0)
                a1, p1, t1 = np.where(after, ca, a1), np.where(after, cp, p1), np.where(after, ct, t1)
                continue
            after = ~before & (a1[rows] == np.inf)
            a0[rows], p0[rows], t0[rows] = (np.where(before, ca, a0[rows]), np.where(before, cp, p0[rows]),
                                            np.where(before, ct, t0[rows]))
            a1[rows], p1[rows], t1[rows] = (np.where(after, ca, a1[rows]), np.where(after, cp, p1[rows]),
                                            np.where(after, ct, t1[rows]))
        end = ~np.isfinite(a1)
        theta = np.where(end, 0.0, (z - a0) / (a1 - a0))
        cost = p0 + theta * np.where(end, 0.0, p1 - p0)
        used = _per_type(np.maximum(t0, 0), w * (1 - theta) * (t0 >= 0), num)
        used += _per_type(np.maximum(t1, 0), w * theta, num)
        return cost, used


class _LevelOptions:
    """Every corner of a class's stage-1 LP as x affine in z, for types (first[k], second[k]):
    one type t (x_t = z/a_t, valid for z ≤ a_t), or two with Σx = 1 (valid for z between their
    a). Arrays are [K, n]."""

    def __init__(self, a: np.ndarray) -> None:
        n, num = a.shape
        pairs = [(t, u) for t in range(num) for u in range(t + 1, num)]
        size = num + len(pairs)
        self.first = np.array([t for t in range(num)] + [t for t, _ in pairs], np.int64)
        self.second = np.array([t for t in range(num)] + [u for _, u in pairs], np.int64)
        self.base1, self.slope1 = np.zeros((size, n)), np.zeros((size, n))
        self.base2, self.slope2 = np.zeros((size, n)), np.zeros((size, n))
        self.low, self.high = np.zeros((size, n)), np.full((size, n), -np.inf)  # where valid
        for t in range(num):
            ok = a[:, t] > 0
            self.slope1[t, ok] = 1.0 / a[ok, t]
            self.high[t, ok] = a[ok, t]
        for k, (t, u) in enumerate(pairs, start=num):
            at, au = a[:, t], a[:, u]
            ok = (at > 0) & (au > 0) & (at != au)
            span = np.where(ok, au - at, 1.0)
            # x_t = (a_u − z)/(a_u − a_t), x_u = (z − a_t)/(a_u − a_t), either type the faster
            self.base1[k], self.slope1[k] = np.where(ok, au / span, 0.0), np.where(ok, -1.0 / span, 0.0)
            self.base2[k], self.slope2[k] = np.where(ok, -at / span, 0.0), np.where(ok, 1.0 / span, 0.0)
            self.low[k] = np.where(ok, np.minimum(at, au), 0.0)
            self.high[k] = np.where(ok, np.maximum(at, au), -np.inf)

    def cost(self, lam: np.ndarray, z: float) -> np.ndarray:
        """[K, n] price λ·x of each option at z; inf where the option does not reach z."""
        price = (lam[self.first, None] * (self.base1 + self.slope1 * z)
                 + lam[self.second, None] * (self.base2 + self.slope2 * z))
        return np.where((self.low <= z) & (z <= self.high), price, np.inf)

    def usage(self, choice: np.ndarray, rows: np.ndarray, w: np.ndarray, num: int) -> tuple[np.ndarray, np.ndarray]:
        """GPUs of each type the given classes use at their options, as base + per_z · z."""
        first, second = self.first[choice], self.second[choice]
        base = _per_type(first, w * self.base1[choice, rows], num)
        base += _per_type(second, w * self.base2[choice, rows], num)
        per_z = _per_type(first, w * self.slope1[choice, rows], num)
        per_z += _per_type(second, w * self.slope2[choice, rows], num)
        return base, per_z


def _level(a: np.ndarray, w: np.ndarray, capacity: np.ndarray) -> float | None:
    """Stage 1: z*, proven by prices, or None."""
    n, num = a.shape
    prices = _LevelPrices(a, w, capacity)
    options = _LevelOptions(a)
    top = prices.top
    lam, low, high = _descend(prices, np.full(num, top / capacity.sum()), top / capacity,  # λ·C ≤ z* ≤ top
                              lambda best: DESCENT_GAP * abs(best))
    low, high = max(low, 0.0), min(high, top)  # z* lies between; each fixed option must hold on all of it
    z = min(max(prices.evaluate(lam)[2], low), high)
    cost = options.cost(lam, z)
    choice = np.argmin(cost, axis=0)
    rows = np.arange(n)
    held = (options.base1 + options.slope1 * z + options.base2 + options.slope2 * z)[choice, rows]
    margin = _margin(cost, choice) / np.maximum(lam.max() * held, 1e-300)  # relative to the prices
    room = np.minimum(low - options.low[choice, rows], options.high[choice, rows] - high) / max(z, 1e-300)
    clear = np.minimum(margin, room)  # how far λ or z may move (relatively) before the choice changes
    return _level_repair(a, w, capacity, prices, options, choice, _unclear(clear, num), clear)


def _level_repair(a, w, capacity, prices: _LevelPrices, options: _LevelOptions, choice, open_, clear) -> float | None:
    """Stage 1's repair (``_repair``): the level LP's z, once its prices prove it optimal."""
    rows = np.arange(len(a))

    def judge(solved, open_):
        z_lp, lam_lp, at_edge = solved
        bound, _, _ = prices.evaluate(lam_lp)
        if bound - z_lp <= PROOF_GAP * max(z_lp, 1e-12):
            return z_lp, None
        cost_lp = options.cost(lam_lp, z_lp)
        with np.errstate(invalid="ignore"):  # open classes' options may not reach z: not used
            loss = w * (cost_lp[choice, rows] - cost_lp.min(axis=0))
        return None, at_edge | _worst(loss, open_)

    return _repair(lambda open_: _level_lp(a, w, capacity, options, choice, open_), judge, open_, clear)


def _level_lp(a, w, capacity, options: _LevelOptions, choice, open_):
    """The level LP with every clear class fixed to its option (affine in z): z, the capacity
    prices, and the classes whose option's z range bounds z; None when HiGHS finds no optimum."""
    num = a.shape[1]
    fixed = np.flatnonzero(~open_)
    k = choice[fixed]
    base, per_z = options.usage(k, fixed, w[fixed], num)
    low = options.low[k, fixed].max(initial=0.0)
    high = options.high[k, fixed].min(initial=np.inf)
    if high < low:
        return None
    rows, inverse = np.unique(a[open_], axis=0, return_inverse=True)
    weight = np.bincount(inverse.ravel(), w[open_], minlength=len(rows))
    groups = len(rows)
    cls, typ = np.nonzero(rows > 0)
    lp = LinearProgram()
    z_col = lp.add_columns(1, cost=1.0, lower=low, upper=high if np.isfinite(high) else INF)
    x_cols = lp.add_columns(len(cls), upper=1.0)
    lp.add_rows(groups, np.concatenate([np.arange(groups), cls]), np.concatenate([np.repeat(z_col, groups), x_cols]),
                np.concatenate([np.ones(groups), -rows[cls, typ]]), upper=0.0)  # z ≤ a·x
    lp.add_rows(groups, cls, x_cols, 1.0, upper=1.0)
    cap_rows = lp.add_rows(num, np.concatenate([typ, np.arange(num)]), np.concatenate([x_cols, np.repeat(z_col, num)]),
                           np.concatenate([weight[cls], per_z]), upper=capacity - base)
    solution = _solve(lp)
    if solution is None:
        return None
    z = float(solution.col_value[0])
    lam = np.maximum(np.asarray(solution.row_dual)[cap_rows], 0.0)
    near = 1e-9 * max(z, 1e-12)
    at_edge = np.zeros(len(open_), bool)
    at_edge[fixed] = (options.low[k, fixed] >= z - near) | (options.high[k, fixed] <= z + near)
    return z, lam, at_edge


# ---- stage 2: spreading what is left ---------------------------------------------------------------


class _Corners:
    """Every corner of a class's stage-2 LP at level L, on types (first[k], second[k]): all
    time on one type, just enough time on one type to reach L, or a two-type mix with Σx = 1
    and a·x = L; at L = 0 also no time at all. Arrays are [K, n]; rate = a·x, -inf where the
    corner does not exist."""

    def __init__(self, a: np.ndarray, m: np.ndarray, w: np.ndarray, level: float) -> None:
        n, num = a.shape
        pairs = [(t, u) for t in range(num) for u in range(t + 1, num)]
        singles = list(range(num)) + (list(range(num)) if level > 0 else [0])
        self.first = np.array(singles + [t for t, _ in pairs], np.int64)
        self.second = np.array(singles + [u for _, u in pairs], np.int64)
        size = len(self.first)
        self.x1, self.x2 = np.zeros((size, n)), np.zeros((size, n))
        rate = np.full((size, n), -np.inf)
        for t in range(num):
            ok = (a[:, t] > 0) & (a[:, t] >= level)
            self.x1[t, ok] = 1.0
            rate[t, ok] = a[ok, t]
            if level > 0:
                self.x1[num + t, ok] = level / a[ok, t]
                rate[num + t, ok] = level
        if level <= 0:
            rate[num] = 0.0  # the origin
        for k, (t, u) in enumerate(pairs, start=len(singles)):
            at, au = a[:, t], a[:, u]
            lo, hi = np.minimum(at, au), np.maximum(at, au)
            ok = (lo > 0) & (lo < level) & (level < hi)
            span = np.where(ok, au - at, 1.0)
            self.x1[k] = np.where(ok, (au - level) / span, 0.0)
            self.x2[k] = np.where(ok, (level - at) / span, 0.0)
            rate[k, ok] = level
        self.rate = rate
        self.gain = m[None, :] * rate
        self.use1, self.use2 = w[None, :] * self.x1, w[None, :] * self.x2
        self.num = num
        self.pair_rows = slice(len(singles), size)
        self.work = np.empty((size, n)), np.empty((size, n)), np.empty((size, n), bool)  # reused: no page faults

    def value(self, lam: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """[K, n] m·a·x − w·λ·x per corner; -inf where it does not exist."""
        value = np.empty_like(self.gain) if out is None else out
        spend = self.work[1]
        np.multiply(lam[self.first, None], self.use1, out=spend)
        np.subtract(self.gain, spend, out=value)
        pairs = self.pair_rows
        np.multiply(lam[self.second[pairs], None], self.use2[pairs], out=spend[pairs])
        value[pairs] -= spend[pairs]
        return value

    def used(self, choice: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """GPUs of each type the given classes use at the given corners."""
        used = _per_type(self.first[choice], self.use1[choice, rows], self.num)
        return used + _per_type(self.second[choice], self.use2[choice, rows], self.num)

    def shares(self, choice: np.ndarray, rows: np.ndarray) -> np.ndarray:
        x = np.zeros((len(rows), self.num))
        idx = np.arange(len(rows))
        np.add.at(x, (idx, self.first[choice]), self.x1[choice, rows])
        np.add.at(x, (idx, self.second[choice]), self.x2[choice, rows])
        return x


class _SpreadPrices:
    """Stage 2 priced: D(λ) = λ·C + Σ_c max over corners (m a·x − w λ·x) ≥ the stage-2 optimum;
    values are given less ``floor`` (every class's throughput at the level), which is fixed."""

    def __init__(self, corners: _Corners, capacity: np.ndarray, floor: float) -> None:
        self.corners, self.capacity, self.floor = corners, capacity, floor

    def __call__(self, lam: np.ndarray) -> tuple[float, np.ndarray]:
        corners = self.corners
        value = corners.value(lam, out=corners.work[0])
        best = value.max(axis=0)
        top = np.greater_equal(value, best, out=corners.work[2])
        ties = top.sum(axis=0)
        if ties.max() > 1:
            top = top / ties  # ties split evenly: still a subgradient
        used = _per_type(corners.first, np.einsum("kn,kn->k", top, corners.use1), corners.num)
        used += _per_type(corners.second, np.einsum("kn,kn->k", top, corners.use2), corners.num)
        return float(lam @ self.capacity + best.sum() - self.floor), self.capacity - used


def _spread(a: np.ndarray, m: np.ndarray, w: np.ndarray, capacity: np.ndarray, level: float) -> np.ndarray | None:
    """Stage 2: the shares maximising Σ m a·x with every class at ≥ level, proven by prices, or None."""
    n, num = a.shape
    if n == 0:
        return np.zeros((0, num))
    corners = _Corners(a, m, w, level)
    floor = float(m.sum() * level)
    prices = _SpreadPrices(corners, capacity, floor)
    ceiling = float((m * a.max(axis=1)).sum())
    lam, _, _ = _descend(prices, np.full(num, ceiling / capacity.sum()), np.maximum(ceiling, 1e-12) / capacity,
                         lambda best: DESCENT_GAP * max(best, 0.0) + PROOF_GAP * ceiling)
    value = corners.value(lam)
    choice = np.argmax(value, axis=0)
    clear = _margin(-value, choice) / (m * a.max(axis=1))
    return _spread_repair(a, m, w, capacity, level, corners, prices, choice, _unclear(clear, num), clear)


def _spread_repair(a, m, w, capacity, level, corners: _Corners, prices: _SpreadPrices, choice, open_, clear):
    """Stage 2's repair (``_repair``): the stage-2 LP's shares, once its prices prove them optimal."""
    everyone = np.arange(len(a))

    def judge(solved, open_):
        share, total, lam_lp = solved
        bound = prices(lam_lp)[0] + prices.floor
        if bound - total <= PROOF_GAP * max(abs(bound), 1e-12):
            return share, None
        value_lp = corners.value(lam_lp)
        return None, _worst(value_lp.max(axis=0) - value_lp[choice, everyone], open_)

    return _repair(lambda open_: _spread_lp(a, m, w, capacity, level, corners, choice, open_), judge, open_, clear)


def _spread_lp(a, m, w, capacity, level, corners: _Corners, choice, open_):
    """Stage 2 with every clear class fixed at its corner: (shares, objective, capacity prices),
    or None when HiGHS finds no optimum."""
    n, num = a.shape
    fixed = np.flatnonzero(~open_)
    k = choice[fixed]
    left = capacity - corners.used(k, fixed)
    if np.any(left < -1e-12 * capacity):
        return None
    left = np.maximum(left, 0.0)
    share = np.zeros((n, num))
    share[fixed] = corners.shares(k, fixed)
    open_rows = np.flatnonzero(open_)
    key = np.column_stack([a[open_rows], w[open_rows] / m[open_rows]])  # identical a and GPUs per job
    rows, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    jobs = np.bincount(inverse, m[open_rows], minlength=len(rows))
    gpus = rows[:, num]
    rows = rows[:, :num]
    groups = len(rows)
    cls, typ = np.nonzero(rows > 0)
    lp = LinearProgram()
    x_cols = lp.add_columns(len(cls), cost=jobs[cls] * rows[cls, typ], upper=1.0)
    lp.add_rows(groups, cls, x_cols, rows[cls, typ], lower=level)
    lp.add_rows(groups, cls, x_cols, 1.0, upper=1.0)
    cap_rows = lp.add_rows(num, typ, x_cols, jobs[cls] * gpus[cls], upper=left)
    solution = _solve(lp)
    if solution is None:
        return None
    group_share = np.zeros((groups, num))
    group_share[cls, typ] = np.clip(np.asarray(solution.col_value), 0.0, 1.0)
    share[open_rows] = group_share[inverse]
    total = float((m[:, None] * a * share).sum())
    lam = np.maximum(np.asarray(solution.row_dual)[cap_rows], 0.0)
    return share, total, lam


# ---- shared --------------------------------------------------------------------------------------


def _per_type(types: np.ndarray, amount: np.ndarray, num: int) -> np.ndarray:
    return np.bincount(types, amount, minlength=num).astype(np.float64)


def _solve(lp: LinearProgram):
    """HiGHS's solution (values and duals) of a small LP, tight tolerances; None unless optimal."""
    solver = lp.build()
    h = solver.highs
    h.setOptionValue("solver", "simplex")
    h.setOptionValue("primal_feasibility_tolerance", 1e-10)
    h.setOptionValue("dual_feasibility_tolerance", 1e-10)
    run_highs(h)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return h.getSolution()


def _margin(cost: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """[n] how much more the runner-up option costs than the chosen one (inf: no runner-up)."""
    n = cost.shape[1]
    rows = np.arange(n)
    first = cost[choice, rows]
    rest = cost.copy()
    rest[choice, rows] = np.inf
    return rest.min(axis=0) - first


def _unclear(clear: np.ndarray, num: int) -> np.ndarray:
    """Classes whose choice is not clear (relative room below CLEAR), and at least a few of the closest."""
    open_ = clear <= CLEAR
    few = min(len(clear), 4 * (num + 1))
    open_[np.argpartition(clear, few - 1)[:few]] = True
    return open_


def _repair(solve_lp, judge, open_: np.ndarray, clear: np.ndarray):
    """Small LPs, the open classes free and the rest fixed at their priced choice, until one's
    prices prove it optimal; each round opens the classes those prices disagree with. Both stages:
    ``solve_lp(open_)`` is the small LP's answer or None (no optimum: open the closest calls);
    ``judge(answer, open_)`` is (what is proven, None) or (None, the classes to open). None when
    every class is open and still nothing is proven, or after ``REPAIR_ROUNDS``."""
    for _ in range(REPAIR_ROUNDS):
        solved = solve_lp(open_)
        if solved is None:
            if open_.all():
                return None
            open_ = _widen(open_, clear)
            continue
        proven, grow = judge(solved, open_)
        if proven is not None:
            return proven
        grow = grow & ~open_
        if not grow.any():
            if open_.all():
                return None
            grow[:] = True
        open_ |= grow
    return None


def _widen(open_: np.ndarray, clear: np.ndarray) -> np.ndarray:
    """Twice as many open classes: the closest calls not yet open."""
    clear = np.where(open_, -np.inf, clear)
    more = min(len(open_), 2 * max(int(open_.sum()), 1))
    wider = open_.copy()
    wider[np.argpartition(clear, more - 1)[:more]] = True
    return wider


def _worst(loss: np.ndarray, open_: np.ndarray) -> np.ndarray:
    """Fixed classes whose choice loses at the new prices, most first: as many as are open already
    (at least 16), or every loser if fewer."""
    loss = np.where(open_, 0.0, loss)
    losers = np.flatnonzero(loss > 0)
    take = max(16, int(open_.sum()))
    if len(losers) > take:
        losers = losers[np.argpartition(-loss[losers], take - 1)[:take]]
    pick = np.zeros(len(loss), bool)
    pick[losers] = True
    return pick
