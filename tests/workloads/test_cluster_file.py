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


def test_a_node_group_may_give_each_nodes_cpu_cores_and_memory(tmp_path):
    path = write(tmp_path, "node_groups:\n  - gpu_type: v100\n    nodes: 2\n    cpus_per_node: 32\n"
                           "    memory_gib_per_node: 244.5\n  - gpu_type: k80\n    nodes: 1\n")
    cluster = load_cluster(path)

    assert cluster.node_cpus.tolist() == [32, 32, np.inf]
    assert cluster.node_memory_gib.tolist() == [244.5, 244.5, np.inf]  # k80 nodes: not limited


@pytest.mark.parametrize(
    "value, field, message",
    [
        ("cpus_per_node: 0", "node_groups[0].cpus_per_node", "must be a positive integer, got 0"),
        ("cpus_per_node: 7.5", "node_groups[0].cpus_per_node", "must be a positive integer, got 7.5"),
        ("cpus_per_node: many", "node_groups[0].cpus_per_node", "must be a positive integer, got 'many'"),
        ("memory_gib_per_node: -64", "node_groups[0].memory_gib_per_node", "must be a positive number of GiB, got -64"),
        ("memory_gib_per_node: 64GB", "node_groups[0].memory_gib_per_node", "must be a positive number of GiB"),
        ("memory_gib_per_node: .inf", "node_groups[0].memory_gib_per_node", "must be a positive number of GiB"),
        ("cores_per_node: 8", "node_groups[0]", "unknown key 'cores_per_node'"),
    ],
)
def test_bad_cores_or_memory_name_the_line_and_field(tmp_path, value, field, message):
    path = write(tmp_path, f"node_groups:\n  - gpu_type: v100\n    nodes: 2\n    {value}\n")
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert (caught.value.source, caught.value.field) == (path, field)
    assert caught.value.line == (4 if field != "node_groups[0]" else 2)
    assert message in str(caught.value)


def test_yaml_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "node_groups:\n  - gpu_type: v100\n    nodes: 2\n   gpus_per_node: 4\n")
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert caught.value.line == 4
    assert str(caught.value).startswith(f"{path}:4: YAML syntax error")


def test_a_field_given_twice_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, "node_groups:\n  - gpu_type: v100\n    nodes: 2\n    nodes: 20\n")
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert str(caught.value) == f"{path}:4: duplicate key 'nodes' (first on line 3)"


@pytest.mark.parametrize("spec", ["no/such/cluster.yaml", "cluster.yml", "no/such/cluster"])
def test_a_missing_file_is_named(spec):
    with pytest.raises(InputError) as caught:
        load_cluster(spec)
    assert caught.value.source == spec
    assert "no such cluster file" in str(caught.value)


def test_a_bad_shorthand():
    with pytest.raises(InputError, match="not TYPE:GPUS"):
        load_cluster("v100")


def test_the_shipped_ray_example_loads_for_serve_and_for_the_simulator():
    from apportion.workloads.cluster_file import load_ray_settings

    settings = load_ray_settings(EXAMPLE.parent / "ray.yaml")

    assert settings.gpu_types == {"v100": ("accelerator_type", "V100"), "k80": ("resource", "k80")}
    assert settings.shared_dir == "/mnt/shared/apportion" and settings.prices == {"v100": 3.06, "k80": 0.90}
    assert load_cluster(str(EXAMPLE.parent / "ray.yaml")).describe() == "v100:8,k80:8"


def test_the_ray_section_names_each_types_resource_and_the_shared_directory(tmp_path):
    from apportion.workloads.cluster_file import load_ray_settings

    path = write(tmp_path, "ray:\n  address: 10.0.0.1:6379\n  shared_dir: /mnt/shared/apportion\n  gpu_types:\n"
                           "    V100: {accelerator_type: V100}\n    k80: {resource: k80}\n    a100: A100\n"
                           "node_groups:\n  - gpu_type: k80\n    nodes: 2\n    price_per_gpu_hour: 0.9\n")
    settings = load_ray_settings(path)

    assert settings.address == "10.0.0.1:6379" and settings.shared_dir == "/mnt/shared/apportion"
    assert settings.gpu_types == {"v100": ("accelerator_type", "V100"), "k80": ("resource", "k80"),
                                  "a100": ("accelerator_type", "A100")}
    assert settings.prices == {"k80": 0.9}
    assert settings.most == {"k80": 8}  # 2 nodes of 4 GPUs: the most a rented cluster may hold (serve --market)
    assert load_cluster(path).describe() == "k80:8"  # the simulator reads the same file


@pytest.mark.parametrize(
    "text, line, field, message",
    [
        ("node_groups: []\n", None, None, "expected a 'ray:' section"),
        ("ray:\n  gpu_types:\n    k80: {resourc: k80}\n", 3, "ray.gpu_types.k80", "must be {accelerator_type: NAME}"),
        ("ray:\n  shared_dir: shared\n", 2, "ray.shared_dir", "must be an absolute directory path"),
        ("ray:\n  adress: auto\n", 2, "ray.adress", "unknown key (known: address, shared_dir, gpu_types)"),
        ("ray:\n  gpu_types:\n    v100: {accelerator_type: 'accelerator_type:V100'}\n", 3,
         "ray.gpu_types.v100.accelerator_type", "such as 'V100'"),
    ],
)
def test_a_bad_ray_section_is_reported_with_its_line_and_field(tmp_path, text, line, field, message):
    from apportion.workloads.cluster_file import load_ray_settings

    with pytest.raises(InputError) as caught:
        load_ray_settings(write(tmp_path, text))
    assert caught.value.line == line and caught.value.field == field
    assert message in caught.value.message
