"""Load a cluster from a YAML file or from the ``v100:36,p100:36,k80:36`` shorthand."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from apportion.core.cluster import Cluster, cluster_from_mapping, parse_cluster_shorthand
from apportion.core.errors import InputError
from apportion.workloads.yaml_file import read_yaml

YAML_SUFFIXES = (".yaml", ".yml")


def load_cluster(spec: str) -> Cluster:
    """The cluster ``spec`` names: an existing file or ``*.yaml``/``*.yml`` path is read as YAML
    (``node_groups: [{gpu_type, nodes, gpus_per_node, price_per_gpu_hour}]``), anything else is
    parsed as ``TYPE:GPUS[:GPUS_PER_NODE],...``."""
    path = Path(spec)
    if path.is_file() or spec.lower().endswith(YAML_SUFFIXES):
        return _load_yaml(path)
    if "/" in spec or "\\" in spec:
        raise InputError(spec, "no such cluster file (and not a 'TYPE:GPUS,...' shorthand either)")
    return parse_cluster_shorthand(spec)


def _load_yaml(path: Path) -> Cluster:
    source = str(path)
    data, root = read_yaml(path, "cluster")
    try:
        return cluster_from_mapping(data, source=source)
    except InputError as err:
        if err.line is not None or root is None or err.field is None:
            raise
        raise InputError(source, err.message, line=_line_of(root, err.field), field=err.field) from None


def _line_of(node: yaml.Node, field: str) -> int:
    """1-based line of the YAML node at ``field`` (``node_groups[1].nodes``), or of its nearest parent."""
    for step in re.findall(r"[^.\[\]]+", field):
        if isinstance(node, yaml.MappingNode):
            found = [value for key, value in node.value if key.value == step]
        elif isinstance(node, yaml.SequenceNode) and step.isdigit() and int(step) < len(node.value):
            found = [node.value[int(step)]]
        else:
            found = []
        if not found:
            break
        node = found[0]
    return node.start_mark.line + 1
