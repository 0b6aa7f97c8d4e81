"""Elastic jobs' models learnt online in the simulator (``SimConfig.learn_models``): a job may
grow to four times the most GPUs it has run on, its model is the fit the server makes of the same
steps, and a replay that learns is as repeatable as one that does not."""

from dataclasses import replace

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.elastic import ElasticJobs, ElasticKinds
from apportion.core.jobs import JobTable
from apportion.core.goodput_fit import StepConfig, StepObservations, default_prior
from apportion.policies import make_policy
from apportion.serve.estimates.elastic import ElasticModels, StepReport
from apportion.serve.jobs.elastic_spec import ElasticSpec
from apportion.serve.store.state import StateStore
from apportion.sim import SimConfig, simulate
from apportion.sim.elastic import ElasticSimulator
from apportion.sim.learnt_models import LearntModels
from apportion.workloads.elastic_kinds import builtin_elastic_kinds
from apportion.workloads.elastic_workload import generate_elastic_workload
from test_elastic import toy_jobs, toy_kinds

LEARN = SimConfig(round_s=60.0, restart_cost_s=0.0, learn_models=True)


def two_type_kinds() -> ElasticKinds:
    """The toy model on v100s, and on t4s a model with a real all-reduce: 0.05 s on one node."""
    toy = toy_kinds()
    t4 = np.array([0.01, 0.02, 0.2, 0.01, 0.05, 0.005, 1.5])
    return ElasticKinds(toy.names, ("v100", "t4"), np.stack([toy.step_params[:, 0], t4[None]], axis=1),
                        toy.init_batch, toy.max_batch, toy.min_local_batch, toy.max_local_batch,
                        toy.target_examples, toy.noise_fraction, toy.noise_scale)


@pytest.mark.parametrize("growth, grown", [(4, [16, 2, 6]), (2, [8, 2, 6])])  # 4 by default; Pollux's 2
def test_a_job_may_grow_to_a_multiple_of_the_most_gpus_it_has_run_on_within_its_limits(growth, grown):
    learnt = LearntModels(toy_kinds(), np.zeros(3, dtype=np.int64), growth=growth)
    rows, low, high = np.arange(3), np.array([1, 2, 1]), np.array([16, 16, 6])
    assert learnt.max_gpus(rows, low, high).tolist() == [1, 2, 1]  # never ran: its min_gpus

    learnt.observe(np.array([0, 2]), np.zeros(2, dtype=np.int64), np.ones(2), np.array([4, 4]), np.array([2.0, 2.0]),
                   np.array([0.02, 0.02]), np.zeros(2))
    learnt.observe(np.array([0]), np.zeros(1, dtype=np.int64), np.ones(1), np.array([2]), np.array([4.0]),
                   np.array([0.04]), np.zeros(1))
    assert learnt.max_gpus(rows, low, high).tolist() == grown  # growth × 4 (not × 2, its latest), within limits


def test_goodput_grows_a_learning_job_fourfold_each_round_where_knowing_its_model_gives_it_all_at_once():
    # the toy model: k GPUs do 100·k examples/s. Learning, the job runs 60 s on 1, then 4, then 16
    # GPUs: 6,000 + 24,000 examples by 120 s, and the last 156,000 take 97.5 s on 16: 217.5 s.
    # (Pollux's doubling: 1, 2, 4, 8, 16 GPUs, 300 s.) Knowing the model it runs on all 16 from the
    # start: 186,000 / 1,600 = 116.25 s.
    jobs = toy_jobs([0.0], [1], [8], [186_000.0])
    jobs = replace(jobs, elastic=replace(jobs.elastic, max_gpus=np.array([16])))
    cluster = parse_cluster_shorthand("v100:16")
    policy = make_policy("goodput", restart_cost_s=0.0)

    learning = simulate(jobs, cluster, None, policy, LEARN)
    knowing = simulate(jobs, cluster, None, make_policy("goodput", restart_cost_s=0.0),
                       SimConfig(round_s=60.0, restart_cost_s=0.0))

    assert learning.finish_s.tolist() == pytest.approx([217.5])
    assert knowing.finish_s.tolist() == pytest.approx([116.25])
    # one new configuration a round, three in all; the model fitted to the first two already times
    # the last exactly (no all-reduce cost), so it is recorded and not fitted again
    assert learning.summary["model_fits"] == 2


