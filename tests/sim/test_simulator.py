"""The simulator: replays on tiny hand-made clusters and throughput tables, worked out by hand,
and the invariants every replay keeps on a seeded random workload, under every registered
policy and variant (a new policy is covered here without being named)."""

import dataclasses

import numpy as np
import pytest

from apportion.core.cluster import Cluster, NodeGroup, parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.experiment import with_list_prices
from apportion.policies import make_policy, policy_info, policy_names
from apportion.policies.las import Las
from apportion.sim import SimConfig, simulate
from apportion.sim.simulator import Simulator
from apportion.sim.result import JobStatus

POLICIES = policy_names()
SPECS = [spec for name in POLICIES for spec in [name] + [f"{name}:{v}" for v in policy_info(name).variants]]
SCALES = (1, 2, 4, 8)


def build(spec: str):
    """A fresh policy for ``spec``, with example values for any option it cannot go without."""
    return make_policy(spec, **policy_info(spec).example_options())


def priced(text: str) -> Cluster:
    """A cluster from its shorthand, at catalog list prices (min-cost needs prices)."""
    return with_list_prices(parse_cluster_shorthand(text))


def table(rates: dict[str, list[float]], gpu_types=("v100", "p100", "k80")) -> ThroughputTable:
    """steps/s on one GPU of each type per kind; n GPUs run n times as fast (NaN: cannot run)."""
    one = np.array([rates[k] for k in rates], dtype=float)  # [kinds, types]
    return ThroughputTable(
        kinds=tuple(rates),
        gpu_types=tuple(gpu_types),
        scales=SCALES,
        steps_per_s=one[:, :, None] * np.array(SCALES, dtype=float)[None, None, :],
    )


def jobs(submit, num_gpus, total_steps, kind_names=None, kinds=("a",)) -> JobTable:
    n = len(submit)
    return JobTable.build(
        job_id=[f"job-{i}" for i in range(n)],
        submit_time_s=submit,
        kind_names=kind_names or ["a"] * n,
        num_gpus=num_gpus,
        total_steps=total_steps,
        kinds=kinds,
    )


ONE_STEP_A_SECOND = table({"a": [1.0]}, gpu_types=("v100",))


@pytest.mark.parametrize("policy", SPECS)
def test_a_lone_job_finishes_after_exactly_its_work(policy):
    """3600 steps at 1 step/s on an idle GPU: starts at 0, ends at 3600, never moved."""
    result = simulate(jobs([0.0], [1], [3600.0]), priced("v100:1"), ONE_STEP_A_SECOND, build(policy))

    assert result.status.tolist() == [JobStatus.COMPLETED]
    assert result.first_start_s.tolist() == [0.0]
    assert result.finish_s.tolist() == [3600.0]
    assert result.jct_s.tolist() == [3600.0]
    assert result.steps_done.tolist() == [3600.0]
    assert result.preemptions.tolist() == [0] and result.moves.tolist() == [0]
    assert result.summary["makespan_s"] == 3600.0
    assert result.summary["utilization"] == pytest.approx(1.0)
    assert result.gpu_types_used() == ["v100"]


V100_FAST = table({"a": [4.0, 1.0]}, gpu_types=("v100", "k80"))


def test_fifo_moves_a_long_job_from_a_k80_to_the_v100_a_finished_job_frees():
    """v100 4 steps/s, k80 1. Job 0 (1440 steps) takes the v100 and ends at 360 s; job 1 (7200
    steps) starts on the k80 and has done 360 by then. Left: 6840 s on the k80, or 10 s restart
    + 1710 s on the v100: it moves, and ends at 360 + 10 + 1710 = 2080 s (7200 s if it stayed)."""
    result = simulate(jobs([0.0, 0.0], [1, 1], [1440.0, 7200.0]), parse_cluster_shorthand("v100:1,k80:1"),
                      V100_FAST, make_policy("fifo", restart_cost_s=10.0), SimConfig(restart_cost_s=10.0))

    assert result.finish_s.tolist() == [360.0, 2080.0]
    assert result.moves.tolist() == [0, 1] and result.preemptions.tolist() == [0, 0]


