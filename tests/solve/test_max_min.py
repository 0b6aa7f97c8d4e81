"""The max-min LP over job classes: right answers, and the same answers when re-solved warm."""

import numpy as np
import pytest
from scipy.optimize import linprog

from apportion.solve.max_min import MaxMinModel, solve_max_min


def per_job_max_min(a, count, gpus, capacity):
    """An independent LP with one row per job (classes expanded m[c] times): max z."""
    rows = np.repeat(np.arange(len(a)), count.astype(int))
    a_j, s_j = a[rows], gpus[rows]
    n, types = a_j.shape
    nx = n * types
    fair = np.zeros((n, nx + 1))
    one = np.zeros((n, nx + 1))
    for j in range(n):
        fair[j, j * types : (j + 1) * types] = -a_j[j]
        fair[j, -1] = 1.0
        one[j, j * types : (j + 1) * types] = 1.0
    cap = np.zeros((types, nx + 1))
    for t in range(types):
        cap[t, t:nx:types] = s_j
    A = np.vstack([fair, cap, one])
    b = np.concatenate([np.zeros(n), capacity, np.ones(n)])
    bounds = [(0.0, 1.0 if a_j[j, t] > 0 else 0.0) for j in range(n) for t in range(types)] + [(0, None)]
    cost = np.zeros(nx + 1)
    cost[-1] = -1.0
    first = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs")
    assert first.status == 0
    return -first.fun


def can_rise_without_lowering_a_smaller_one(c, levels, a, count, gpus, capacity):
    """Per class (jobs of a class share a value): the most class ``c`` could reach while every
    other counted class at a level ≤ c's (to solver tolerance) keeps at least its level."""
    used = np.flatnonzero(count > 0)
    types = a.shape[1]
    nv = len(a) * types
    A, b = [], []
    for t in range(types):  # capacity
        row = np.zeros(nv)
        row[t::types] = count * gpus
        A.append(row)
        b.append(capacity[t])
    for d in used:
        row = np.zeros(nv)  # a class holds at most all of its time
        row[d * types:(d + 1) * types] = 1.0
        A.append(row)
        b.append(1.0)
        if d != c and levels[d] <= levels[c] * (1 + 1e-3):  # smaller (or equal, to 0.1%) classes keep theirs
            row = np.zeros(nv)
            row[d * types:(d + 1) * types] = -a[d]
            A.append(row)
            b.append(-levels[d] * (1 - 1e-9))  # the solution itself meets these, so this stays feasible
    cost = np.zeros(nv)
    cost[c * types:(c + 1) * types] = -a[c]
    bounds = [(0.0, 1.0 if a[k, t] > 0 else 0.0) for k in range(len(a)) for t in range(types)]
    best = linprog(cost, A_ub=np.array(A), b_ub=np.array(b), bounds=bounds, method="highs")
    assert best.status == 0
    return -best.fun


def check_feasible(x, a, count, gpus, capacity):
    used = count > 0
    assert np.all(x[used].sum(axis=1) <= 1 + 1e-6)  # rows <= 1 (HiGHS is feasible to 1e-7)
    assert np.all((count * gpus) @ x <= capacity + 1e-6)  # capacity respected
    assert np.all(x[a == 0] == 0)  # no time where a class cannot run


def test_one_type_shared_by_two_classes():
    """Capacity 3 of one type: class 0 has two 1-GPU jobs, class 1 one 2-GPU job, all worth 1.
    2 x0 + 2 x1 <= 3, maximise min(x0, x1): x0 = x1 = 3/4."""
    x, z = solve_max_min(np.array([[1.0], [1.0]]), np.array([2.0, 1.0]), np.array([1.0, 2.0]), np.array([3]))

    assert z == pytest.approx(0.75)
    np.testing.assert_allclose(x[:, 0], [0.75, 0.75], atol=1e-6)