def test_the_model_after_steps_at_two_sizes_is_the_fit_the_server_makes_of_them(tmp_path):
    # one job of the two-type model ran on one t4, then on two (one node): its micro-batch 8, then 4
    kinds = two_type_kinds()
    t4 = kinds.step_params[0, 1]
    steps = [(1, 8.0, 0.01 + 0.02 * 8, 0.0), (2, 4.0, ((0.01 + 0.02 * 4) ** 1.5 + 0.05**1.5) ** (1 / 1.5), 0.05)]
    learnt = LearntModels(kinds, np.zeros(1, dtype=np.int64))
    for gpus, local, step, sync in steps:
        learnt.observe(np.array([0]), np.array([1]), np.ones(1), np.array([gpus]), np.array([local]),
                       np.array([step]), np.array([sync]))

    store = StateStore(tmp_path / "state.db")
    job_id = store.insert_job(spec={"name": "toy", "command": "train"}, name="toy", user="ann", queue="q",
                              priority=1.0, kind="elastic", gpus=1, total_steps=100, submitted=0.0)
    server = ElasticModels(store, ("t4",), {"t4": 2})
    spec = ElasticSpec(max_gpus=2, batch_size=8)  # names no built-in kind: no prior, as the simulator's jobs
    for gpus, local, step, sync in steps:
        store.update_job(job_id, slots=",".join(str(s) for s in range(gpus)), gpu_type="t4")
        server.record(store.job(job_id), spec, StepReport(steps_per_s=1.0 / step, sync_s=sync, micro_batch=local),
                      now=0.0)

    assert learnt.kinds.step_params[0, 1] == pytest.approx(np.array(server.params(job_id, "t4")), rel=1e-6)
    assert not np.allclose(learnt.kinds.step_params[0, 1], t4)  # a fit, not the true model
    assert learnt.observations(0, 0) is None  # never on a v100: Pollux's starting point there
    assert learnt.kinds.step_params[0, 0].tolist() == default_prior(learnt.observations(0, 1)).tolist()


def test_both_clocks_and_a_restarted_server_keep_a_two_node_step_as_the_same_observation(tmp_path):
    # 4 replicas over 2 nodes, micro-batch 8: nodes and GPUs differ, so a swapped key would show
    learnt = LearntModels(two_type_kinds(), np.zeros(1, dtype=np.int64))
    learnt.observe(np.array([0]), np.array([1]), np.array([2]), np.array([4]), np.array([8.0]), np.array([0.3]),
                   np.array([0.1]))
    store = StateStore(tmp_path / "state.db")
    job_id = store.insert_job(spec={"name": "toy", "command": "train"}, name="toy", user="ann", queue="q",
                              priority=1.0, kind="elastic", gpus=1, total_steps=100, submitted=0.0)
    store.update_job(job_id, slots="0,1,2,3", gpu_type="t4")
    ElasticModels(store, ("t4",), {"t4": 4}).record(
        store.job(job_id), ElasticSpec(max_gpus=4, batch_size=32),
        StepReport(steps_per_s=1 / 0.3, sync_s=0.1, micro_batch=8.0, nodes=2), now=0.0)
    restarted = ElasticModels(store, ("t4",), {"t4": 4})  # read back from the state file

    expected = StepObservations.seen({StepConfig.of(nodes=2, gpus=4, local_batch=8): (0.3, 0.1)})
    for seen in (learnt.observations(0, 1), restarted.observations(job_id, "t4")):
        assert (seen.nodes.tolist(), seen.gpus.tolist(), seen.local_batch.tolist()) == ([2.0], [4.0], [8.0])
        assert seen.step_time_s == pytest.approx(expected.step_time_s)
        assert seen.sync_time_s == pytest.approx(expected.sync_time_s)


def test_a_replay_that_learns_is_repeatable_and_differs_from_one_that_knows():
    jobs = generate_elastic_workload(jobs=12, rate_per_hour=20.0, seed=3)
    cluster = parse_cluster_shorthand("t4:16")
    config = SimConfig(round_s=60.0, restart_cost_s=30.0, learn_models=True)

    def replay(config):
        return simulate(jobs, cluster, None, make_policy("goodput", restart_cost_s=30.0), config)

    first, second = replay(config), replay(config)
    knowing = replay(SimConfig(round_s=60.0, restart_cost_s=30.0))

    assert first.finish_s.tolist() == second.finish_s.tolist()
    assert first.summary["restarts"] == second.summary["restarts"]
    assert first.finish_s.tolist() != knowing.finish_s.tolist()


def test_learning_models_on_a_workload_with_no_elastic_jobs_is_refused():
    from apportion.workloads.catalog import builtin_throughputs
    from apportion.workloads.synthetic import generate_workload

    catalog = builtin_throughputs()
    jobs = generate_workload(jobs=5, rate_per_hour=20.0, throughputs=catalog, seed=0)
    with pytest.raises(ValueError, match="elastic jobs only"):
        simulate(jobs, parse_cluster_shorthand("v100:4"), catalog, make_policy("fifo"), SimConfig(learn_models=True))