def test_fifo_leaves_a_job_close_to_done_on_its_k80():
    """Job 1 needs 372 steps: 12 left at 360 s, 12 s on the k80 against 10 s + 3 s on the v100."""
    result = simulate(jobs([0.0, 0.0], [1, 1], [1440.0, 372.0]), parse_cluster_shorthand("v100:1,k80:1"),
                      V100_FAST, make_policy("fifo", restart_cost_s=10.0), SimConfig(restart_cost_s=10.0))

    assert result.finish_s.tolist() == [360.0, 372.0]
    assert result.moves.tolist() == [0, 0]


def test_a_job_arriving_between_rounds_starts_at_the_next_round():
    # submitted at 100 s; rounds start every 360 s, so it starts at 360 and ends at 360 + 3600
    result = simulate(jobs([100.0], [1], [3600.0]), parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("fifo"))

    assert result.first_start_s.tolist() == [360.0]
    assert result.jct_s.tolist() == [3860.0]
    assert result.summary["avg_queueing_s"] == 260.0


def test_a_multi_gpu_job_runs_at_its_scales_speed():
    # 4 GPUs run 4 steps/s in the table above: 14400 steps take 3600 s
    result = simulate(jobs([0.0], [4], [14400.0]), parse_cluster_shorthand("v100:4"), ONE_STEP_A_SECOND, make_policy("fifo"))

    assert result.finish_s.tolist() == [3600.0]
    assert result.summary["busy_gpu_hours"] == pytest.approx(4.0)


@pytest.mark.parametrize("restart_cost_s, a_jct_s", [(0.0, 9000.0), (10.0, 9010.0)])
def test_las_preempts_once_and_the_restart_costs_its_price(restart_cost_s, a_jct_s):
    """One GPU, LAS with its 1 GPU-hour threshold.

    A (7200 steps) starts at 0. B (1800 steps) arrives at 1800: both in queue 0, A is earlier
    and keeps running. At 3600 A has 3600 GPU-s and drops to queue 1: B runs 3600-5400 (first
    start, no restart cost). A resumes at 5400 with 3600 steps left and pays the restart:
    it ends at 5400 + restart + 3600.
    """
    result = simulate(
        jobs([0.0, 1800.0], [1, 1], [7200.0, 1800.0]),
        parse_cluster_shorthand("v100:1"),
        ONE_STEP_A_SECOND,
        Las(),
        SimConfig(round_s=360.0, restart_cost_s=restart_cost_s),
    )

    assert result.jct_s.tolist() == [a_jct_s, 3600.0]
    assert result.first_start_s.tolist() == [0.0, 3600.0]
    assert result.preemptions.tolist() == [1, 0]
    assert result.moves.tolist() == [0, 0]  # a preempted job that resumes is not "moved"
    assert result.steps_done.tolist() == [7200.0, 1800.0]
    assert result.summary["preemptions"] == 1


def test_max_min_time_shares_one_gpu_round_by_round():
    """Two 720-step jobs at 1 step/s on one GPU, X = 1/2 each, no restart cost.

    Rounds of 360 s alternate: job 0, job 1, job 0 (done at 1080), job 1 (done at 1440).
    """
    result = simulate(
        jobs([0.0, 0.0], [1, 1], [720.0, 720.0]),
        parse_cluster_shorthand("v100:1"),
        ONE_STEP_A_SECOND,
        make_policy("max-min-fairness"),
        SimConfig(round_s=360.0, restart_cost_s=0.0),
    )

    assert result.finish_s.tolist() == [1080.0, 1440.0]
    assert result.first_start_s.tolist() == [0.0, 360.0]
    assert result.preemptions.tolist() == [1, 1]


