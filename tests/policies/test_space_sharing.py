"""Space sharing: pairs of one-GPU jobs on one GPU, in the LP policies, worked out by hand,
and the bounded candidate list checked against every pair on a catalog instance."""

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy, pairs
from apportion.workloads.catalog import builtin_throughputs


def view(kind, num_gpus=None, priority=None) -> JobView:
    n = len(kind)
    return JobView(
        index=np.arange(n), submit_time_s=np.zeros(n), kind=np.asarray(kind),
        num_gpus=np.ones(n, dtype=np.int64) if num_gpus is None else np.asarray(num_gpus),
        priority=np.ones(n) if priority is None else np.asarray(priority, dtype=float),
        total_steps=np.full(n, 1e6), steps_done=np.zeros(n), attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan), running_type=np.full(n, -1),
        queue=np.full(n, "", dtype=object), user=np.full(n, "", dtype=object), now_s=0.0,
    )


def one_gpu(count=1.0) -> ClusterView:
    return ClusterView(("v100",), np.array([count]), np.array([2.48]))


def pair_rates(rate_a: float, rate_b: float) -> np.ndarray:
    """[2, 2, 1]: kind 0 runs rate_a beside kind 1, which runs rate_b; nothing else measured."""
    rates = np.full((2, 2, 1), np.nan)
    rates[0, 1, 0], rates[1, 0, 0] = rate_a, rate_b
    return rates


def test_max_min_shares_one_gpu_between_two_jobs_as_worked_out_by_hand():
    """Both jobs run 1 step/s alone; together 0.8 and 0.7. Time-slicing gives each 0.5. With pair
    time y and B alone for the rest (A alone would only help the larger), A = 0.8y and
    B = 0.7y + (1 − y): equal at y = 10/11, so z = 8/11 ≈ 0.727 > 0.5."""
    allocation = make_policy("max-min-fairness", space_sharing=True).allocate(
        view([0, 1]), one_gpu(), ThroughputView(np.ones((2, 1)), pair_rates(0.8, 0.7)))

    assert allocation.pair_jobs.tolist() == [[0, 1]]
    np.testing.assert_allclose(allocation.pair_share, [[10 / 11]], atol=1e-6)
    np.testing.assert_allclose(allocation.share, [[0.0], [1 / 11]], atol=1e-6)
    rates = np.array([[[0.8, 0.7]]])
    np.testing.assert_allclose(allocation.effective_throughput(np.ones((2, 1)), rates), [8 / 11, 8 / 11], atol=1e-6)


def test_max_throughput_runs_a_pair_that_beats_time_slicing_all_the_time():
    allocation = make_policy("max-throughput", space_sharing=True).allocate(
        view([0, 1]), one_gpu(), ThroughputView(np.ones((2, 1)), pair_rates(0.8, 0.7)))

    assert allocation.pair_jobs.tolist() == [[0, 1]]
    np.testing.assert_allclose(allocation.pair_share, [[1.0]], atol=1e-6)
    assert allocation.share.sum() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("rate_a, rate_b", [(0.5, 0.4), (0.0, 0.0)])
def test_a_pair_no_better_than_time_slicing_or_that_does_not_fit_is_never_formed(rate_a, rate_b):
    allocation = make_policy("max-min-fairness", space_sharing=True).allocate(
        view([0, 1]), one_gpu(), ThroughputView(np.ones((2, 1)), pair_rates(rate_a, rate_b)))

    assert not allocation.has_pairs
    np.testing.assert_allclose(allocation.share, [[0.5], [0.5]], atol=1e-6)


def test_min_makespan_pairs_two_jobs_that_finish_sooner_together():
    """R = 1e6 steps each at 1 step/s alone: taking turns on one GPU ends at 2R s; together at
    0.8 steps/s both end at R / 0.8."""
    policy = make_policy("min-makespan", space_sharing=True)
    jobs = view([0, 1])
    allocation = policy.allocate(jobs, one_gpu(), ThroughputView(np.ones((2, 1)), pair_rates(0.8, 0.8)))

    np.testing.assert_allclose(allocation.pair_share, [[1.0]], atol=1e-6)
    assert policy.makespan_s == pytest.approx(1e6 / 0.8, rel=1e-6)


def test_finish_time_fairness_with_a_pair_beats_the_isolated_share():
    """Two jobs, one GPU: the isolated 1/2 share finishes each at 2·R (R = remaining steps at 1
    step/s). Sharing at 0.8 each finishes at R / 0.8: the worst ratio falls from 1 to 0.625."""
    policy = make_policy("finish-time-fairness", space_sharing=True)
    allocation = policy.allocate(view([0, 1]), one_gpu(), ThroughputView(np.ones((2, 1)), pair_rates(0.8, 0.8)))

    assert policy.worst_ratio == pytest.approx(0.625, rel=2e-4)
    assert allocation.pair_share.sum() == pytest.approx(1.0, abs=1e-5)


