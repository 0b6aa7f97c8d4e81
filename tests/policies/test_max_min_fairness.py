"""Heterogeneity-aware max-min fairness, checked on cases small enough to solve by hand,
and against an independent LP over every job on random ones."""

import numpy as np
import pytest
from scipy.optimize import linprog

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.max_min_fairness import MaxMinFairness


def view(num_gpus, priority=None, index=None) -> JobView:
    n = len(num_gpus)
    return JobView(
        index=np.arange(n) if index is None else np.asarray(index),
        submit_time_s=np.zeros(n),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus),
        priority=np.ones(n) if priority is None else np.asarray(priority, dtype=float),
        total_steps=np.full(n, 1e6),
        steps_done=np.zeros(n),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1),
        queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object),
        now_s=0.0,
    )


def cluster(*capacity) -> ClusterView:
    return ClusterView(("v100", "k80", "p100")[: len(capacity)], np.asarray(capacity), np.full(len(capacity), np.nan))


# Job A runs 2 steps/s on type 0 and 1 on type 1; job B runs 1 step/s on both.
# T_ref (capacity-weighted mean over runnable types, one GPU each): A (2+1)/2 = 1.5, B 1.0.
# Normalised throughput per unit of time: A [4/3, 2/3], B [1, 1].
STEPS_AB = np.array([[2.0, 1.0], [1.0, 1.0]])


def test_normalised_throughput_divides_by_the_average_gpu_speed():
    a = ThroughputView(STEPS_AB).normalised(cluster(1, 1).capacity)

    np.testing.assert_allclose(a, [[4 / 3, 2 / 3], [1.0, 1.0]])


