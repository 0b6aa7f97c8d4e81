"""finish-time-fairness, min-makespan, max-throughput, min-cost and POP partitioning on instances
small enough to work out by hand or by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.policies.finish_time_fairness import FinishTimeFairness
from apportion.policies.min_cost import MinCost
from apportion.policies.min_makespan import MinMakespan
from apportion.policies.max_throughput import MaxThroughput


def view(n, *, gpus=None, total=None, done=None, submit=None, now=0.0, deadline=None, priority=None):
    return JobView(
        index=np.arange(n),
        submit_time_s=np.zeros(n) if submit is None else np.asarray(submit, float),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64) if gpus is None else np.asarray(gpus),
        priority=np.ones(n) if priority is None else np.asarray(priority, float),
        total_steps=np.full(n, 100.0) if total is None else np.asarray(total, float),
        steps_done=np.zeros(n) if done is None else np.asarray(done, float),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1),
        queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object),
        now_s=now,
        deadline_s=None if deadline is None else np.asarray(deadline, float),
    )


def cluster(*capacity, prices=None):
    types = ("v100", "k80", "p100")[: len(capacity)]
    price = np.full(len(capacity), np.nan) if prices is None else np.asarray(prices, float)
    return ClusterView(types, np.asarray(capacity, float), price)


def test_min_makespan_on_one_gpu_runs_the_jobs_back_to_back():
    # one GPU; A needs 100 steps at 1/s, B 300 steps at 3/s: each needs 100 s alone, so the
    # earliest both can finish is 200 s, with each holding the GPU half of the time
    policy = MinMakespan()
    allocation = policy.allocate(view(2, total=[100, 300]), cluster(1), ThroughputView(np.array([[1.0], [3.0]])))

    assert policy.makespan_s == pytest.approx(200.0)
    np.testing.assert_allclose(allocation.share, [[0.5], [0.5]], atol=1e-6)


def test_min_makespan_puts_each_job_where_it_is_relatively_fastest():
    # A runs 4/s on v100 and 1/s on k80; B 2/s on both; 400 steps each, one GPU of each type.
    # A on v100 and B on k80 finish together at 200 s: A 400/4 = 100 s, B 400/2 = 200 s,
    # and no split does better (B alone needs 200 s on either type).
    policy = MinMakespan()
    policy.allocate(view(2, total=[400, 400]), cluster(1, 1), ThroughputView(np.array([[4.0, 1.0], [2.0, 2.0]])))

    assert policy.makespan_s == pytest.approx(200.0)


def test_max_throughput_gives_each_type_to_the_job_it_speeds_up_most():
    # normalised by each job's mean speed: A = [4/2.5, 1/2.5] = [1.6, 0.4], B = [1, 1];
    # A on v100 and B on k80 totals 2.6, the most any allocation reaches
    allocation = MaxThroughput().allocate(view(2), cluster(1, 1), ThroughputView(np.array([[4.0, 1.0], [2.0, 2.0]])))

    np.testing.assert_allclose(allocation.share, [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)


def test_min_cost_prefers_the_type_with_most_throughput_per_dollar():
    # one job; v100 at $3/h runs it 3× faster than k80 at $0.9/h: 3/3 = 1 < 1/0.9 per dollar
    steps = np.array([[3.0, 1.0]])
    allocation = MinCost().allocate(view(1), cluster(1, 1, prices=[3.0, 0.9]), ThroughputView(steps))

    np.testing.assert_allclose(allocation.share, [[0.0, 1.0]], atol=1e-6)


def test_min_cost_with_a_deadline_pays_for_the_fast_type():
    # 900 steps due in 400 s need 2.25 steps/s; the k80 alone gives 1. With x on the v100 and
    # 1 − x on the k80, 3x + (1 − x) ≥ 2.25 needs x ≥ 0.625; per dollar the k80 is better
    # (normalised 0.5 / $0.9 > 1.5 / $3), so the cheapest allocation is exactly x = 0.625
    steps = np.array([[3.0, 1.0]])
    policy = MinCost(slo=True)
    allocation = policy.allocate(
        view(1, total=[900], deadline=[400.0]), cluster(1, 1, prices=[3.0, 0.9]), ThroughputView(steps)
    )

    rate = (allocation.share * steps).sum()
    assert rate >= 2.25 - 1e-6
    np.testing.assert_allclose(allocation.share, [[0.625, 0.375]], atol=1e-6)
    assert len(policy.unmeetable) == 0


def test_min_cost_reports_a_deadline_no_allocation_can_meet():
    # 10,000 steps in 100 s need 100 steps/s; the fastest type gives 3: reported, job still runs
    policy = MinCost(slo=True)
    allocation = policy.allocate(
        view(2, total=[10_000, 100], deadline=[100.0, np.nan]),
        cluster(1, 1, prices=[3.0, 0.9]),
        ThroughputView(np.array([[3.0, 1.0], [3.0, 1.0]])),
    )

    assert policy.unmeetable.tolist() == [0]
    assert allocation.share[0].sum() > 0


def test_min_cost_without_prices_says_which_types_lack_one():
    with pytest.raises(ValueError, match="k80"):
        MinCost().allocate(view(1), cluster(1, 1, prices=[3.0, np.nan]), ThroughputView(np.array([[1.0, 1.0]])))


def brute_force_worst_ratio(steps, capacity, remaining, elapsed, isolated_finish, grid=200):
    """min over X of max_j ρ_j on a grid of time shares, one type, two jobs."""
    best = np.inf
    for x0 in np.linspace(0, 1, grid + 1):
        for x1 in np.linspace(0, 1, grid + 1):
            if x0 + x1 > capacity[0] + 1e-12:
                continue
            rates = np.array([x0, x1]) * steps[:, 0]
            if np.any(rates <= 0):
                continue
            ratio = (elapsed + remaining / rates) / isolated_finish
            best = min(best, ratio.max())
    return best


def test_finish_time_fairness_matches_brute_force():
    # two jobs share one GPU; B has run 100 s already and has less left
    steps = np.array([[1.0], [2.0]])
    jobs = view(2, total=[300, 200], done=[0, 100], submit=[100, 0], now=100.0)
    policy = FinishTimeFairness()
    allocation = policy.allocate(jobs, cluster(1), ThroughputView(steps))

    elapsed = jobs.elapsed_s
    isolated = policy.isolated_rate(jobs, cluster(1), ThroughputView(steps))
    isolated_finish = elapsed + jobs.remaining_steps / isolated
    expected = brute_force_worst_ratio(steps, np.array([1.0]), jobs.remaining_steps, elapsed, isolated_finish)
    assert policy.worst_ratio == pytest.approx(expected, rel=2e-3)
    rates = (allocation.share * steps).sum(axis=1)
    achieved = ((elapsed + jobs.remaining_steps / rates) / isolated_finish).max()
    assert achieved <= policy.worst_ratio * (1 + 1e-4)


def test_finish_time_fairness_never_does_worse_than_an_isolated_share():
    rng = np.random.default_rng(3)
    for _ in range(5):
        n = 12
        steps = rng.uniform(0.5, 4.0, size=(n, 3))
        jobs = view(n, gpus=rng.choice([1, 2], n), total=rng.uniform(100, 1000, n), now=50.0,
                    submit=rng.uniform(0, 50, n))
        policy = FinishTimeFairness()
        policy.allocate(jobs, cluster(2, 3, 4), ThroughputView(steps))
        assert policy.worst_ratio <= 1.0 + 1e-6


@pytest.mark.parametrize("name", ["max-min-fairness", "finish-time-fairness", "min-makespan", "max-throughput"])
def test_partitioned_allocations_are_feasible_for_the_whole_cluster(name):
    rng = np.random.default_rng(7)
    n = 60
    steps = rng.uniform(0.5, 4.0, size=(n, 3))
    gpus = rng.choice([1, 1, 2, 4], n)
    capacity = np.array([8.0, 6.0, 4.0])
    jobs = view(n, gpus=gpus, total=rng.uniform(100, 1000, n))
    policy = make_policy(name, partitions=4)

    share = policy.allocate(jobs, cluster(*capacity), ThroughputView(steps)).share

    assert np.all(share.sum(axis=1) <= 1 + 1e-6)
    assert np.all((share * gpus[:, None]).sum(axis=0) <= capacity + 1e-6)
    if name != "max-throughput":  # the fairness objectives give every job some time
        assert np.all(share.sum(axis=1) > 0)


def test_a_job_stays_in_its_partition_across_rounds():
    policy = make_policy("max-min-fairness", partitions=4)
    first = policy.partition_of(np.arange(1000))
    again = policy.partition_of(np.arange(1000))

    np.testing.assert_array_equal(first, again)
    assert set(np.bincount(first).tolist()) and np.bincount(first).min() > 200  # roughly even


def test_partitioning_an_ordering_policy_is_refused():
    with pytest.raises(ValueError, match="LP policies"):
        make_policy("las", partitions=2)


def test_every_lp_policy_completes_a_small_replay():
    from apportion.core import JobTable, ThroughputTable
    from apportion.core.cluster import Cluster, NodeGroup
    from apportion.sim import simulate

    table = ThroughputTable(("a", "b"), ("v100", "k80"), (1, 2, 4, 8),
                            np.array([[[1.0, 2, 4, 8], [0.5, 1, 2, 4]], [[2.0, 4, 8, 16], [1, 2, 4, 8]]]))
    rng = np.random.default_rng(0)
    n = 40
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(n)], submit_time_s=np.sort(rng.uniform(0, 7200, n)),
                          kind_names=rng.choice(["a", "b"], n), num_gpus=rng.choice([1, 1, 2], n),
                          total_steps=rng.uniform(100, 3000, n), kinds=("a", "b"))
    cl = Cluster((NodeGroup("v100", 4, 4, 3.06), NodeGroup("k80", 4, 4, 0.9)))
    for name, options in itertools.chain(
        ((n, {}) for n in ("finish-time-fairness", "min-makespan", "max-throughput", "min-cost")),
        [("max-min-fairness", {"partitions": 2})],
    ):
        result = simulate(jobs, cl, table, make_policy(name, **options))
        assert result.summary["completed"] == n, name
        np.testing.assert_allclose(result.steps_done, jobs.total_steps)
