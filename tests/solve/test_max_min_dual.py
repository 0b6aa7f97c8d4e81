"""The max-min LP solved through capacity prices: the same answers as the full HiGHS model."""

import numpy as np
import pytest

from apportion.solve import max_min_dual
from apportion.solve.max_min import solve_max_min
from apportion.solve.max_min_dual import solve_max_min_fast, solve_with_prices


@pytest.fixture(autouse=True)
def prices_at_any_size(monkeypatch):
    """Small instances would go straight to the full LP; these tests are about the price path."""
    monkeypatch.setattr(max_min_dual, "SMALL", 0)


def check_feasible(x, a, count, gpus, capacity):
    assert np.all(x >= 0)
    assert np.all(x.sum(axis=1) <= 1 + 1e-9)  # a class holds at most all of its time
    assert np.all((count * gpus) @ x <= capacity * (1 + 1e-9))  # capacity respected
    assert np.all(x[a == 0] == 0)  # no time where a class cannot run
    assert np.all(x[count == 0] == 0)  # classes without jobs get nothing


def throughput(x, a, count):
    """The stage-2 objective: Σ_c m_c Σ_t a_ct x_ct."""
    return float((count[:, None] * a * x).sum())


def assert_same_as_reference(a, count, gpus, capacity):
    x, z, how = solve_with_prices(a, count, gpus, capacity)
    x_ref, z_ref = solve_max_min(a, count, gpus, capacity)
    check_feasible(x, a, count, gpus, capacity)
    assert z == pytest.approx(z_ref, rel=1e-6, abs=1e-12)
    assert throughput(x, a, count) == pytest.approx(throughput(x_ref, a, count), rel=1e-6, abs=1e-12)
    return x, z, how


