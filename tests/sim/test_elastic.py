"""Elastic jobs in the simulator: progress in efficiency-weighted examples, GPU counts and batch
sizes that change between rounds, the restart each rescale costs; worked out by hand on a toy
model, then the invariants every policy keeps on a seeded Pollux-shaped workload."""

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.elastic import ElasticJobs, ElasticKinds
from apportion.core.jobs import JobTable
from apportion.experiment import with_list_prices
from apportion.policies import make_policy, policy_info, policy_names
from apportion.sim import SimConfig, simulate
from apportion.sim.result import JobStatus
from apportion.workloads.elastic_workload import generate_elastic_workload


def toy_kinds(noise_scale: float = 1e12) -> ElasticKinds:
    """One model on v100s: 0.01 s per example per GPU and nothing else (no sync, no overhead),
    so k GPUs do 100·k examples/s whatever the batch; M0 = 8, batches up to 64."""
    return ElasticKinds(
        names=("toy",), gpu_types=("v100",),
        step_params=np.array([[[0.0, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0]]]),
        init_batch=np.array([8.0]), max_batch=np.array([64.0]), min_local_batch=np.array([1.0]),
        max_local_batch=np.array([8.0]), target_examples=np.array([1e6]),
        noise_fraction=np.array([[0.0, 1.0]]), noise_scale=np.array([[noise_scale, noise_scale]]),
    )


def toy_jobs(submit, num_gpus, batch, target, kinds=None) -> JobTable:
    kinds = kinds or toy_kinds()
    n = len(submit)
    return JobTable.build(
        job_id=[f"job-{i}" for i in range(n)], submit_time_s=submit, kind_names=["toy"] * n, num_gpus=num_gpus,
        total_steps=target, kinds=kinds.names,
        elastic=ElasticJobs(kinds, np.ones(n, dtype=np.int64), np.full(n, 4), np.asarray(batch, dtype=float)),
    )


V100_4 = parse_cluster_shorthand("v100:4")


def test_a_fixed_size_policy_runs_an_elastic_job_at_its_users_size_and_batch():
    # 2 GPUs at 100 examples/s each, batch M0: every example counts whole; 72,000 take 360 s
    result = simulate(toy_jobs([0.0], [2], [8], [72_000.0]), V100_4, None, make_policy("las"))

    assert result.finish_s.tolist() == pytest.approx([360.0])
    assert result.summary["busy_gpu_hours"] == pytest.approx(2 * 360 / 3600)


def test_progress_counts_examples_weighted_by_statistical_efficiency():
    # noise scale 8 = M0, batch 16: each example is worth (8 + 8) / (8 + 16) = 2/3 of one at M0,
    # so 200 examples/s make 133⅓ of progress a second and 48,000 take 360 s
    jobs = toy_jobs([0.0], [2], [16], [48_000.0], kinds=toy_kinds(noise_scale=8.0))
    result = simulate(jobs, V100_4, None, make_policy("fifo"))

    assert result.finish_s.tolist() == pytest.approx([360.0])
    assert result.steps_done.tolist() == [48_000.0]


@pytest.mark.parametrize("exact", [False, True])
def test_goodput_grows_and_shrinks_a_job_and_each_rescale_costs_a_restart(exact):
    """4 GPUs, rounds of 360 s, restarts of 10 s. A (216,000 examples) arrives at 0 alone and
    takes all 4 GPUs: 144,000 by 360. B arrives at 100; at 360 A shrinks to 2 (a restart: no
    progress until 370) and B starts on the other 2. A has 2,000 left at 720 and ends at 730.
    At 1080 B, alone, grows to 4 (another restart, until 1090): it has done 144,000 of
    200,000, and the last 56,000 at 400 a second end it at 1230."""
    jobs = toy_jobs([0.0, 100.0], [1, 1], [8, 8], [216_000.0, 200_000.0])
    result = simulate(jobs, V100_4, None, make_policy("goodput", restart_cost_s=10.0, exact=exact),
                      SimConfig(round_s=360.0, restart_cost_s=10.0))

    assert result.finish_s.tolist() == pytest.approx([730.0, 1230.0])
    assert result.first_start_s.tolist() == [0.0, 360.0]
    assert result.moves.tolist() == [1, 1]
    assert result.summary["restarts"] == 2


