"""The one builder of a round's jobs view, and a round planned around pinned jobs and offline GPUs."""

import math

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.mechanism.round_planner import RoundPlanner
from apportion.mechanism.round_state import MIN_WEIGHT, RoundState, job_view, running_types
from apportion.policies import make_policy


def view(n: int, priority=None, running_type=None):
    return job_view(
        index=np.arange(10, 10 + n), submit_time_s=np.arange(n, dtype=float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64), priority=np.ones(n) if priority is None else np.asarray(priority),
        total_steps=np.full(n, 100.0), queue=np.full(n, ""), user=np.full(n, ""), now_s=10.0,
        running_type=running_type,
    )


def test_a_best_effort_priority_counts_as_the_smallest_weight_and_others_stay():
    jobs = view(3, priority=[0.0, 0.5, 2.0])

    assert jobs.priority.tolist() == [MIN_WEIGHT, 0.5, 2.0]


def test_a_job_left_out_of_the_builder_never_ran():
    jobs = view(2)

    assert jobs.steps_done.tolist() == [0.0, 0.0]
    assert jobs.attained_service_s.tolist() == [0.0, 0.0]
    assert np.isnan(jobs.first_start_s).all()
    assert jobs.running_type.tolist() == [-1, -1]


def test_the_type_each_job_holds_comes_from_who_holds_each_gpu():
    cluster = Cluster((NodeGroup("v100", 2, 2), NodeGroup("k80", 2, 2)))
    holder = np.array([-1, 0, 1, -1])  # job 0 on a v100, job 1 on a k80, sharing it with job 2
    partner = np.array([-1, -1, 2, -1])

    assert running_types(cluster, holder, partner, 4).tolist() == [0, 1, 1, -1]


def one_node(gpus: int) -> Cluster:
    return Cluster((NodeGroup("v100", gpus, gpus),))


def state(jobs, holder, partner, **masks) -> RoundState:
    n = len(jobs)
    return RoundState(jobs, np.ones((n, 1)), np.zeros((n, 1)), np.asarray(holder), np.asarray(partner), **masks)


def test_a_pinned_job_keeps_its_gpu_and_its_partner_and_the_rest_are_planned_around_them():
    """Jobs 0-3 (fifo order 0, 1, 2, 3) on 3 GPUs. Job 2 is starting on GPU 0, sharing it with job 3:
    both keep GPU 0 although fifo would run job 2 before them; jobs 0 and 1 take GPUs 1 and 2."""
    jobs = view(4, running_type=np.array([-1, -1, 0, 0]))
    pinned = np.array([False, False, True, False])

    decision = RoundPlanner(make_policy("fifo"), one_node(3)).plan(
        state(jobs, [2, -1, -1], [3, -1, -1], pinned=pinned))

    assert decision.owner.tolist() == [2, 0, 1]
    assert decision.second.tolist() == [3, -1, -1]
    assert decision.chosen_type.tolist() == [0, 0, 0, 0]
    assert decision.partner.tolist() == [-1, -1, 3, 2]
    assert decision.kept.tolist() == [False, False, True, True]
    assert decision.allocation.share[2:].tolist() == [[1.0], [1.0]]
    assert decision.reallocate_at == -math.inf  # the next round may change once the pinned job joins


def test_an_offline_gpu_is_given_to_nobody():
    """Three jobs, three GPUs, the middle one lost: the two first jobs run on GPUs 0 and 2, the third waits."""
    jobs = view(3)
    offline = np.array([False, True, False])

    decision = RoundPlanner(make_policy("fifo"), one_node(3)).plan(
        state(jobs, [-1, -1, -1], [-1, -1, -1], offline=offline))

    assert decision.owner.tolist() == [0, -1, 1]
    assert decision.chosen_type.tolist() == [0, 0, -1]


def test_a_job_holding_an_offline_gpu_moves_off_it():
    """Job 0 held GPU 1, now lost: it runs on GPU 0 and did not keep its GPUs (a restart)."""
    jobs = view(1, running_type=np.array([0]))

    decision = RoundPlanner(make_policy("fifo"), one_node(2)).plan(
        state(jobs, [-1, 0], [-1, -1], offline=np.array([False, True])))

    assert decision.owner.tolist() == [0, -1]
    assert decision.moved.tolist() == [True]


def test_when_every_gpu_is_pinned_or_offline_the_others_wait():
    jobs = view(2, running_type=np.array([0, -1]))

    decision = RoundPlanner(make_policy("fifo"), one_node(2)).plan(
        state(jobs, [0, -1], [-1, -1], pinned=np.array([True, False]), offline=np.array([False, True])))

    assert decision.owner.tolist() == [0, -1]
    assert decision.chosen_type.tolist() == [0, -1]
    assert not decision.resolved