def test_fifo_runs_jobs_one_after_the_other():
    # three 1-GPU jobs of 1800 steps on one GPU, all submitted at 0: they end at 1800, 3600, 5400
    result = simulate(jobs([0.0, 0.0, 0.0], [1, 1, 1], [1800.0] * 3), parse_cluster_shorthand("v100:1"), ONE_STEP_A_SECOND, make_policy("fifo"))

    assert result.finish_s.tolist() == [1800.0, 3600.0, 5400.0]
    assert result.summary["avg_jct_s"] == 3600.0
    assert result.summary["p50_jct_s"] == 3600.0
    assert result.summary["preemptions"] == 0


def test_a_job_too_big_for_the_cluster_is_unschedulable_and_the_rest_finish():
    """16 GPUs asked of an 8-GPU cluster: reported, not waited for forever."""
    workload = jobs([0.0, 10.0, 20.0], [1, 16, 2], [3600.0, 3600.0, 3600.0])
    result = simulate(workload, parse_cluster_shorthand("v100:8"), ONE_STEP_A_SECOND, make_policy("fifo"))

    assert result.status.tolist() == [JobStatus.COMPLETED, JobStatus.UNSCHEDULABLE, JobStatus.COMPLETED]
    assert result.summary["unschedulable"] == 1
    assert result.summary["completed"] == 2
    assert result.summary["unfinished"] == 0
    assert np.isnan(result.finish_s[1]) and np.isnan(result.first_start_s[1])


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_allowed_only_on_a_type_the_cluster_lacks_is_unschedulable(policy):
    workload = dataclasses.replace(
        jobs([0.0, 0.0], [1, 1], [3600.0, 3600.0]),
        allowed=np.array([[True, False], [False, True]]),  # job 0: a100 only; job 1: v100 only
        allowed_types=("a100", "v100"),
    )
    result = simulate(workload, priced("v100:2"), ONE_STEP_A_SECOND, build(policy))

    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE, JobStatus.COMPLETED]
    assert result.summary["unschedulable"] == 1
    assert result.finish_s[1] == 3600.0


def test_a_job_runs_only_on_its_allowed_types():
    # kind a is fastest on v100, but job 0 may use only k80: 1800 steps at 0.5 steps/s = 3600 s
    workload = dataclasses.replace(
        jobs([0.0], [1], [1800.0]), allowed=np.array([[False, True]]), allowed_types=("v100", "k80")
    )
    result = simulate(
        workload,
        parse_cluster_shorthand("v100:1,k80:1"),
        table({"a": [1.0, 0.5]}, gpu_types=("v100", "k80")),
        make_policy("fifo"),
    )

    assert result.gpu_types_used() == ["k80"]
    assert result.finish_s.tolist() == [3600.0]


def four_gpus_and_8_cores(**others) -> Cluster:
    return with_list_prices(Cluster((NodeGroup("v100", 4, 4, cpus_per_node=8, **others),)))


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_waits_for_cores_one_jobs_duration_though_a_gpu_is_free(policy):
    """Three 1-GPU jobs of an hour asking 4 cores each, on one node of 4 GPUs and 8 cores: two
    run at once, the third starts when one of them ends and finishes an hour later. Without
    the cores counted all three end at 3600 s."""
    workload = dataclasses.replace(jobs([0.0, 0.0, 0.0], [1, 1, 1], [3600.0] * 3), cpus=np.full(3, 4.0))
    result = simulate(workload, four_gpus_and_8_cores(), ONE_STEP_A_SECOND, build(policy))

    assert sorted(result.finish_s.tolist()) == [3600.0, 3600.0, 7200.0]
    assert sorted(result.first_start_s.tolist()) == [0.0, 0.0, 3600.0]
    assert result.summary["preemptions"] == 0
    unlimited = simulate(workload, priced("v100:4"), ONE_STEP_A_SECOND, build(policy))
    assert unlimited.finish_s.tolist() == [3600.0] * 3


def test_a_job_asking_more_cores_than_any_node_has_is_unschedulable_and_the_rest_finish():
    workload = dataclasses.replace(jobs([0.0, 0.0], [1, 1], [3600.0] * 2), cpus=np.array([12.0, 8.0]))
    result = simulate(workload, four_gpus_and_8_cores(), ONE_STEP_A_SECOND, make_policy("fifo"))

    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE, JobStatus.COMPLETED]
    assert result.finish_s[1] == 3600.0


