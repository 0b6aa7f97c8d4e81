"""The cluster a server plans a round over: one node per GPU type, one object per set of counts."""

import math

import numpy as np

from apportion.mechanism.node_per_type import NodePerType, node_per_type


def test_each_type_is_one_node_of_its_gpus_at_its_price():
    cluster = node_per_type(("v100", "k80"), (3, 2), (2.5, math.nan))

    assert cluster.gpu_types == ("v100", "k80")
    assert cluster.capacity.tolist() == [3, 2]
    assert cluster.node_gpus.tolist() == [3, 2]
    assert cluster.gpu_type.tolist() == [0, 0, 0, 1, 1]
    assert cluster.price_per_gpu_hour[0] == 2.5 and math.isnan(cluster.price_per_gpu_hour[1])


def test_the_same_counts_give_the_same_cluster_object_and_new_counts_another():
    clusters = NodePerType(("v100", "k80"), np.array([2.5, math.nan]))

    assert clusters.cluster((3, 2)) is clusters.cluster((3, 2))
    assert clusters.cluster((2, 2)) is not clusters.cluster((3, 2))


def test_gpus_left_are_grouped_by_type_and_mapped_back_to_their_ids():
    """GPUs 0-3 of types v100, k80, v100, k80; with GPU 0 taken, the cluster is v100:1, k80:2, whose
    GPUs stand for ids 2, 1, 3."""
    clusters = NodePerType(("v100", "k80"), np.array([math.nan, math.nan]))

    cluster, ids = clusters.of(np.array([0, 1, 0, 1]), np.array([1, 2, 3]))

    assert cluster.capacity.tolist() == [1, 2]
    assert ids.tolist() == [2, 1, 3]
