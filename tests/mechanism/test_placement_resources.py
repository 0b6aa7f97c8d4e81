"""Placement on nodes that count CPU cores and memory: a job goes only where its share of them is free."""

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.node_resources import node_demand
from apportion.core.views import JobView
from apportion.mechanism.pairs import place_units
from apportion.mechanism.placement import place_on_gpus
from apportion.mechanism.round_planner import RoundPlanner, RoundState
from apportion.policies.fifo import Fifo


def nodes(count: int, cpus=None, memory_gib=None, gpus_per_node: int = 4) -> Cluster:
    return Cluster((NodeGroup("v100", count * gpus_per_node, gpus_per_node, cpus_per_node=cpus,
                              memory_gib_per_node=memory_gib),))


def place(cluster, num_gpus, cpus=None, memory_gib=None, previous=None):
    """Place every job on the cluster's one type; GPU owners and whether each kept its GPUs."""
    num_gpus = np.asarray(num_gpus)
    demand = node_demand(cluster, num_gpus, None if cpus is None else np.asarray(cpus, dtype=float),
                         None if memory_gib is None else np.asarray(memory_gib, dtype=float))
    previous = np.full(cluster.num_gpus, -1) if previous is None else np.asarray(previous)
    return place_on_gpus(cluster, previous, np.zeros(len(num_gpus), dtype=np.int64), num_gpus, demand)


def gpus_of(owner, job):
    return np.flatnonzero(owner == job).tolist()


def test_a_node_of_8_cores_takes_two_jobs_asking_4_each_but_not_a_third():
    owner, _ = place(nodes(1, cpus=8), [1, 1, 1], cpus=[4, 4, 4])

    assert owner.tolist() == [0, 1, -1, -1]  # job 2 waits though two GPUs are free


def test_a_node_of_64_gib_takes_two_jobs_asking_32_each_but_not_a_third():
    owner, _ = place(nodes(1, memory_gib=64), [1, 1, 1], memory_gib=[32, 32, 32])

    assert owner.tolist() == [0, 1, -1, -1]


def test_a_job_asking_no_cores_takes_the_gpus_left_beside_jobs_that_used_them_all():
    owner, _ = place(nodes(1, cpus=8), [1, 1, 1], cpus=[4, 4, 0])

    assert owner.tolist() == [0, 1, 2, -1]


def test_cores_and_memory_both_count():
    # 8 cores and 64 GiB: job 0 takes 2 cores and 48 GiB, so job 1 (2 cores, 32 GiB) finds no memory
    owner, _ = place(nodes(1, cpus=8, memory_gib=64), [1, 1, 1], cpus=[2, 2, 2], memory_gib=[48, 32, 16])

    assert owner.tolist() == [0, 2, -1, -1]


def test_a_job_goes_past_the_fullest_node_when_that_one_has_no_cores_left():
    """Node 0 keeps a job on one GPU that holds 6 of its 8 cores. A new 1-GPU job asking 4 cores
    would go to the fullest node (node 0) by GPUs alone; it goes to node 1."""
    cluster = nodes(2, cpus=8)
    previous = np.full(8, -1)
    previous[0] = 0
    owner, kept = place(cluster, [1, 1], cpus=[6, 4], previous=previous)

    assert kept.tolist() == [True, False]
    assert gpus_of(owner, 1) == [4]
    assert gpus_of(place(nodes(2), [1, 1], previous=previous)[0], 1) == [1]  # without limits: node 0


def test_a_gang_across_nodes_needs_its_share_beside_each_gpu_on_each_node():
    """8 GPUs asking 16 cores need 2 beside each: 8 on each of two 4-GPU, 8-core nodes. 17 do not fit."""
    owner, _ = place(nodes(2, cpus=8), [8], cpus=[16])
    assert gpus_of(owner, 0) == list(range(8))

    owner, _ = place(nodes(2, cpus=8), [8], cpus=[17])
    assert gpus_of(owner, 0) == []