def test_leftover_capacity_is_still_handed_out():
    """Two types of one GPU; class 0 runs only on type 0, class 1 everywhere (worth 1 each).
    z = 1 (each gets a whole GPU), and stage 2 never idles a GPU someone could use."""
    x, z = solve_max_min(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 1.0]), np.ones(2), np.array([1, 1]))

    assert z == pytest.approx(1.0)
    np.testing.assert_allclose(x, [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)


def test_a_class_with_no_jobs_gets_no_say():
    """Class 1 would drag z down to 0.5, but it has no jobs this time."""
    a = np.array([[1.0], [1.0]])
    x, z = solve_max_min(a, np.array([1.0, 0.0]), np.array([1.0, 4.0]), np.array([2]))

    assert z == pytest.approx(1.0)
    assert x[0, 0] == pytest.approx(1.0)


def random_instance(rng, classes, types):
    a = rng.uniform(0.1, 3.0, size=(classes, types)) * (rng.uniform(size=(classes, types)) < 0.75)
    a[a.sum(axis=1) == 0, int(rng.integers(types))] = 1.0
    gpus = rng.choice([1.0, 2.0, 4.0], size=classes)
    capacity = rng.integers(1, 13, size=types).astype(float)
    return a, gpus, capacity


def test_water_filling_is_max_min_fair_on_random_instances():
    rng = np.random.default_rng(1)
    for case in range(20):
        types = int(rng.integers(2, 4))
        classes = int(rng.integers(3, 8))
        a, gpus, capacity = random_instance(rng, classes, types)
        count = rng.integers(0, 6, size=classes).astype(float)
        count[0] = max(count[0], 1.0)
        while count.sum() < 8 or count.sum() > 30:
            count = rng.integers(0, 6, size=classes).astype(float)
            count[0] = max(count[0], 1.0)

        x, z = solve_max_min(a, count, gpus, capacity, water_filling=True)

        want_z = per_job_max_min(a, count, gpus, capacity)
        assert z == pytest.approx(want_z, abs=1e-6), f"case {case}"
        levels = (a * x).sum(axis=1)
        assert levels[count > 0].min() == pytest.approx(want_z, abs=1e-6)
        check_feasible(x, a, count, gpus, capacity)
        # max-min fair in the strong sense: no class can rise without lowering a smaller one
        for c in np.flatnonzero(count > 0):
            best = can_rise_without_lowering_a_smaller_one(c, levels, a, count, gpus, capacity)
            assert best <= levels[c] * (1 + 1e-3) + 1e-6, f"case {case}: class {c} could rise from {levels[c]} to {best}"


def test_gavels_single_level_lp_reaches_the_same_smallest_level():
    rng = np.random.default_rng(4)
    for case in range(10):
        a, gpus, capacity = random_instance(rng, int(rng.integers(3, 8)), int(rng.integers(2, 4)))
        count = rng.integers(1, 6, size=len(a)).astype(float)

        x, z = solve_max_min(a, count, gpus, capacity)

        assert z == pytest.approx(per_job_max_min(a, count, gpus, capacity), abs=1e-6), f"case {case}"
        # shares under 1e-6 are dropped as solver noise, which can shave that much off a level
        assert (a * x).sum(axis=1).min() == pytest.approx(z, abs=1e-5)
        check_feasible(x, a, count, gpus, capacity)


def test_warm_resolves_give_the_same_answers_as_fresh_solves():
    """One model re-solved as counts change (classes arriving, emptying, coming back) gives the
    same z and the same total as a fresh one-off solve of each count vector."""
    rng = np.random.default_rng(8)
    types = 3
    a, gpus, capacity = random_instance(rng, 10, types)
    model = MaxMinModel(capacity)
    registered = 0
    for step in range(40):
        if registered < len(a) and (registered < 3 or rng.uniform() < 0.3):
            assert model.add_class(a[registered], gpus[registered]) == registered
            registered += 1
        count = rng.integers(0, 5, size=registered).astype(float)
        if step % 7 == 3:
            count[:] = 0.0
        count[int(rng.integers(registered))] += 1  # never an empty cluster of jobs

        x, z = model.solve(count)
        fresh_x, fresh_z = solve_max_min(a[:registered], count, gpus[:registered], capacity)

        assert z == pytest.approx(fresh_z, abs=1e-6), f"step {step}"
        total = (count[:, None] * a[:registered] * x).sum()
        assert total == pytest.approx((count[:, None] * a[:registered] * fresh_x).sum(), abs=1e-5)
        check_feasible(x, a[:registered], count, gpus[:registered], capacity)
