"""The goodput policy: its choice against many random and greedy ones on small instances, and
what it does on hand-made ones (a lone job, more jobs than GPUs, a fast and a slow GPU type)."""

import numpy as np
import pytest

from apportion.core.elastic import ElasticView
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.workloads.elastic_kinds import builtin_elastic_kinds

KINDS = builtin_elastic_kinds(("t4", "v100"))


def cluster(t4: int, v100: int = 0) -> ClusterView:
    types = ("t4", "v100") if v100 else ("t4",)
    capacity = np.array([t4, v100] if v100 else [t4])
    return ClusterView(types, capacity, np.full(len(types), np.nan))


def elastic_jobs(kinds: list[str], *, progress=None, attained=None, gpu_types=("t4", "v100"), now=3600.0,
                 running_type=None, gpus_now=None, first_start=None) -> JobView:
    n = len(kinds)
    library = KINDS.for_types(gpu_types)
    kind = np.array([library.index(k) for k in kinds])
    progress = np.zeros(n) if progress is None else np.asarray(progress, dtype=float)
    return JobView(
        index=np.arange(n), submit_time_s=np.zeros(n), kind=kind, num_gpus=np.ones(n, dtype=np.int64),
        priority=np.ones(n), total_steps=library.target_examples[kind], steps_done=progress * library.target_examples[kind],
        attained_service_s=np.zeros(n) if attained is None else np.asarray(attained, dtype=float),
        first_start_s=np.full(n, np.nan) if first_start is None else np.asarray(first_start, dtype=float),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "", dtype=object), user=np.full(n, "", dtype=object), now_s=now,
        elastic=ElasticView(
            kinds=library, min_gpus=np.ones(n, dtype=np.int64), max_gpus=np.full(n, 64),
            batch_size=library.init_batch[kind], noise_scale=library.noise_scale_at(kind, progress),
            gpus_now=np.zeros(n, dtype=np.int64) if gpus_now is None else np.asarray(gpus_now),
            restarts=np.zeros(n, dtype=np.int64), gpus_per_node=np.full(len(gpu_types), 4)),
    )


NO_RATES = ThroughputView(np.zeros((0, 0)))


def best_of_random_and_greedy(problem, capacity, tries: int, rng) -> float:
    """The best total value among ``tries`` random feasible choices and a greedy one per random order."""
    n, m = problem.value.shape
    best = 0.0
    for _ in range(tries):
        left = capacity.astype(float).copy()
        total = 0.0
        greedy = rng.random() < 0.5
        for j in rng.permutation(n):
            options = np.flatnonzero(np.isfinite(problem.value[j]))
            if greedy:  # the best configuration that still fits
                options = options[np.argsort(-problem.value[j, options])]
            else:
                options = rng.permutation(options)[: rng.integers(0, len(options) + 1)]
            for c in options:
                t = problem.config_type[c]
                if problem.gpus[j, c] <= left[t]:
                    left[t] -= problem.gpus[j, c]
                    total += problem.value[j, c]
                    break
        best = max(best, total)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_its_choice_is_at_least_as_good_as_the_best_of_many_random_and_greedy_ones(seed):
    rng = np.random.default_rng(seed)
    names = list(rng.choice(KINDS.names, size=int(rng.integers(3, 7))))
    jobs = elastic_jobs(names, progress=rng.random(len(names)), attained=rng.random(len(names)) * 1e4)
    view = cluster(int(rng.integers(4, 9)), int(rng.integers(0, 9)) * (seed % 2))
    if len(view.gpu_types) == 1:
        jobs = elastic_jobs(names, progress=rng.random(len(names)), gpu_types=("t4",))
    for exact in (True, False):
        policy = make_policy("goodput", exact=exact)
        problem = policy.problem(jobs, view, NO_RATES)
        policy.allocate(jobs, view, NO_RATES)
        choice = policy.last_choice
        others = best_of_random_and_greedy(problem, view.capacity, 3000, rng)

        assert choice.objective >= others - 1e-9
        assert choice.bound >= choice.objective
        if exact:
            assert choice.gap < 1e-3