def test_a_job_runs_on_the_type_whose_nodes_have_its_cores_though_another_is_faster():
    """v100 nodes have 4 cores, k80 nodes 16; the job asks 8: 1800 steps at 0.5 steps/s on a k80."""
    cluster = Cluster((NodeGroup("v100", 4, 4, cpus_per_node=4), NodeGroup("k80", 4, 4, cpus_per_node=16)))
    workload = dataclasses.replace(jobs([0.0], [1], [1800.0]), cpus=np.array([8.0]))
    result = simulate(workload, cluster, table({"a": [1.0, 0.5]}, gpu_types=("v100", "k80")), make_policy("las"))

    assert result.gpu_types_used() == ["k80"]
    assert result.finish_s.tolist() == [3600.0]


def test_a_wall_clock_replay_refuses_jobs_whose_cores_it_could_not_count():
    workload = dataclasses.replace(jobs([0.0], [1], [60.0]), cpus=np.array([4.0]))
    with pytest.raises(ValueError, match="counts no CPU cores or memory"):
        simulate(workload, four_gpus_and_8_cores(), ONE_STEP_A_SECOND, make_policy("fifo"),
                 SimConfig(wall_clock=True))


def test_a_cluster_type_missing_from_the_throughputs_is_refused():
    with pytest.raises(ValueError, match="a100"):
        simulate(jobs([0.0], [1], [1.0]), parse_cluster_shorthand("a100:1"), ONE_STEP_A_SECOND, make_policy("fifo"))


# --- a seeded random workload on three GPU types -------------------------------------------

RANDOM_TABLE = dataclasses.replace(
    table(
        {
            "resnet": [3.0, 2.0, 1.0],
            "lstm": [2.0, 1.6, 1.0],
            "transformer": [5.0, 2.0, 0.5],
        }
    ),
    # two kinds that gain from sharing a GPU, so that the space-sharing variants form pairs
    pair_steps_per_s={("resnet", "lstm", gpu): (0.7 * r, 0.6 * l) for gpu, r, l in
                      (("v100", 3.0, 2.0), ("p100", 2.0, 1.6), ("k80", 1.0, 1.0))},
)
RANDOM_CLUSTER = "v100:4,p100:4,k80:4"
RANDOM_JOBS = 60


def random_workload(seed: int = 0, n: int = RANDOM_JOBS) -> JobTable:
    """Jobs arriving every ~15 min on average, 1-4 GPUs, 0.2-2 hours of v100 time each."""
    rng = np.random.default_rng(seed)
    kinds = RANDOM_TABLE.kinds
    kind = rng.integers(0, len(kinds), size=n)
    gpus = rng.choice([1, 1, 1, 1, 2, 4], size=n)
    hours = rng.uniform(0.2, 2.0, size=n)
    v100_rate = RANDOM_TABLE.steps_per_s[kind, 0, 0] * gpus
    return JobTable.build(
        job_id=[f"job-{i:03d}" for i in range(n)],
        submit_time_s=np.cumsum(rng.exponential(900.0, size=n)),
        kind_names=[kinds[k] for k in kind],
        num_gpus=gpus,
        total_steps=np.round(v100_rate * hours * 3600.0),
        kinds=kinds,
    )


_RESULTS = {}


def replay_random(policy: str):
    return simulate(random_workload(), priced(RANDOM_CLUSTER), RANDOM_TABLE, build(policy))


def run_random(policy: str):
    """The random workload replayed under ``policy``, once per test session."""
    if policy not in _RESULTS:
        _RESULTS[policy] = replay_random(policy)
    return _RESULTS[policy]


