"""Load a cluster from a YAML file or from the ``v100:36,p100:36,k80:36`` shorthand, and the
``ray:`` section of a cluster file (how `apportion serve --executor ray` finds each GPU type's
nodes, and the directory they share)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from apportion.core.cluster import Cluster, cluster_from_mapping, parse_cluster_shorthand
from apportion.core.errors import InputError
from apportion.workloads.yaml_file import read_yaml

YAML_SUFFIXES = (".yaml", ".yml")


def load_cluster(spec: str) -> Cluster:
    """The cluster ``spec`` names: an existing file or ``*.yaml``/``*.yml`` path is read as YAML
    (``node_groups: [{gpu_type, nodes, gpus_per_node, price_per_gpu_hour, cpus_per_node,
    memory_gib_per_node}]``), anything else is parsed as ``TYPE:GPUS[:GPUS_PER_NODE],...``."""
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


RAY_KEYS = ("address", "shared_dir", "gpu_types")
TYPE_KEYS = ("accelerator_type", "resource")


@dataclass(frozen=True)
class RaySettings:
    """The ``ray:`` section of a cluster file.

    ``gpu_types`` maps each apportion GPU type to how Ray marks its nodes: ``("accelerator_type",
    "V100")`` (Ray's label on nodes with V100s; one slot a GPU) or ``("resource", "k80")`` (a
    custom resource the nodes were started with; one slot a unit). Empty: the types Ray's
    accelerator labels name. ``shared_dir``: a directory every node and the server reach, for
    the jobs' checkpoints, logs and exit records. ``prices``: $ per GPU-hour from the file's
    ``node_groups``, when it has them; ``most``: GPUs of each type its ``node_groups`` count (on a
    rented cluster, the most the server may hold).
    """

    source: str
    address: str | None = None
    shared_dir: str | None = None
    gpu_types: dict[str, tuple[str, str]] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)


def load_ray_settings(path: str | Path) -> RaySettings:
    """The ``ray:`` section of cluster file ``path`` (InputError naming the line and field of anything wrong)::

        ray:
          address: 10.0.0.1:6379          # optional; --ray-address wins
          shared_dir: /mnt/shared/apportion
          gpu_types:
            v100: {accelerator_type: V100}
            k80: {resource: k80}
    """
    source = str(path)
    data, root = read_yaml(path, "cluster")
    try:
        return _ray_settings(data, source)
    except InputError as err:
        if err.line is not None or root is None or err.field is None:
            raise
        raise InputError(source, err.message, line=_line_of(root, err.field), field=err.field) from None


def _ray_settings(data: object, source: str) -> RaySettings:
    if not isinstance(data, dict) or not isinstance(data.get("ray"), dict):
        raise InputError(source, "expected a 'ray:' section (address, shared_dir, gpu_types) for the Ray executor",
                         field="ray" if isinstance(data, dict) and "ray" in data else None)
    section = data["ray"]
    unknown = sorted(str(k) for k in section if k not in RAY_KEYS)
    if unknown:
        raise InputError(source, f"unknown key (known: {', '.join(RAY_KEYS)})", field=f"ray.{unknown[0]}")
    address = section.get("address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise InputError(source, f"must be a Ray address such as 10.0.0.1:6379 or auto, got {address!r}",
                         field="ray.address")
    shared = section.get("shared_dir")
    if shared is not None and (not isinstance(shared, str) or not shared.strip() or not Path(shared).is_absolute()):
        raise InputError(source, f"must be an absolute directory path every node can reach, got {shared!r}",
                         field="ray.shared_dir")
    types = section.get("gpu_types") or {}
    if not isinstance(types, dict):
        raise InputError(source, "must map GPU types to {accelerator_type: NAME} or {resource: NAME}",
                         field="ray.gpu_types")
    gpu_types = {}
    for name, how in types.items():
        where = f"ray.gpu_types.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
            raise InputError(source, f"{name!r} is not a GPU type name such as 'v100'", field="ray.gpu_types")
        if isinstance(how, str):  # v100: V100 is short for {accelerator_type: V100}
            how = {"accelerator_type": how}
        if not isinstance(how, dict) or len(how) != 1 or next(iter(how)) not in TYPE_KEYS:
            raise InputError(source, "must be {accelerator_type: NAME} (Ray's label, e.g. V100) or"
                             " {resource: NAME} (a custom resource of its nodes, one a GPU)", field=where)
        key, value = next(iter(how.items()))
        if not isinstance(value, str) or not value.strip() or ":" in value:
            raise InputError(source, f"must be a Ray resource or accelerator name such as 'V100', got {value!r}",
                             field=f"{where}.{key}")
        gpu_types[name.lower()] = (key, value.strip())
    prices, most = {}, {}
    if "node_groups" in data:
        for group in cluster_from_mapping(data, source=source).groups:
            if not math.isnan(group.price_per_gpu_hour):
                prices[group.gpu_type] = group.price_per_gpu_hour
            most[group.gpu_type] = most.get(group.gpu_type, 0) + group.gpus
    return RaySettings(source, address.strip() if address else None, shared, gpu_types, prices, most)