def test_a_job_observes_the_wait_for_its_all_reduce_so_its_compute_time_is_learnt_exactly():
    # the t4 model: compute(4) = 0.01 + 0.02·4 = 0.09 s, a 0.05 s all-reduce overlapped with γ = 1.5:
    # step = (0.09^1.5 + 0.05^1.5)^(1/1.5) = 0.11339 s. The job waits 0.11339 − 0.09 = 0.02339 s for
    # the all-reduce, and that is what it measures; step − (the all-reduce's whole 0.05 s) would make
    # its compute 0.0634 s, faster at micro-batch 4 than at 8 (0.17 s) by more than the model allows
    kinds = two_type_kinds()
    jobs = toy_jobs([0.0], [2], [8], [1e6], kinds=kinds)
    sim = ElasticSimulator(jobs, parse_cluster_shorthand("v100:4,t4:4"), make_policy("goodput"), LEARN)
    t4 = sim.kinds.gpu_types.index("t4")
    sim._observe(np.array([0]), np.array([t4]), np.array([1]), np.array([2]), np.array([8.0]))

    seen = sim.learnt.observations(0, t4)
    assert seen.step_time_s.tolist() == pytest.approx([0.11339], abs=1e-5)
    assert seen.compute_time_s.tolist() == pytest.approx([0.09])
    assert seen.sync_time_s.tolist() == pytest.approx([0.02339], abs=1e-5)


def test_a_job_takes_the_batch_its_first_steps_teach_it_within_its_first_round():
    # an NCF job alone on one T4: Pollux's starting point says batch 1,482 is best; its first steps
    # show a large fixed cost a step, and it takes (nearly) its true best batch for the rest of the
    # round, so it ends within 10% of the time it takes knowing its model (not ~5× later)
    kinds = builtin_elastic_kinds(("t4",))
    ncf = kinds.index("ncf")
    jobs = JobTable.build(job_id=["ncf-0"], submit_time_s=[0.0], kind_names=["ncf"], num_gpus=[1],
                          total_steps=kinds.target_examples[[ncf]], kinds=kinds.names,
                          elastic=ElasticJobs(kinds, np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64),
                                              np.array([32768.0])))
    cluster = parse_cluster_shorthand("t4:4")
    config = SimConfig(round_s=60.0, restart_cost_s=30.0)

    learning = simulate(jobs, cluster, None, make_policy("goodput"), replace(config, learn_models=True))
    knowing = simulate(jobs, cluster, None, make_policy("goodput"), config)

    assert learning.finish_s[0] <= 1.1 * knowing.finish_s[0]


def test_a_server_job_that_reports_its_wait_for_the_all_reduce_is_fitted_as_the_simulator_fits_it(tmp_path):
    # the overlapped t4 step above (compute 0.09 s, step 0.11339 s): a job under `apportion serve`
    # reports sync_s as the 0.02339 s it waited after its own compute (runtime Job.measured), and
    # the server's observation and fit are the simulator's, its compute time exact
    kinds = two_type_kinds()
    jobs = toy_jobs([0.0], [2], [8], [1e6], kinds=kinds)
    sim = ElasticSimulator(jobs, parse_cluster_shorthand("v100:4,t4:4"), make_policy("goodput"), LEARN)
    t4 = sim.kinds.gpu_types.index("t4")
    sim._observe(np.array([0]), np.array([t4]), np.array([1]), np.array([2]), np.array([4.0]))
    seen = sim.learnt.observations(0, t4)

    store = StateStore(tmp_path / "state.db")
    job_id = store.insert_job(spec={"name": "toy", "command": "train"}, name="toy", user="ann", queue="q",
                              priority=1.0, kind="elastic", gpus=2, total_steps=100, submitted=0.0)
    store.update_job(job_id, slots="0,1", gpu_type="t4")
    server = ElasticModels(store, ("t4",), {"t4": 4})
    report = StepReport(steps_per_s=1.0 / float(seen.step_time_s[0]), sync_s=float(seen.sync_time_s[0]),
                        micro_batch=2.0)
    server.record(store.job(job_id), ElasticSpec(max_gpus=2, batch_size=4), report, now=0.0)

    on_server = server.observations(job_id, "t4")
    assert on_server.compute_time_s.tolist() == pytest.approx([0.01 + 0.02 * 2])
    assert on_server.step_time_s.tolist() == pytest.approx(seen.step_time_s.tolist())
    assert on_server.sync_time_s.tolist() == pytest.approx(seen.sync_time_s.tolist())
    assert server.params(job_id, "t4") == pytest.approx(sim.learnt.kinds.step_params[0, t4].tolist(), rel=1e-6)