@pytest.mark.parametrize("policy", SPECS)
def test_every_policy_completes_a_random_workload(policy):
    result = run_random(policy)

    assert result.summary["completed"] == RANDOM_JOBS
    assert np.all(result.status == JobStatus.COMPLETED)
    # every completed job did exactly its work, no more, no less
    np.testing.assert_array_equal(result.steps_done, result.jobs.total_steps)
    assert np.all(result.finish_s >= result.first_start_s)
    assert np.all(result.first_start_s >= result.jobs.submit_time_s)


@pytest.mark.parametrize("policy", SPECS)
def test_a_job_finishes_no_sooner_than_its_work_allows(policy):
    result = run_random(policy)
    workload = result.jobs
    fastest = RANDOM_TABLE.steps_per_s[workload.kind, :, 0].max(axis=1) * workload.num_gpus

    assert np.all(result.jct_s >= workload.total_steps / fastest - 1e-6)
    # and it held GPUs at least as long as its work takes on the types it ran on
    assert np.all(result.time_on_type.sum(axis=1) >= workload.total_steps / fastest - 1e-6)


@pytest.mark.parametrize("policy", SPECS)
def test_busy_gpus_never_exceed_the_cluster(policy):
    result = run_random(policy)
    num_gpus = result.cluster.num_gpus
    summary = result.summary

    assert summary["busy_gpu_hours"] * 3600.0 <= num_gpus * summary["makespan_s"] + 1e-6
    assert 0.0 < summary["utilization"] <= 1.0
    # GPU-seconds held add up per job: time held x GPUs, a shared GPU held by both of its jobs
    held = (result.time_on_type.sum(axis=1) * result.jobs.num_gpus).sum()
    assert held == pytest.approx((summary["busy_gpu_hours"] + summary.get("shared_gpu_hours", 0.0)) * 3600.0)


@pytest.mark.parametrize("policy", SPECS)
def test_the_timeline_never_shows_more_busy_gpus_than_the_cluster(policy):
    result = run_random(policy)
    over = result.timeline[:, 1] > result.cluster.num_gpus

    assert np.all(np.diff(result.timeline[:, 0]) > 0)  # decisions move forward in time
    assert not over.any()


