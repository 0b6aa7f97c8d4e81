"""Nodes' CPU cores and memory: the per-node arrays, and which GPU types' nodes can ever hold a job's share."""

import math

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.node_resources import fits_on_nodes, gpus_with_room, node_demand

# two v100 nodes of 4 GPUs, 16 cores, 128 GiB; three k80 nodes of 4 GPUs with no limit given
CLUSTER = Cluster((NodeGroup("v100", 8, 4, cpus_per_node=16, memory_gib_per_node=128), NodeGroup("k80", 10, 4)))


def test_each_node_has_its_groups_cores_and_memory_and_inf_where_not_limited():
    assert CLUSTER.node_gpus.tolist() == [4, 4, 4, 4, 2]
    assert CLUSTER.node_cpus.tolist() == [16, 16, math.inf, math.inf, math.inf]
    assert CLUSTER.node_memory_gib.tolist() == [128, 128, math.inf, math.inf, math.inf]
    assert CLUSTER.limits_cpus and CLUSTER.limits_memory
    assert not Cluster((NodeGroup("v100", 8),)).limits_cpus


def test_the_last_node_of_a_group_has_all_its_cores_whatever_its_gpus():
    cluster = Cluster((NodeGroup("v100", 6, 4, cpus_per_node=8),))

    assert cluster.node_gpus.tolist() == [4, 2] and cluster.node_cpus.tolist() == [8, 8]


def test_a_jobs_cores_are_spread_evenly_over_its_gpus():
    demand = node_demand(CLUSTER, np.array([4, 1]), np.array([8.0, 3.0]), np.array([0.0, 10.0]))

    assert demand.resources == ("cpus", "memory_gib")
    assert demand.per_gpu.tolist() == [[2.0, 0.0], [3.0, 10.0]]


def test_gpus_each_type_can_give_a_job_with_room_for_its_share():
    """A 4-GPU job asking 40 cores needs 10 beside each GPU: a 16-core v100 node holds one such
    share, so the two v100 nodes give it 2 GPUs; the k80 nodes count no cores and give all 10."""
    gpus, cpus = np.array([4, 4, 1]), np.array([40.0, 32.0, 17.0])

    assert gpus_with_room(CLUSTER, gpus, cpus).tolist() == [[2, 10], [4, 10], [0, 10]]
    assert fits_on_nodes(CLUSTER, gpus, cpus).tolist() == [[False, True], [True, True], [False, True]]


def test_every_job_fits_when_nothing_is_limited_or_asked_for():
    gpus = np.array([4, 1])

    assert fits_on_nodes(CLUSTER, gpus) is True
    assert fits_on_nodes(Cluster((NodeGroup("v100", 8),)), gpus, np.array([99.0, 99.0])) is True
