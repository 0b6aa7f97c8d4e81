"""Clusters: the TYPE:GPUS[:PER_NODE] shorthand, parsed mappings, and the arrays they flatten to."""

import numpy as np
import pytest

from apportion.core.cluster import Cluster, NodeGroup, cluster_from_mapping, parse_cluster_shorthand
from apportion.core.errors import InputError


def test_three_types_of_36_gpus_make_9_nodes_of_4_each():
    cluster = parse_cluster_shorthand("v100:36,p100:36,k80:36")

    assert cluster.gpu_types == ("v100", "p100", "k80")
    assert list(cluster.capacity) == [36, 36, 36]
    assert cluster.num_gpus == 108
    # 36 GPUs / 4 per node = 9 nodes a type, 27 in all
    assert cluster.num_nodes == 27
    assert list(np.bincount(cluster.node_type)) == [9, 9, 9]
    assert np.all(cluster.node_gpus == 4)
    assert cluster.describe() == "v100:36,p100:36,k80:36"


def test_gpu_ids_are_grouped_by_node_in_group_order():
    cluster = parse_cluster_shorthand("v100:8,k80:4")

    # GPUs 0-3 on node 0, 4-7 on node 1 (both v100), 8-11 on node 2 (k80)
    assert list(cluster.gpu_node) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert list(cluster.gpu_type) == [0] * 8 + [1] * 4
    assert list(cluster.node_first_gpu) == [0, 4, 8]


def test_six_gpus_four_to_a_node_make_a_node_of_4_and_one_of_2():
    cluster = parse_cluster_shorthand("v100:6:4")

    assert list(cluster.node_gpus) == [4, 2]
    assert list(cluster.capacity) == [6]
    assert list(cluster.node_first_gpu) == [0, 4]


def test_type_names_are_lowercased_and_repeated_types_add_up():
    cluster = parse_cluster_shorthand(" V100:4 , v100:2:2 ")

    assert cluster.gpu_types == ("v100",)
    assert list(cluster.capacity) == [6]
    assert list(cluster.node_gpus) == [4, 2]


@pytest.mark.parametrize(
    "spec, offending",
    [
        ("v100", "v100"),  # no GPU count
        ("v100:x", "'x'"),  # count is not a number
        ("v100:0", "'0'"),  # count is not positive
        ("v100:4,k80:-2", "'-2'"),
        ("v100:4:0", "'0'"),  # zero GPUs per node
        ("v100:4:2:1", "v100:4:2:1"),  # too many parts
        (":4", ":4"),  # no type
    ],
)
def test_a_bad_part_is_named_in_the_error(spec, offending):
    with pytest.raises(InputError) as caught:
        parse_cluster_shorthand(spec)

    assert offending in str(caught.value)
    assert str(caught.value).startswith("--cluster: ")


def test_an_empty_spec_says_what_is_expected():
    with pytest.raises(InputError) as caught:
        parse_cluster_shorthand("", source="cluster.txt")

    assert "empty cluster spec" in str(caught.value)
    assert "v100:36" in str(caught.value)  # an example to copy
    assert caught.value.source == "cluster.txt"


def test_a_mapping_builds_node_groups_with_prices():
    data = {
        "node_groups": [
            {"gpu_type": "V100", "nodes": 2, "gpus_per_node": 8, "price_per_gpu_hour": 3.06},
            {"gpu_type": "k80", "nodes": 3},
        ]
    }
    cluster = cluster_from_mapping(data, source="c.yaml")

    assert cluster.describe() == "v100:16,k80:12"
    assert list(cluster.node_gpus) == [8, 8, 4, 4, 4]
    assert cluster.price_per_gpu_hour[0] == 3.06
    assert np.isnan(cluster.price_per_gpu_hour[1])


@pytest.mark.parametrize(
    "data, field",
    [
        ({"groups": []}, "node_groups"),
        ({"node_groups": []}, "node_groups"),
        ({"node_groups": [{"gpu_type": "v100", "nodes": 1}, {"gpu_type": "k80", "nodes": 0}]}, "node_groups[1].nodes"),
        ({"node_groups": [{"gpu_type": "v100", "nodes": "two"}]}, "node_groups[0].nodes"),
        ({"node_groups": [{"nodes": 2}]}, "node_groups[0].gpu_type"),
        ({"node_groups": [{"gpu_type": "v100", "nodes": 1, "gpus_per_node": 0}]}, "node_groups[0].gpus_per_node"),
        (
            {"node_groups": [{"gpu_type": "v100", "nodes": 1, "price_per_gpu_hour": -1}]},
            "node_groups[0].price_per_gpu_hour",
        ),
        ({"node_groups": [{"gpu_type": "v100", "nodes": 1, "gpus": 4}]}, "node_groups[0]"),
        ({"node_groups": ["v100"]}, "node_groups[0]"),
    ],
)
def test_mapping_errors_name_the_field(data, field):
    with pytest.raises(InputError) as caught:
        cluster_from_mapping(data, source="c.yaml")

    assert caught.value.field == field
    assert str(caught.value).startswith(f"c.yaml: field '{field}': ")


def test_a_partial_last_node_in_a_node_group():
    cluster = Cluster((NodeGroup("a100", 10, 8), NodeGroup("t4", 3, 4)))

    assert [g.nodes for g in cluster.groups] == [2, 1]
    assert list(cluster.node_gpus) == [8, 2, 3]
    assert list(cluster.node_type) == [0, 0, 1]
    assert len(cluster.gpu_node) == cluster.num_gpus == 13