@pytest.mark.parametrize("policy", SPECS)
def test_summary_has_the_documented_keys(policy):
    summary = run_random(policy).summary

    for key in (
        "policy", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s",
        "avg_queueing_s", "utilization", "preemptions", "sim_wall_s",
    ):
        assert key in summary, key
    assert summary["policy"] == policy
    assert summary["jobs"] == RANDOM_JOBS
    assert summary["p50_jct_s"] <= summary["p99_jct_s"]
    assert summary["avg_jct_s"] >= summary["avg_queueing_s"]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_same_inputs_give_the_same_replay(policy):
    a, b = run_random(policy), replay_random(policy)

    for name in ("status", "first_start_s", "finish_s", "preemptions", "moves", "steps_done", "time_on_type", "timeline"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{policy} {name}")
    assert {k: v for k, v in a.summary.items() if k != "sim_wall_s"} == {
        k: v for k, v in b.summary.items() if k != "sim_wall_s"
    }


@pytest.mark.parametrize("policy", SPECS)
def test_no_node_ever_gives_more_cores_than_it_has(policy):
    """The random workload, each job asking 1 to 4 cores a GPU, on nodes of 4 GPUs and 8 cores:
    at every decision the shares beside each node's busy GPUs (both jobs' on a shared GPU) add
    up to at most 8, and every job completes but the 4-GPU ones asking 4 cores a GPU: 16 cores
    on a type of one node."""
    workload = random_workload()
    cpus_per_gpu = np.random.default_rng(1).choice([1.0, 2.0, 4.0], size=len(workload))
    workload = dataclasses.replace(workload, cpus=cpus_per_gpu * workload.num_gpus)
    cluster = Cluster(tuple(dataclasses.replace(group, cpus_per_node=8) for group in priced(RANDOM_CLUSTER).groups))
    busiest = []

    def check(now, active, decision):
        used = np.zeros(cluster.num_nodes)
        for holders in (decision.owner, decision.second):
            busy = holders >= 0
            np.add.at(used, cluster.gpu_node[busy], cpus_per_gpu[active[holders[busy]]])
        busiest.append(used.max())

    simulator = Simulator(workload, cluster, RANDOM_TABLE, build(policy))
    simulator.on_decision = check
    result = simulator.run()

    too_big = (workload.num_gpus == 4) & (cpus_per_gpu == 4.0)
    assert too_big.any()
    assert np.all(result.status[too_big] == JobStatus.UNSCHEDULABLE)
    assert np.all(result.status[~too_big] == JobStatus.COMPLETED)
    assert max(busiest) <= 8.0
    assert max(busiest) == 8.0  # the limit was reached: the check was not idle


def test_the_space_sharing_variants_pair_jobs_on_the_random_workload():
    """The random table knows resnet+lstm pairs, so the invariants above also cover pairs."""
    shared = [spec for spec in SPECS if spec.endswith(":space-sharing")]

    assert shared and any(run_random(spec).summary["shared_gpu_hours"] > 0 for spec in shared)


def test_fifo_never_preempts():
    result = run_random("fifo")

    assert result.summary["preemptions"] == 0
    # it may move a running job to a faster free type; with moves priced out, it never does
    never_moves = simulate(random_workload(), priced(RANDOM_CLUSTER), RANDOM_TABLE,
                           make_policy("fifo", restart_cost_s=float("inf")))
    assert never_moves.summary["preemptions"] == 0 and never_moves.summary["moves"] == 0
    # and starts jobs in submission order whenever they fit: a job never starts before
    # an earlier job of the same size
    for size in (1, 2, 4):
        rows = np.flatnonzero(result.jobs.num_gpus == size)
        assert np.all(np.diff(result.first_start_s[rows]) >= 0)


def test_max_min_time_shares_when_jobs_outnumber_gpus():
    # 12 one-GPU jobs at once on 4 GPUs
    workload = jobs([0.0] * 12, [1] * 12, [7200.0] * 12)
    result = simulate(workload, parse_cluster_shorthand("v100:4"), ONE_STEP_A_SECOND, make_policy("max-min-fairness"))

    assert result.summary["completed"] == 12
    assert result.summary["preemptions"] > 0
    assert np.all(result.first_start_s <= 2 * 360.0)  # everybody got a turn within the first rounds
    np.testing.assert_array_equal(result.steps_done, 7200.0)


def test_max_min_time_shares_the_random_workload():
    result = run_random("max-min-fairness")

    assert result.summary["preemptions"] > 0
    assert result.summary["completed"] == RANDOM_JOBS


def test_the_default_synthetic_workload_runs_whole_on_the_builtin_table():
    """The synthetic generator sizes a 2/4/8-GPU job of a kind measured only on 1 GPU
    (recommendation/*, a3c, cyclegan) as if it scaled linearly; the simulator should then run
    it, not call it unschedulable because the table has no number at that scale."""
    from apportion.workloads.catalog import builtin_throughputs
    from apportion.workloads.synthetic import generate_workload

    throughputs = builtin_throughputs()
    workload = generate_workload(jobs=300, rate_per_hour=20, throughputs=throughputs, seed=0)
    result = simulate(workload, parse_cluster_shorthand("v100:8,p100:8,k80:8"), throughputs, make_policy("fifo"))

    assert result.summary["unschedulable"] == 0
    assert result.summary["completed"] == 300


def test_space_sharing_runs_two_jobs_on_one_gpu_and_counts_the_gpu_once():
    """a and b each run 1 step/s alone and 0.8 together on one v100 (together 1.6 > 1). With
    space sharing, max-min fairness pairs them all the time: both finish 3600 steps at
    3600 / 0.8 = 4500 s, never preempted; the GPU was busy (and shared) 4500 s, counted once.
    Without it they take turns and finish after 7200 s or later."""
    throughputs = dataclasses.replace(
        table({"a": [1.0], "b": [1.0]}, gpu_types=("v100",)),
        pair_steps_per_s={("a", "b", "v100"): (0.8, 0.8)},
    )
    workload = jobs([0.0, 0.0], [1, 1], [3600.0, 3600.0], kind_names=["a", "b"], kinds=("a", "b"))
    cluster = parse_cluster_shorthand("v100:1")

    shared = simulate(workload, cluster, throughputs, make_policy("max-min-fairness", space_sharing=True))
    alone = simulate(workload, cluster, throughputs, make_policy("max-min-fairness"))

    assert shared.finish_s.tolist() == [4500.0, 4500.0]
    assert shared.steps_done.tolist() == [3600.0, 3600.0]
    assert shared.preemptions.tolist() == [0, 0]
    assert shared.summary["busy_gpu_hours"] == pytest.approx(4500 / 3600)
    assert shared.summary["shared_gpu_hours"] == pytest.approx(4500 / 3600)
    assert shared.summary["utilization"] == pytest.approx(1.0)
    assert alone.finish_s.max() >= 7200.0


def test_space_sharing_replay_keeps_every_job_whole_and_the_gpus_within_capacity():
    """A seeded catalog workload: every job that fits completes exactly its steps (8-GPU jobs
    cannot fit on 4 GPUs of a type), and the busy GPU time never exceeds what the cluster has
    over the makespan."""
    from apportion.workloads.catalog import builtin_throughputs
    from apportion.workloads.synthetic import generate_workload

    catalog = builtin_throughputs()
    workload = generate_workload(jobs=120, rate_per_hour=60.0, throughputs=catalog, seed=3)
    cluster = parse_cluster_shorthand("v100:4,p100:4,k80:4")
    result = simulate(workload, cluster, catalog, make_policy("max-min-fairness", space_sharing=True))

    completed = result.status == JobStatus.COMPLETED
    assert np.array_equal(~completed, workload.num_gpus > 4)
    np.testing.assert_allclose(result.steps_done[completed], workload.total_steps[completed])
    assert result.summary["shared_gpu_hours"] > 0
    assert result.summary["busy_gpu_hours"] <= cluster.num_gpus * result.summary["makespan_s"] / 3600 + 1e-6


def test_when_one_of_a_pair_finishes_the_other_keeps_its_gpu_and_runs_alone():
    """a (3600 steps) and b (7200) share the v100 at 0.8 steps/s each. a ends at 4500 s; b goes
    on at its pair speed to the round's end (4680 s: 3744 steps), then alone at 1 step/s on the
    same GPU with no restart: 3456 more steps, done at 8136 s."""
    throughputs = dataclasses.replace(
        table({"a": [1.0], "b": [1.0]}, gpu_types=("v100",)),
        pair_steps_per_s={("a", "b", "v100"): (0.8, 0.8)},
    )
    workload = jobs([0.0, 0.0], [1, 1], [3600.0, 7200.0], kind_names=["a", "b"], kinds=("a", "b"))

    result = simulate(workload, parse_cluster_shorthand("v100:1"), throughputs,
                      make_policy("max-min-fairness", space_sharing=True))

    assert result.finish_s.tolist() == [4500.0, pytest.approx(8136.0)]
    assert result.preemptions.tolist() == [0, 0] and result.moves.tolist() == [0, 0]
    assert result.summary["shared_gpu_hours"] == pytest.approx(4500 / 3600)
    assert result.summary["busy_gpu_hours"] == pytest.approx(8136 / 3600)


@pytest.mark.parametrize("restart_cost_s, finish_s", [(10.0, 2080.0), (6000.0, 7200.0)])
def test_run_policy_tells_fifo_the_mechanisms_restart_cost(restart_cost_s, finish_s):
    """As above: moving saves 6840 - 1710 = 5130 s, worth a 10 s restart, not a 6000 s one."""
    from apportion.experiment import Inputs, run_policy

    inputs = Inputs(jobs([0.0, 0.0], [1, 1], [1440.0, 7200.0]), parse_cluster_shorthand("v100:1,k80:1"), V100_FAST, "t")
    result = run_policy(inputs, "fifo", SimConfig(restart_cost_s=restart_cost_s))

    assert result.finish_s[1] == finish_s