def test_two_jobs_two_types_each_gets_the_type_it_is_relatively_best_at():
    """B can never exceed 1 (its row sums to at most 1 at worth 1 everywhere), so the max-min
    value is z = 1. Among the allocations reaching it (B all of its time, A at least 1), the
    one that also gives out the rest puts A on type 0 alone: A = 4/3, B = 1 on type 1."""
    jobs = view([1, 1])
    tv = ThroughputView(STEPS_AB)
    policy = MaxMinFairness()

    share = policy.allocate(jobs, cluster(1, 1), tv).share
    normalised = (share * tv.normalised(cluster(1, 1).capacity, agnostic=policy.agnostic)).sum(axis=1)

    np.testing.assert_allclose(share, [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)
    np.testing.assert_allclose(normalised, [4 / 3, 1.0], atol=1e-6)
    assert normalised.min() == pytest.approx(1.0, abs=1e-6)  # the max-min value


def test_three_jobs_two_types_all_get_the_same_normalised_throughput():
    """A [4/3, 2/3] and two B-like jobs [1, 1] on one GPU of each type.

    A is relatively best on type 0 (4/3 vs 1), so it takes a share x of type 0 only; the two
    Bs split the rest, 2 - x. Equal shares: 4/3 x = (2 - x) / 2  =>  x = 6/11, and every job
    gets z = 8/11. Each B holds (1 - 6/11) / 2 = 5/22 of type 0 and 1/2 of type 1.
    """
    steps = np.array([[2.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    tv = ThroughputView(steps)
    policy = MaxMinFairness()

    share = policy.allocate(view([1, 1, 1]), cluster(1, 1), tv).share
    normalised = (share * tv.normalised(cluster(1, 1).capacity, agnostic=policy.agnostic)).sum(axis=1)

    np.testing.assert_allclose(normalised, [8 / 11] * 3, atol=1e-6)
    np.testing.assert_allclose(share, [[6 / 11, 0.0], [5 / 22, 0.5], [5 / 22, 0.5]], atol=1e-6)


def test_agnostic_counts_time_only_and_gives_both_the_same_time():
    """Every type is worth 1 to every job: two jobs, two GPUs, each gets all of its time."""
    jobs = view([1, 1])
    share = MaxMinFairness(agnostic=True).allocate(jobs, cluster(1, 1), ThroughputView(STEPS_AB)).share

    np.testing.assert_allclose(share.sum(axis=1), [1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(share.sum(axis=0), [1.0, 1.0], atol=1e-6)


def test_agnostic_time_shares_on_one_gpu_are_equal():
    # three jobs, one GPU: 1/3 of the time each, whatever their speeds
    steps = np.array([[9.0], [1.0], [3.0]])
    share = MaxMinFairness(agnostic=True).allocate(view([1, 1, 1]), cluster(1), ThroughputView(steps)).share

    np.testing.assert_allclose(share[:, 0], [1 / 3] * 3, atol=1e-6)


def test_priority_two_gets_twice_the_normalised_throughput():
    """Two equal jobs on one GPU, weights 1 and 2: x1 = z, x2 / 2 = z, x1 + x2 = 1 => z = 1/3."""
    jobs = view([1, 1], priority=[1.0, 2.0])
    share = MaxMinFairness().allocate(jobs, cluster(1), ThroughputView(np.array([[5.0], [5.0]]))).share

    np.testing.assert_allclose(share[:, 0], [1 / 3, 2 / 3], atol=1e-6)


def test_a_two_gpu_job_on_a_two_gpu_type_and_a_one_gpu_job_share_it_by_time():
    """One type of 2 GPUs: a 2-GPU job and a 1-GPU job. Capacity: 2 x2 + x1 <= 2, each x <= 1.

    ``rate``: maximise min(x1, x2): x1 = x2 = 2/3 (the 2-GPU job holds 4/3 GPUs, the other 2/3).
    ``gpu-time`` (default): maximise min(x1, 2 x2): x1 = 2 x2 = z, 2z <= 2 => z = 1: x1 = 1,
    x2 = 1/2, one GPU each.
    """
    jobs, tv = view([2, 1]), ThroughputView(np.ones((2, 1)))

    by_rate = MaxMinFairness(share_by="rate").allocate(jobs, cluster(2), tv).share
    by_gpu_time = MaxMinFairness().allocate(jobs, cluster(2), tv).share

    np.testing.assert_allclose(by_rate[:, 0], [2 / 3, 2 / 3], atol=1e-6)
    np.testing.assert_allclose(by_gpu_time[:, 0], [1 / 2, 1.0], atol=1e-6)


def test_a_one_gpu_and_a_four_gpu_job_on_four_gpus():
    """Equal speeds (normalised throughput 1 everywhere), one type of 4 GPUs: x1 + 4 x4 <= 4.

    ``rate``: x1 = x4 = z, 5z <= 4 => z = 4/5; the rest cannot raise the total (x1 may not
    rise without x4 falling below 4/5): GPU time 0.8 and 3.2.
    ``gpu-time``: x1 = 4 x4 = z would give z = 2, but x1 <= 1, so z = 1 with x4 >= 1/4; what
    is left goes to x4, up to 4 x4 <= 3: x1 = 1, x4 = 3/4: GPU time 1 and 3.
    """
    jobs, tv = view([1, 4]), ThroughputView(np.ones((2, 1)))

    by_rate = MaxMinFairness(share_by="rate").allocate(jobs, cluster(4), tv).share
    by_gpu_time = MaxMinFairness(share_by="gpu-time").allocate(jobs, cluster(4), tv).share

    np.testing.assert_allclose(by_rate[:, 0], [0.8, 0.8], atol=1e-6)
    np.testing.assert_allclose(by_gpu_time[:, 0], [1.0, 0.75], atol=1e-6)


def test_share_by_is_checked():
    with pytest.raises(ValueError, match="share_by"):
        MaxMinFairness(share_by="steps")


def test_a_job_that_runs_nowhere_gets_nothing_and_costs_nobody():
    steps = np.array([[0.0, 0.0], [1.0, 1.0]])
    share = MaxMinFairness().allocate(view([1, 1]), cluster(1, 1), ThroughputView(steps)).share

    assert share[0].tolist() == [0.0, 0.0]
    assert share[1].sum() == pytest.approx(1.0)


def independent_max_min(a, gpus, capacity):
    """max z s.t. a[j]·x[j] >= z for every job, Σ_j gpus[j] x[j,t] <= C[t], Σ_t x[j,t] <= 1."""
    n, types = a.shape
    nx = n * types
    cost = np.zeros(nx + 1)
    cost[-1] = -1.0
    fair = np.zeros((n, nx + 1))
    rows_one = np.zeros((n, nx + 1))
    for j in range(n):
        fair[j, j * types : (j + 1) * types] = -a[j]
        fair[j, -1] = 1.0
        rows_one[j, j * types : (j + 1) * types] = 1.0
    cap = np.zeros((types, nx + 1))
    for t in range(types):
        cap[t, t : nx : types] = gpus
    bounds = [(0.0, 1.0 if a[j, t] > 0 else 0.0) for j in range(n) for t in range(types)] + [(0, None)]
    result = linprog(
        cost,
        A_ub=np.vstack([fair, cap, rows_one]),
        b_ub=np.concatenate([np.zeros(n), capacity, np.ones(n)]),
        bounds=bounds,
        method="highs",
    )
    assert result.status == 0
    return -result.fun


@pytest.mark.parametrize("agnostic", [False, True])
@pytest.mark.parametrize("share_by", ["gpu-time", "rate"])
def test_matches_an_lp_over_every_job_on_random_instances(agnostic, share_by):
    rng = np.random.default_rng(99)
    for case in range(25):
        n, types = int(rng.integers(8, 31)), int(rng.integers(2, 4))
        kinds = rng.uniform(0.2, 4.0, size=(5, types)) * (rng.uniform(size=(5, types)) < 0.8)
        kinds[kinds.sum(axis=1) == 0, 0] = 1.0  # every kind runs somewhere
        steps = kinds[rng.integers(0, 5, size=n)]  # repeated rows: jobs share LP classes
        gpus = rng.choice([1, 1, 2, 4], size=n)
        priority = rng.choice([1.0, 1.0, 2.0], size=n)
        capacity = rng.integers(1, 11, size=types)
        cl, tv = cluster(*capacity), ThroughputView(steps)
        policy = MaxMinFairness(agnostic=agnostic, share_by=share_by)

        share = policy.allocate(view(gpus, priority), cl, tv).share

        weight = (gpus if share_by == "gpu-time" else 1.0) / priority
        a = tv.normalised(cl.capacity, agnostic=policy.agnostic) * weight[:, None]
        z = independent_max_min(a, gpus, capacity)
        assert (share * a).sum(axis=1).min() == pytest.approx(z, rel=1e-5, abs=1e-6), f"case {case}"
        assert np.all(share.sum(axis=1) <= 1 + 1e-6)
        assert np.all((share * gpus[:, None]).sum(axis=0) <= capacity + 1e-6)
        assert np.all(share[a == 0] == 0)


def test_the_policy_follows_jobs_across_rounds():
    """Jobs come and go; each round's answer is what a fresh policy would give."""
    rng = np.random.default_rng(3)
    kinds = np.array([[2.0, 1.0, 0.5], [1.0, 1.0, 1.0], [3.0, 0.0, 1.0]])
    cl = cluster(4, 4, 4)
    kept = MaxMinFairness()
    index = np.arange(12)
    kind = rng.integers(0, 3, size=40)
    gpus = rng.choice([1, 2, 4], size=40)
    for start in range(0, 28, 2):
        rows = index + start  # two leave, two arrive
        tv = ThroughputView(kinds[kind[rows]])
        again = kept.allocate(view(gpus[rows], index=rows), cl, tv).share
        fresh = MaxMinFairness().allocate(view(gpus[rows], index=rows), cl, tv).share
        a = tv.normalised(cl.capacity, agnostic=kept.agnostic) * gpus[rows][:, None]  # gpu-time

        assert (again * a).sum(axis=1).min() == pytest.approx((fresh * a).sum(axis=1).min(), abs=1e-6)


def test_many_distinct_jobs_are_solved_through_prices_with_the_same_optimum():
    """Above max_min_dual.SMALL classes the policy prices the capacity rows instead of solving
    the full LP; the max-min value and the total handed out are the full LP's."""
    from apportion.solve import max_min_dual
    from apportion.solve.max_min import solve_max_min

    rng = np.random.default_rng(7)
    n = max_min_dual.SMALL + 100
    steps = rng.lognormal(0.0, 0.5, size=(n, 3)) * rng.uniform(1, 20, size=(n, 1))
    jobs, tv = view(np.ones(n, dtype=np.int64)), ThroughputView(steps)
    capacity = cluster(n / 6, n / 6, n / 6)
    a = tv.normalised(capacity.capacity)

    share = MaxMinFairness().allocate(jobs, capacity, tv).share
    x_ref, z_ref = solve_max_min(a, np.ones(n), np.ones(n), capacity.capacity)

    assert (share * a).sum(axis=1).min() == pytest.approx(z_ref, rel=1e-6)
    assert (share * a).sum() == pytest.approx((x_ref * a).sum(), rel=1e-6)
    assert np.all(share.sum(axis=0) <= capacity.capacity * (1 + 1e-9))
