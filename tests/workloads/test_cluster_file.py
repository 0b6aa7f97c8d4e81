"""Clusters from YAML files and from the TYPE:GPUS shorthand."""

from pathlib import Path

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.workloads.cluster_file import load_cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "small.yaml"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


def test_the_shipped_example_loads():
    cluster = load_cluster(str(EXAMPLE))

    assert cluster.describe() == "k80:8,p100:8,v100:8,a100:4"
    assert cluster.num_nodes == 7
    np.testing.assert_allclose(cluster.price_per_gpu_hour, [0.90, 1.46, 3.06, 4.10])


def test_yaml_file_without_prices(tmp_path):
    path = write(tmp_path, "node_groups:\n  - gpu_type: V100\n    nodes: 3\n    gpus_per_node: 8\n")
    cluster = load_cluster(path)

    assert cluster.gpu_types == ("v100",)
    assert cluster.num_gpus == 24 and cluster.num_nodes == 3
    assert np.isnan(cluster.price_per_gpu_hour[0])


def test_shorthand_with_default_and_explicit_gpus_per_node():
    cluster = load_cluster("v100:8,k80:6:2")

    assert cluster.describe() == "v100:8,k80:6"
    assert list(cluster.node_gpus) == [4, 4, 2, 2, 2]  # 4 GPUs a node unless told


@pytest.mark.parametrize(
    "text, line, field, message",
    [
        (
            "node_groups:\n  - gpu_type: v100\n    nodes: 2\n  - gpu_type: k80\n    nodez: 2\n",
            4,
            "node_groups[1]",
            "unknown key 'nodez'",
        ),
        (
            "node_groups:\n  - gpu_type: v100\n    nodes: -2\n",
            3,
            "node_groups[0].nodes",
            "must be a positive integer, got -2",
        ),
        ("gpus: 8\n", 1, "node_groups", "expected a mapping with a 'node_groups' list"),
    ],
)
def test_bad_yaml_content_names_the_line_and_field(tmp_path, text, line, field, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert (caught.value.source, caught.value.line, caught.value.field) == (path, line, field)
    assert message in str(caught.value)


def test_yaml_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "node_groups:\n  - gpu_type: v100\n    nodes: 2\n   gpus_per_node: 4\n")
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert caught.value.line == 4
    assert str(caught.value).startswith(f"{path}:4: YAML syntax error")


@pytest.mark.parametrize("spec", ["no/such/cluster.yaml", "cluster.yml", "no/such/cluster"])
def test_a_missing_file_is_named(spec):
    with pytest.raises(InputError) as caught:
        load_cluster(spec)
    assert caught.value.source == spec
    assert "no such cluster file" in str(caught.value)


def test_a_bad_shorthand():
    with pytest.raises(InputError, match="not TYPE:GPUS"):
        load_cluster("v100")