def philly_instance(n, num_types, seed=0):
    """The instance ``benchmarks/speed/solve.py`` measures: every job its own class, normalised throughputs."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 8], size=n, p=np.array([76627, 1818, 1870, 1643]) / 81958)
    speed = rng.uniform(0.2, 1.0, size=(1, num_types)) * rng.lognormal(0.0, 0.5, size=(n, num_types))
    steps = speed * rng.uniform(1, 20, size=(n, 1))
    capacity = np.full(num_types, max(1.0, np.ceil(gpus.sum() / 2 / num_types)))
    weights = np.where(steps > 0, capacity[None, :], 0.0)
    reference = (steps * weights).sum(axis=1) / weights.sum(axis=1)
    return steps / reference[:, None], np.ones(n), gpus.astype(np.float64), capacity


def random_instance(seed):
    """1-200 classes on 1-6 types; some with several jobs, no jobs, unrunnable types, all-zero
    rows, duplicated rows; capacity from far too little to more than every job could use."""
    rng = np.random.default_rng(seed)
    n, num_types = int(rng.integers(1, 201)), int(rng.integers(1, 7))
    a = rng.uniform(0.2, 1.0, num_types) * rng.lognormal(0.0, 0.5, (n, num_types))
    runs = rng.random((n, num_types)) >= rng.choice([0.0, 0.2, 0.5])
    runs[np.arange(n), rng.integers(0, num_types, n)] = True  # every class runs somewhere
    a *= runs
    gpus = rng.choice([1.0, 2.0, 4.0, 8.0], n, p=[0.7, 0.1, 0.1, 0.1])
    count = rng.integers(1, 5, n).astype(np.float64) if seed % 3 == 0 else np.ones(n)
    if seed % 4 == 1:
        count[rng.random(n) < 0.2] = 0.0
    if seed % 5 == 2 and n > 3:
        source, copy = rng.integers(0, n, n // 3), rng.integers(0, n, n // 3)
        a[copy] = a[source]
        if seed % 2:
            gpus[copy] = gpus[source]
    if seed % 7 == 3:
        empty = rng.random(n) < 0.1
        a[empty] = 0.0
        if seed % 2:
            count[empty] = 0.0
    scale = [0.05, 0.2, 0.5, 1.0, 3.0][seed % 5]
    capacity = np.round(np.maximum(1.0, scale * (count * gpus).sum() / num_types) * rng.uniform(0.5, 1.5, num_types))
    return a, count, gpus, np.maximum(capacity, 1.0)


def test_hand_worked_two_classes_two_types():
    """Types 0 and 1, one GPU each. Class 0: one 1-GPU job, a = (1, 3); class 1: two 1-GPU jobs,
    a = (1, 1); class 2 has no jobs. Class 0 is three times better off on type 1, class 1 is
    indifferent, so class 0 takes z/3 of type 1 and class 1's jobs share the rest:
    2z = 1 + (1 − z/3)  →  z = 6/7, with x_0 = (0, 2/7), x_1 = (1/2, 5/14) per job. Every GPU
    is then used at the level, so stage 2 has nothing left to hand out."""
    a = np.array([[1.0, 3.0], [1.0, 1.0], [2.0, 2.0]])
    count = np.array([1.0, 2.0, 0.0])
    gpus = np.ones(3)
    capacity = np.array([1.0, 1.0])

    x, z = solve_max_min_fast(a, count, gpus, capacity)

    assert z == pytest.approx(6 / 7, rel=1e-9)
    np.testing.assert_allclose(x, [[0.0, 2 / 7], [1 / 2, 5 / 14], [0.0, 0.0]], atol=1e-6)
    check_feasible(x, a, count, gpus, capacity)


def test_time_cap_sets_the_level_and_stage_two_hands_out_the_rest():
    """Class 1 (a = (1, 1)) can never exceed 1, so z = 1 although capacity allows more; stage 2
    then gives class 0 (a = (1, 2)) all of type 1: x = ((0, 1), (1, 0)), throughput 3."""
    a = np.array([[1.0, 2.0], [1.0, 1.0]])
    x, z = solve_max_min_fast(a, np.ones(2), np.ones(2), np.array([1.0, 1.0]))

    assert z == pytest.approx(1.0, rel=1e-9)
    np.testing.assert_allclose(x, [[0.0, 1.0], [1.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_same_as_the_full_lp_on_random_instances(seed):
    x, z, how = assert_same_as_reference(*random_instance(seed))

    assert how == "prices"


def test_same_as_the_full_lp_on_the_benchmark_instance():
    a, count, gpus, capacity = philly_instance(2000, 3)
    x, z, how = assert_same_as_reference(a, count, gpus, capacity)

    assert how == "prices"
    assert np.isclose(x.sum(axis=1), 1.0).any()  # the per-job time cap binds somewhere


def test_many_identical_classes_and_identical_types():
    """Ties everywhere: 12 throughput profiles repeated, and profiles equal on every type."""
    rng = np.random.default_rng(3)
    profiles = rng.lognormal(0.0, 0.5, (12, 3))
    a = np.vstack([profiles[rng.integers(0, 12, 300)], np.repeat(rng.lognormal(0.0, 0.5, (100, 1)), 3, axis=1)])
    gpus = rng.choice([1.0, 2.0, 4.0], len(a))
    x, z, how = assert_same_as_reference(a, np.ones(len(a)), gpus, np.array([150.0, 200.0, 100.0]))

    assert how == "prices"


def test_a_class_that_runs_nowhere_pins_the_level_at_zero():
    a = np.array([[1.0, 2.0], [0.0, 0.0], [0.5, 1.0]])
    x, z, _ = assert_same_as_reference(a, np.ones(3), np.ones(3), np.array([1.0, 1.0]))

    assert z == 0.0
    assert np.all(x[1] == 0)


def test_no_jobs_gives_nothing():
    x, z = solve_max_min_fast(np.ones((3, 2)), np.zeros(3), np.ones(3), np.ones(2))

    assert z == 0.0
    assert np.all(x == 0)


def test_falls_back_to_the_full_lp_when_prices_prove_nothing(monkeypatch):
    monkeypatch.setattr(max_min_dual, "_level", lambda *args: None)
    x, z, how = assert_same_as_reference(*random_instance(4))

    assert how == "fallback"


def test_few_classes_go_straight_to_the_full_lp(monkeypatch):
    monkeypatch.setattr(max_min_dual, "SMALL", 500)
    x, z, how = assert_same_as_reference(*random_instance(4))

    assert how == "small"


def test_both_stages_repair_through_one_loop_that_opens_classes_until_prices_prove_an_answer():
    # both stages' repair is max_min_dual._repair: a failed small LP opens the closest calls,
    # a disproved one the classes its prices name, and an answer is kept once proven
    seen = []

    def solve_lp(open_):
        seen.append(open_.copy())
        return None if open_.sum() < 2 else "solved"

    def judge(solved, open_):
        return ("proven", None) if open_.sum() >= 4 else (None, np.array([False, False, True, True, False, False]))

    open_ = np.array([True, False, False, False, False, False])
    clear = np.array([0.0, 0.1, 5.0, 5.0, 9.0, 9.0])
    assert max_min_dual._repair(solve_lp, judge, open_, clear) == "proven"
    assert [o.nonzero()[0].tolist() for o in seen] == [[0], [0, 1], [0, 1, 2, 3]]
    # nothing left to open and nothing proven: no answer, never a loop
    assert max_min_dual._repair(lambda o: None, judge, np.ones(3, bool), np.zeros(3)) is None


def test_a_repair_with_no_class_its_prices_disagree_with_opens_every_class():
    tries = []

    def judge(solved, open_):
        tries.append(int(open_.sum()))
        return ("proven", None) if open_.all() else (None, np.zeros(len(open_), bool))

    assert max_min_dual._repair(lambda o: "solved", judge, np.array([True, False, False]), np.zeros(3)) == "proven"
    assert tries == [1, 3]
