"""Elastic jobs in the scheduler on a fake clock and a fake executor: the slots a policy gives
them each round, the replicas and variables their attempts start with, and the measurements
their progress reports carry, kept in the state file."""

from __future__ import annotations

import pytest

from apportion.core.errors import InputError
from apportion.executors.fake import FakeExecutor
from apportion.policies import make_policy
from apportion.serve.base.offline import largest_nodes
from apportion.serve.http import bodies
from apportion.serve.scheduler.scheduler import Scheduler
from apportion.serve.store.state import StateStore
from test_serve_scheduler import job, make, run_for

ELASTIC = {"min_gpus": 1, "max_gpus": 2, "batch_size": 32, "init_batch_size": 16, "lr_rule": "adascale"}


def started(executor) -> list[tuple[int, int, int]]:
    """(job, attempt, slots) of every attempt started so far."""
    return [(a.job_id, a.attempt, len(a.slots)) for a in executor.started]


def test_goodput_gives_an_elastic_job_one_slot_beside_another_job_and_both_once_alone(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:2", policy=make_policy("goodput", restart_cost_s=1.0))
    elastic = scheduler.submit(job("elastic", elastic=ELASTIC), "ann")
    fixed = scheduler.submit(job("fixed"), "ann")
    scheduler.tick()
    assert started(executor) == [(elastic, 1, 1), (fixed, 1, 1)]

    scheduler.lease(elastic, 1, 0)
    run_for(scheduler, clock, 20)
    with scheduler.lock:
        executor.finish(fixed, 0)
    run_for(scheduler, clock, 30)  # the elastic job is told to stop (SIGTERM here: fake jobs never ask) and restarts

    assert started(executor)[-1] == (elastic, 2, 2)
    assert executor.replicas[(elastic, 1)] == 1 and executor.replicas[(elastic, 2)] == 2
    assert executor.replicas[(fixed, 1)] is None  # a fixed-size job is one process, as before
    env = executor.envs[(elastic, 2)]
    assert (env["APPORTION_BATCH_SIZE"], env["APPORTION_INIT_BATCH_SIZE"], env["APPORTION_LR_RULE"]) == \
        ("32", "16", "adascale")
    assert [e.event for e in scheduler.store.events(elastic)].count("move") == 1


def test_a_fixed_size_policy_runs_an_elastic_job_at_its_own_size(tmp_path):
    scheduler, executor, _ = make(tmp_path, slots="cpu:4")
    scheduler.submit(job("elastic", gpus=2, elastic={**ELASTIC, "max_gpus": 4}), "ann")
    scheduler.tick()
    assert started(executor) == [(1, 1, 2)]
    assert executor.replicas[(1, 1)] == 2


def test_a_policy_that_sizes_jobs_needs_only_min_gpus_to_fit(tmp_path):
    scheduler, _, _ = make(tmp_path, slots="cpu:2", policy=make_policy("goodput"))
    scheduler.submit(job("fits", gpus=1, elastic={**ELASTIC, "max_gpus": 8, "batch_size": 64}), "ann")
    with pytest.raises(InputError, match="asks for at least 3") as caught:
        scheduler.submit(job("too big", gpus=3, elastic={**ELASTIC, "min_gpus": 3, "max_gpus": 4}), "ann")
    assert caught.value.field == "elastic.min_gpus"


def test_reports_fit_the_jobs_step_time_model_and_a_restarted_server_keeps_it(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:2", policy=make_policy("goodput"))
    elastic = scheduler.submit(job("elastic", elastic=ELASTIC), "ann")
    scheduler.tick()
    slots = len(executor.started[0].slots)
    scheduler.lease(elastic, 1, 0)
    # a step of two micro-batches of 16 examples (accumulated), 0.5 s in all, noise scale 300 examples
    note = scheduler.progress(elastic, 1, 10, 2.0, noise_scale=300.0, micro_batch=16, micro_batches=2)

    assert note == ""
    (step,) = scheduler.store.elastic_steps()
    assert (step.gpus, step.local_batch, step.step_s) == (slots, 16, pytest.approx(0.25))
    params = scheduler.elastic.params(elastic, "cpu")
    assert params is not None
    again = Scheduler(scheduler.store, executor, scheduler.slots, make_policy("goodput"), scheduler.config, clock=clock)
    assert again.elastic.params(elastic, "cpu") == params
    assert again.elastic.noise_scale(elastic) == 300.0
    assert StateStore(tmp_path / "state.db").elastic_models()[elastic][0] == 300.0


@pytest.mark.parametrize("field, value, message", [
    ("noise_scale", -1, r"must be a number from 0 to 1e\+15"),
    ("sync_s", "fast", r"must be a number from 0 to 1e\+06"),
    ("micro_batches", 0.5, "must be a whole number from 1"),
    ("nodes", 0, "must be a whole number from 1"),
])
def test_a_bad_measurement_in_a_progress_report_names_its_field(field, value, message):
    with pytest.raises(InputError, match=message) as caught:
        bodies.step_report({"attempt": 1, "steps_done": 3, "steps_per_s": 2.0, field: value})
    assert caught.value.field == field


class NodePerRank(FakeExecutor):
    """A fake executor whose attempts run one rank a node, as Ray says where (``RayExecutor.nodes_of``)."""

    def nodes_of(self, job_id: int):
        attempt = self.running().get(job_id)
        return None if attempt is None else tuple(f"node{rank}" for rank in range(len(attempt.slots)))


@pytest.mark.parametrize("executor, nodes", [(FakeExecutor, 1), (NodePerRank, 2)], ids=["one-machine", "ray-spread"])
def test_the_goodput_policy_is_told_the_nodes_a_running_jobs_slots_lie_on(tmp_path, executor, nodes):
    """As the simulator tells it (``ElasticView.nodes_now``): on this machine a job's slots are on one
    node; where the executor says its ranks run on two (Ray), the policy sees two (and values the
    job's place there). A job not running spans none."""
    policy = make_policy("goodput")
    seen = []
    allocate = policy.allocate
    policy.allocate = lambda jobs, *rest: seen.append(jobs.elastic.nodes_now.tolist()) or allocate(jobs, *rest)
    scheduler, _, clock = make(tmp_path, executor=executor(tmp_path), slots="cpu:2", policy=policy)
    pair = scheduler.submit(job("pair", elastic={**ELASTIC, "min_gpus": 2}), "ann")
    scheduler.tick()
    scheduler.lease(pair, 1, 0)
    run_for(scheduler, clock, 12)
    assert seen[0] == [0]  # waiting
    assert seen[-1] == [nodes]  # running on both slots


class TwoNodes(NodePerRank):
    """A stand-in for Ray: the type's four slots are two on each of two nodes (``slots_per_node``), and an
    attempt's ranks run two a node."""

    def __init__(self, state_dir) -> None:
        super().__init__(state_dir)
        self.live_nodes = {"cpu": [2, 2]}

    def nodes_of(self, job_id: int):
        attempt = self.running().get(job_id)
        return None if attempt is None else tuple(f"node{rank // 2}" for rank in range(len(attempt.slots)))


def test_the_goodput_policy_is_told_how_many_slots_a_node_holds_where_they_lie_on_several(tmp_path):
    """As the simulator tells it (``ElasticView.gpus_per_node``, the largest node of each type): on this
    machine a type's slots are one node; where the executor spreads them over nodes (Ray, Slurm), the
    policy sees a node's worth, so it knows a job of four synchronises between two nodes."""
    seen = {}
    for executor in (FakeExecutor, TwoNodes):
        policy = make_policy("goodput")
        allocate = policy.allocate
        policy.allocate = lambda jobs, *rest, mine=seen.setdefault(executor.__name__, []), allocate=allocate: \
            mine.append(jobs.elastic.gpus_per_node.tolist()) or allocate(jobs, *rest)
        scheduler, _, _ = make(tmp_path / executor.__name__, executor=executor(tmp_path / executor.__name__),
                               slots="cpu:4", policy=policy)
        scheduler.submit(job("elastic", elastic={**ELASTIC, "max_gpus": 4}), "ann")
        scheduler.tick()
    assert seen["FakeExecutor"][-1] == [4]
    assert seen["TwoNodes"][-1] == [2]


def test_the_goodput_policy_keeps_a_job_whose_sync_is_slow_between_nodes_on_one_node(tmp_path):
    """A job whose gradients take long to cross nodes (its fitted model: 0.2 s a step on one node's two
    slots, 2 s across two nodes) is given two slots, one node's worth, where the four are two on each of two
    nodes; where they are one node (this machine) all four speed it up."""
    sizes = {}
    for executor in (FakeExecutor, TwoNodes):
        state = tmp_path / executor.__name__
        scheduler, runner, clock = make(state, executor=executor(state), slots="cpu:4",
                                        policy=make_policy("goodput", restart_cost_s=0.0))
        elastic = scheduler.submit(job("elastic", elastic={**ELASTIC, "max_gpus": 4, "batch_size": 64}), "ann")
        with scheduler.lock:  # its model as fitted: compute 0.1 s per 16 examples, sync 0.1 s in a node, 2 s across
            scheduler.elastic._params[elastic] = {"cpu": [0.0, 0.1 / 16, 2.0, 0.0, 0.1, 0.0, 1.0]}
        scheduler.tick()
        sizes[executor.__name__] = started(runner)[-1][2]
    assert sizes == {"FakeExecutor": 4, "TwoNodes": 2}


@pytest.mark.parametrize("told, largest", [
    ({"cpu": [4, 2]}, 4),  # nodes of different sizes: the largest, as the simulator's ElasticView takes
    ({"cpu": []}, 6),  # no node named for the type: all its slots, one node
    (None, 6),  # this machine
    (OSError("Ray cannot be asked now"), 6),
])
def test_a_types_largest_node_is_what_the_executor_says_else_all_its_slots(told, largest):
    class Told:
        def slots_per_node(self):
            if isinstance(told, Exception):
                raise told
            return told

    assert largest_nodes(Told(), {"cpu": 6}) == {"cpu": largest}
    assert largest_nodes(object(), {"cpu": 6}) == {"cpu": 6}  # an executor without the call