def test_a_lone_job_gets_as_many_gpus_as_still_pay_and_a_larger_batch_late_in_training():
    policy = make_policy("goodput")
    early = policy.allocate(elastic_jobs(["cifar10"], progress=[0.0], gpu_types=("t4",)), cluster(64), NO_RATES)
    late = make_policy("goodput").allocate(elastic_jobs(["cifar10"], progress=[0.9], gpu_types=("t4",)), cluster(64),
                                           NO_RATES)

    # early, the gradient is clean: a big batch wastes examples, so more GPUs stop paying sooner
    assert 1 <= early.num_gpus[0] < late.num_gpus[0] <= 64
    assert early.batch_size[0] < late.batch_size[0] <= KINDS.max_batch[KINDS.index("cifar10")]


def test_with_more_jobs_than_gpus_each_runs_on_one_and_the_least_served_run_first():
    jobs = elastic_jobs(["ncf"] * 6, attained=[500, 0, 300, 100, 400, 200], gpu_types=("t4",))
    allocation = make_policy("goodput").allocate(jobs, cluster(4), NO_RATES)

    running = allocation.share[:, 0] == 1
    assert running.tolist() == [False, True, False, True, False, True] or running.sum() == 4
    assert sorted(np.flatnonzero(running).tolist()) == [1, 2, 3, 5]
    assert allocation.num_gpus[running].tolist() == [1, 1, 1, 1]


def test_it_puts_the_job_a_fast_gpu_helps_most_on_the_fast_gpus():
    """CIFAR-10 runs ~2x faster on a v100 than a t4, DeepSpeech2 ~1.6x: given one v100 and one t4,
    CIFAR-10 takes the v100. The heterogeneity-blind variant sees two equal GPUs."""
    jobs = elastic_jobs(["deepspeech2", "cifar10"], progress=[0.5, 0.5])
    aware = make_policy("goodput").allocate(jobs, cluster(1, 1), NO_RATES)

    assert aware.share.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    blind = make_policy("goodput:agnostic").problem(jobs, cluster(1, 1), NO_RATES)
    assert np.allclose(blind.value[:, 0], blind.value[:, blind.config_type.tolist().index(1)])


def test_a_running_job_is_not_resized_for_a_small_gain_when_young():
    """Age 15 s with a 30 s restart cost: any other configuration counts (15 − 0) / (15 + 30) = 1/3
    of its speedup; 4 GPUs instead of 2 do not make up for that. Without the cost, it grows."""
    jobs = elastic_jobs(["cifar10"], progress=[0.5], gpu_types=("t4",), now=15.0, running_type=[0], gpus_now=[2],
                        first_start=[0.0])
    allocation = make_policy("goodput", restart_cost_s=30.0).allocate(jobs, cluster(4), NO_RATES)
    assert allocation.num_gpus.tolist() == [2]
    grown = make_policy("goodput", restart_cost_s=0.0).allocate(jobs, cluster(4), NO_RATES)
    assert grown.num_gpus.tolist() == [4]