def test_a_job_given_the_same_gpus_with_a_new_batch_does_not_restart():
    # the noise scale rises from 8 to 1e6 through training: the best batch grows, the GPUs stay
    kinds = ElasticKinds(**{**toy_kinds().__dict__, "step_params": np.array([[[0.05, 0.01, 0, 0, 0, 0, 1.0]]]),
                            "max_local_batch": np.array([16.0]), "noise_fraction": np.array([[0.0, 0.5, 1.0]]),
                            "noise_scale": np.array([[8.0, 8.0, 1e6]])})
    jobs = toy_jobs([0.0], [4], [8], [2_000_000.0], kinds=kinds)
    batches = []
    policy = make_policy("goodput")

    from apportion.sim.elastic import ElasticSimulator

    simulator = ElasticSimulator(jobs, V100_4, policy, SimConfig(round_s=360.0))
    simulator.on_decision = lambda now, active, decision: batches.append(decision.allocation.batch_size[0])
    result = simulator.run()

    assert result.status.tolist() == [JobStatus.COMPLETED]
    assert result.moves.tolist() == [0] and result.summary["restarts"] == 0
    assert batches[0] < batches[-1] == 64.0


def test_a_cluster_type_the_models_do_not_know_is_refused():
    with pytest.raises(ValueError, match="no elastic job model for GPU type 'k80' \\(known: v100\\)"):
        simulate(toy_jobs([0.0], [1], [8], [1000.0]), parse_cluster_shorthand("k80:4"), None, make_policy("las"))


POLICIES = [name for name in policy_names() if not policy_info(name).options
            or not any(o.required for o in policy_info(name).options)]
WORKLOAD = generate_elastic_workload(jobs=24, rate_per_hour=20.0, seed=5)
CLUSTER = with_list_prices(parse_cluster_shorthand("t4:8,v100:8"))  # min-cost needs prices


@pytest.fixture(scope="module")
def replays():
    return {name: simulate(WORKLOAD, CLUSTER, None, make_policy(name), SimConfig(round_s=600.0, restart_cost_s=30.0))
            for name in POLICIES}


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_finishes_an_elastic_workload_within_the_cluster(replays, name):
    """A policy that sizes jobs runs every job; the others every job whose user's size fits a type."""
    result = replays[name]
    fits = WORKLOAD.num_gpus <= CLUSTER.capacity.max()
    ran = result.status == JobStatus.COMPLETED
    sizes_jobs = getattr(make_policy(name), "sizes_jobs", False)

    assert ran.tolist() == (np.ones(len(WORKLOAD), dtype=bool) if sizes_jobs else fits).tolist()
    assert result.steps_done[ran].tolist() == WORKLOAD.total_steps[ran].tolist()
    assert result.timeline[:, 1].max() <= CLUSTER.num_gpus
    assert np.all(result.finish_s[ran] > result.first_start_s[ran])
    assert np.all(result.first_start_s[ran] >= WORKLOAD.submit_time_s[ran])


def test_goodput_finishes_the_workload_sooner_on_average_than_las(replays):
    assert replays["goodput"].summary["avg_jct_s"] < replays["las"].summary["avg_jct_s"]


def test_an_elastic_replay_advances_through_the_simulators_own_loop_at_its_goodput():
    from apportion.sim.elastic import ElasticSimulator
    from apportion.sim.simulator import Simulator

    # one loop advances both clocks; the elastic simulator gives only its pace (goodput at each size)
    assert ElasticSimulator._advance is Simulator._advance
    assert ElasticSimulator._pace is not Simulator._pace
    assert ElasticSimulator.jumps is False  # goodput changes as the noise scale grows: no round is skipped


def test_the_policy_is_told_the_nodes_a_running_jobs_gpus_lie_on():
    """Two nodes of 4 GPUs. Five 1-GPU jobs start at 0: four fill node 0, one goes to node 1. The
    first ends at 30 s; a 4-GPU job that came at 1 s starts at 60 s on the one GPU left on node 0
    and three on node 1, and the policy is told, from the next round on, that it spans 2 nodes."""
    from dataclasses import replace

    jobs = toy_jobs([0.0] * 5 + [1.0], [1] * 5 + [4], [8] * 6, [3_000.0] + [1e6] * 5)
    jobs = replace(jobs, elastic=replace(jobs.elastic, min_gpus=np.array([1] * 5 + [4]),
                                         max_gpus=np.array([1] * 5 + [4])))
    policy = make_policy("goodput")
    told = []
    allocate = policy.allocate

    def spy(view, cluster, throughputs):
        told.append(dict(zip(view.index.tolist(), view.elastic.nodes_now.tolist())))
        return allocate(view, cluster, throughputs)

    policy.allocate = spy
    simulate(jobs, parse_cluster_shorthand("v100:8"), None, policy, SimConfig(round_s=60.0))

    assert told[0] == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}  # nothing runs yet
    assert told[1] == {1: 1, 2: 1, 3: 1, 4: 1, 5: 0}
    assert told[2] == {1: 1, 2: 1, 3: 1, 4: 1, 5: 2}