def test_a_gang_waits_when_the_free_gpus_lack_cores_for_their_share():
    """Three 4-GPU nodes of 8 cores; job 0 keeps one GPU of node 0 and 7 of its cores. Job 1 wants
    10 GPUs with a core beside each: nodes 1 and 2 give 8, node 0 has room for 1 more: 9 < 10,
    though 11 GPUs are free. A 9-GPU job with the same share fits, on all three nodes."""
    cluster = nodes(3, cpus=8)
    previous = np.full(12, -1)
    previous[0] = 0
    owner, _ = place(cluster, [1, 10], cpus=[7, 10], previous=previous)
    assert gpus_of(owner, 1) == []

    owner, _ = place(cluster, [1, 9], cpus=[7, 9], previous=previous)
    assert gpus_of(owner, 1) == [1, 4, 5, 6, 7, 8, 9, 10, 11]


def test_a_gang_takes_the_tightest_node_with_room_for_its_cores():
    """Node 0 has 3 free GPUs but 2 free cores; node 1 has 4 and 8. A 2-GPU job asking 4 cores
    would take node 0 (the tighter fit) by GPUs alone; it takes node 1."""
    cluster = nodes(2, cpus=8)
    previous = np.full(8, -1)
    previous[0] = 0
    owner, _ = place(cluster, [1, 2], cpus=[6, 4], previous=previous)

    assert gpus_of(owner, 1) == [4, 5]


def test_two_jobs_sharing_a_gpu_need_room_for_both_their_cores():
    """Jobs 0 and 1 share a GPU (5 + 5 cores) on a node of 8 cores: the pair does not fit; job 2
    alone (3 cores) does."""
    cluster = nodes(1, cpus=8)
    demand = node_demand(cluster, np.ones(3, dtype=np.int64), None, None)
    assert demand is None  # nobody asked: GPUs alone count
    demand = node_demand(cluster, np.ones(3, dtype=np.int64), np.array([5.0, 5.0, 3.0]), None)
    idle = np.full(4, -1)
    first, second, _ = place_units(cluster, idle, idle, np.zeros(3, dtype=np.int64), np.array([1, 0, -1]),
                                   np.ones(3, dtype=np.int64), demand)

    assert first.tolist() == [2, -1, -1, -1] and second.tolist() == [-1, -1, -1, -1]


def test_nothing_counts_unless_the_cluster_limits_it_and_a_job_asks_for_it():
    gpus = np.ones(2, dtype=np.int64)

    assert node_demand(nodes(1), gpus, np.array([4.0, 4.0]), None) is None  # no limit on the nodes
    assert node_demand(nodes(1, cpus=8), gpus, None, np.array([4.0, 4.0])) is None  # memory not limited
    assert node_demand(nodes(1, cpus=8), gpus, np.zeros(2), None) is None  # nobody asks for cores
    assert node_demand(nodes(1, cpus=8), gpus, np.array([0.0, 4.0]), None).resources == ("cpus",)


def jobs_view(cpus) -> JobView:
    n = len(cpus)
    return JobView(
        index=np.arange(n), submit_time_s=np.arange(n, dtype=float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64), priority=np.ones(n), total_steps=np.full(n, 100.0),
        steps_done=np.zeros(n), attained_service_s=np.zeros(n), first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1), queue=np.full(n, ""), user=np.full(n, ""), now_s=10.0,
        cpus=np.asarray(cpus, dtype=float),
    )


def test_the_round_runs_the_jobs_the_node_has_cores_for_and_the_third_waits():
    """fifo chooses all three 1-GPU jobs for the 4 GPUs; the node's 8 cores hold two of them."""
    cluster = nodes(1, cpus=8)
    planner = RoundPlanner(Fifo(), cluster)
    idle = np.full(4, -1)
    decision = planner.plan(RoundState(jobs_view([4, 4, 4]), np.ones((3, 1)), np.zeros((3, 1)), idle, idle))

    assert decision.chosen_type.tolist() == [0, 0, -1]
    assert decision.running.tolist() == [True, True, False]
    assert decision.owner.tolist() == [0, 1, -1, -1]