def test_a_job_spread_over_more_nodes_than_it_needs_is_valued_where_it_lies():
    """BERT halfway through, on 4 GPUs over two nodes, does 47 examples/s at its best batch (its
    all-reduce crosses nodes), against 53 on one node. Another BERT runs on 1 GPU; 6 GPUs in all.
    Valued as if on one node, the spread job keeps its 4 and the other grows to 2; valued where it
    lies (Pollux values a placement, not a count), the two swap sizes."""
    from dataclasses import replace

    from apportion.core.elastic import goodput_table

    jobs = elastic_jobs(["bert", "bert"], progress=[0.5, 0.5], gpu_types=("t4",), running_type=[0, 0],
                        gpus_now=[4, 1], first_start=[0.0, 0.0])
    spread = replace(jobs, elastic=replace(jobs.elastic, nodes_now=np.array([2, 1])))
    tight = replace(jobs, elastic=replace(jobs.elastic, nodes_now=np.array([1, 1])))

    assert make_policy("goodput").allocate(tight, cluster(6), NO_RATES).num_gpus.tolist() == [4, 2]
    assert make_policy("goodput").allocate(spread, cluster(6), NO_RATES).num_gpus.tolist() == [2, 4]
    # unknown placement (the server's view): as tight
    assert make_policy("goodput").allocate(jobs, cluster(6), NO_RATES).num_gpus.tolist() == [4, 2]

    policy = make_policy("goodput")
    kinds = jobs.elastic.kinds
    at = {nodes: goodput_table(kinds, jobs.kind[:1], np.array([[4]]), jobs.elastic.noise_scale[:1], np.array([4]),
                               nodes=np.array([[nodes]]))[0][0, 0, 0] for nodes in (1, 2)}
    assert at[2] == pytest.approx(47, abs=0.5) and at[1] == pytest.approx(53, abs=0.5)
    counts, _ = policy.counts(spread, cluster(6))
    four = counts.tolist().index(4)
    as_spread, _, base = policy.speedups(spread, cluster(6), counts)
    as_tight, _, _ = policy.speedups(tight, cluster(6), counts)
    assert as_spread[0, 0, four] * base[0] == pytest.approx(at[2])
    assert as_tight[0, 0, four] * base[0] == pytest.approx(at[1])
    other = np.arange(len(counts)) != four
    assert np.array_equal(as_spread[:, :, other], as_tight[:, :, other])


def test_a_job_about_to_finish_is_not_grown_for_a_restart_it_cannot_win_back():
    """CIFAR-10 on 1 GPU with 0.5% of its work left: 18.5 s there, or a 30 s restart and 4.7 s on 4
    GPUs. It stays. With 10% left (372 s, or 30 + 95 s on 4) it grows; and a job may still be shrunk
    for others' sake near its end (the rule only stops growth that finishes it later)."""
    def allocation(progress, gpus_now=1, capacity=4, kinds=("cifar10",)):
        jobs = elastic_jobs(list(kinds), progress=progress, gpu_types=("t4",), running_type=[0] * len(kinds),
                            gpus_now=[gpus_now] + [1] * (len(kinds) - 1), first_start=[0.0] * len(kinds))
        return make_policy("goodput", restart_cost_s=30.0).allocate(jobs, cluster(capacity), NO_RATES).num_gpus.tolist()

    assert allocation([0.995]) == [1]
    assert allocation([0.9]) == [4]
    assert make_policy("goodput", restart_cost_s=0.0).allocate(
        elastic_jobs(["cifar10"], progress=[0.995], gpu_types=("t4",), running_type=[0], gpus_now=[1],
                     first_start=[0.0]), cluster(4), NO_RATES).num_gpus.tolist() == [4]


def test_on_fixed_size_jobs_it_chooses_types_only():
    from apportion.core.views import JobView as View

    n = 3
    jobs = View(index=np.arange(n), submit_time_s=np.zeros(n), kind=np.zeros(n, dtype=np.int64),
                num_gpus=np.array([2, 1, 1]), priority=np.ones(n), total_steps=np.full(n, 100.0),
                steps_done=np.zeros(n), attained_service_s=np.array([0.0, 10.0, 5.0]),
                first_start_s=np.full(n, np.nan), running_type=np.full(n, -1),
                queue=np.full(n, "", dtype=object), user=np.full(n, "", dtype=object), now_s=0.0)
    allocation = make_policy("goodput", exact=True).allocate(jobs, cluster(3), ThroughputView(np.ones((n, 1))))

    assert allocation.num_gpus is None and allocation.batch_size is None
    assert allocation.share[:, 0].tolist() == [1.0, 0.0, 1.0]  # 2 + 1 GPUs; job 2 has less service than job 1


@pytest.mark.parametrize("p, message", [(2.0, "--goodput-p must be a number <= 1, got 2.0")])
def test_a_bad_exponent_is_named(p, message):
    with pytest.raises(ValueError, match=message):
        make_policy("goodput", p=p)