def test_multi_gpu_jobs_are_never_paired():
    allocation = make_policy("max-throughput", space_sharing=True).allocate(
        view([0, 1], num_gpus=[2, 2]), one_gpu(2.0), ThroughputView(np.ones((2, 1)), pair_rates(0.9, 0.9)))

    assert not allocation.has_pairs


def test_jobs_of_one_class_get_equal_time_alone_and_in_pairs():
    """Three jobs of kind 0 and two of kind 1 on two GPUs: the class solution is handed to
    concrete job pairs so that every job of a class holds the same share, and no GPU or job is
    asked for more than it has."""
    allocation = make_policy("max-min-fairness", space_sharing=True).allocate(
        view([0, 0, 0, 1, 1]), one_gpu(2.0), ThroughputView(np.ones((5, 1)), pair_rates(0.8, 0.7)))
    pair_time = np.zeros(5)
    np.add.at(pair_time, allocation.pair_jobs.reshape(-1), np.repeat(allocation.pair_share[:, 0], 2))

    assert allocation.has_pairs
    np.testing.assert_allclose(pair_time[:3], pair_time[0], atol=1e-9)
    np.testing.assert_allclose(pair_time[3:], pair_time[3], atol=1e-9)
    assert np.all(allocation.time_fraction() <= 1 + 1e-9)
    assert allocation.gpus_used(np.ones(5))[0] <= 2 + 1e-9
    assert set(map(tuple, allocation.pair_jobs.tolist())) <= {(a, b) for a in range(3) for b in range(3, 5)}


def catalog_instance(n: int, seed: int):
    table = builtin_throughputs()
    types = ("k80", "p100", "v100")
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, len(table.kinds), size=n)
    gpus = rng.choice([1, 1, 1, 1, 2], size=n)
    steps = np.nan_to_num(table.steps_per_s[kind[:, None], [0, 1, 2], np.log2(gpus).astype(int)[:, None]])
    jobs = view(kind, num_gpus=gpus, priority=rng.choice([1.0, 2.0], size=n))
    cluster = ClusterView(types, np.full(3, max(1.0, gpus.sum() // 6)), np.array([0.9, 1.46, 2.48]))
    return jobs, cluster, ThroughputView(steps, table.pair_matrix(types))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bounded_partner_list_is_within_half_a_percent_of_every_pair(seed):
    jobs, cluster, throughputs = catalog_instance(300, seed)
    value = throughputs.normalised(cluster.capacity) / jobs.priority[:, None]

    _, bounded = pairs.solve_max_min(jobs, cluster, throughputs, value)
    _, exact = pairs.solve_max_min(jobs, cluster, throughputs, value, all_pairs=True)
    problem = pairs.sharing_problem(jobs, throughputs, value)
    every = pairs.sharing_problem(jobs, throughputs, value, all_pairs=True)

    assert bounded == pytest.approx(exact, rel=5e-3)
    assert bounded <= exact * (1 + 1e-6)
    # each class chose at most DEFAULT_PARTNERS groups × CLASSES_PER_GROUP partners
    assert len(problem.pair_class) <= len(problem.count) * pairs.DEFAULT_PARTNERS * pairs.CLASSES_PER_GROUP
    assert len(problem.pair_class) < len(every.pair_class)


def test_pairs_beat_time_slicing_on_the_catalog():
    jobs, cluster, throughputs = catalog_instance(300, 0)
    value = throughputs.normalised(cluster.capacity) / jobs.priority[:, None]
    with_pairs = pairs.solve_max_min(jobs, cluster, throughputs, value)[1]
    without = pairs.solve_max_min(jobs, cluster, ThroughputView(throughputs.steps_per_s), value)[1]

    assert with_pairs > without


def test_partitioned_space_sharing_is_feasible_for_the_whole_cluster():
    jobs, cluster, throughputs = catalog_instance(400, 3)
    allocation = make_policy("max-min-fairness", space_sharing=True, partitions=4).allocate(jobs, cluster, throughputs)

    assert allocation.has_pairs
    assert np.all(allocation.time_fraction() <= 1 + 1e-6)
    assert np.all(allocation.gpus_used(jobs.num_gpus) <= cluster.capacity + 1e-6)
    assert np.all(jobs.num_gpus[allocation.pair_jobs] == 1)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="las", space_sharing=True), "--space-sharing applies to"),
    (dict(name="max-min-fairness", space_sharing=True, water_filling=True), "cannot be combined"),
    (dict(name="min-cost", space_sharing=True, slo=True), "cannot be combined"),
])
def test_space_sharing_where_it_does_not_apply_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_policy(kwargs.pop("name"), **kwargs)
