"""A cluster on paper or in a rack: node groups of one GPU type each, flattened to arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.core.errors import InputError

DEFAULT_GPUS_PER_NODE = 4


@dataclass(frozen=True)
class NodeGroup:
    """``gpus`` GPUs of one type, ``gpus_per_node`` to a node (the last node may hold fewer).

    ``cpus_per_node`` and ``memory_gib_per_node`` are each node's CPU cores and memory (the last
    node's too, whatever its GPUs); None: placement does not count them.
    """

    gpu_type: str
    gpus: int
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    price_per_gpu_hour: float = float("nan")
    cpus_per_node: float | None = None
    memory_gib_per_node: float | None = None

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)


@dataclass(frozen=True)
class Cluster:
    """Node groups plus the per-type, per-node and per-GPU arrays the mechanism works on.

    GPU ids are 0..G-1, grouped by node; nodes are 0..N-1, grouped by group order.
    """

    groups: tuple[NodeGroup, ...]
    gpu_types: tuple[str, ...] = field(init=False)
    capacity: np.ndarray = field(init=False, repr=False)  # [T] GPUs of each type
    price_per_gpu_hour: np.ndarray = field(init=False, repr=False)  # [T]
    node_type: np.ndarray = field(init=False, repr=False)  # [N] type index of each node
    node_gpus: np.ndarray = field(init=False, repr=False)  # [N] GPUs in each node
    node_first_gpu: np.ndarray = field(init=False, repr=False)  # [N] first GPU id of each node
    gpu_node: np.ndarray = field(init=False, repr=False)  # [G] node of each GPU
    gpu_type: np.ndarray = field(init=False, repr=False)  # [G] type index of each GPU
    node_cpus: np.ndarray = field(init=False, repr=False)  # [N] CPU cores of each node, inf when not limited
    node_memory_gib: np.ndarray = field(init=False, repr=False)  # [N] memory of each node, inf when not limited

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a cluster needs at least one node group")
        types: list[str] = []
        for g in self.groups:
            if g.gpu_type not in types:
                types.append(g.gpu_type)
        type_index = {t: i for i, t in enumerate(types)}
        capacity = np.zeros(len(types), dtype=np.int64)
        prices = np.full(len(types), np.nan)
        node_type: list[int] = []
        node_gpus: list[int] = []
        node_cpus: list[float] = []
        node_memory: list[float] = []
        for g in self.groups:
            ti = type_index[g.gpu_type]
            capacity[ti] += g.gpus
            if not np.isnan(g.price_per_gpu_hour):
                prices[ti] = g.price_per_gpu_hour
            full, rest = divmod(g.gpus, g.gpus_per_node)
            node_type += [ti] * (full + (rest > 0))
            node_gpus += [g.gpus_per_node] * full + ([rest] if rest else [])
            node_cpus += [_limit(g.cpus_per_node)] * (full + (rest > 0))
            node_memory += [_limit(g.memory_gib_per_node)] * (full + (rest > 0))
        node_gpus_arr = np.asarray(node_gpus, dtype=np.int64)
        gpu_node = np.repeat(np.arange(len(node_gpus_arr)), node_gpus_arr)
        object.__setattr__(self, "gpu_types", tuple(types))
        object.__setattr__(self, "capacity", capacity)
        object.__setattr__(self, "price_per_gpu_hour", prices)
        object.__setattr__(self, "node_type", np.asarray(node_type, dtype=np.int64))
        object.__setattr__(self, "node_gpus", node_gpus_arr)
        object.__setattr__(self, "node_first_gpu", np.concatenate([[0], np.cumsum(node_gpus_arr)[:-1]]))
        object.__setattr__(self, "gpu_node", gpu_node)
        object.__setattr__(self, "gpu_type", np.asarray(node_type, dtype=np.int64)[gpu_node])
        object.__setattr__(self, "node_cpus", np.asarray(node_cpus, dtype=np.float64))
        object.__setattr__(self, "node_memory_gib", np.asarray(node_memory, dtype=np.float64))

    @property
    def num_gpus(self) -> int:
        return int(self.capacity.sum())

    @property
    def num_nodes(self) -> int:
        return len(self.node_gpus)

    @property
    def limits_cpus(self) -> bool:
        """Some node has a known number of CPU cores, which placement then counts."""
        return any(g.cpus_per_node is not None for g in self.groups)

    @property
    def limits_memory(self) -> bool:
        """Some node has a known amount of memory, which placement then counts."""
        return any(g.memory_gib_per_node is not None for g in self.groups)

    def describe(self) -> str:
        """``v100:36,p100:36`` style one-liner."""
        return ",".join(f"{t}:{int(c)}" for t, c in zip(self.gpu_types, self.capacity))


def _limit(amount: float | None) -> float:
    return math.inf if amount is None else float(amount)


def parse_cluster_shorthand(text: str, source: str = "--cluster") -> Cluster:
    """Parse ``v100:36,p100:36,k80:36`` (optionally ``type:gpus:gpus_per_node``)."""
    groups = []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError(source, "empty cluster spec; expected e.g. 'v100:36,p100:36,k80:36'")
    for part in parts:
        bits = part.split(":")
        if len(bits) not in (2, 3) or not bits[0]:
            raise InputError(
                source, f"'{part}' is not TYPE:GPUS or TYPE:GPUS:GPUS_PER_NODE (e.g. 'v100:36')"
            )
        gpu_type = bits[0].strip().lower()
        gpus = _positive_int(bits[1], source, f"{gpu_type} GPUs")
        per_node = (
            _positive_int(bits[2], source, f"{gpu_type} GPUs per node")
            if len(bits) == 3
            else DEFAULT_GPUS_PER_NODE
        )
        groups.append(NodeGroup(gpu_type, gpus, per_node))
    return Cluster(tuple(groups))


def cluster_from_mapping(data: object, source: str) -> Cluster:
    """Build a cluster from parsed YAML: ``{node_groups: [{gpu_type, nodes, gpus_per_node, price_per_gpu_hour,
    cpus_per_node, memory_gib_per_node}]}``."""
    if not isinstance(data, dict) or "node_groups" not in data:
        raise InputError(source, "expected a mapping with a 'node_groups' list", field="node_groups")
    raw_groups = data["node_groups"]
    if not isinstance(raw_groups, list) or not raw_groups:
        raise InputError(source, "must be a non-empty list", field="node_groups")
    known = {"gpu_type", "nodes", "gpus_per_node", "price_per_gpu_hour", "cpus_per_node", "memory_gib_per_node"}
    groups = []
    for i, g in enumerate(raw_groups):
        where = f"node_groups[{i}]"
        if not isinstance(g, dict):
            raise InputError(source, "must be a mapping", field=where)
        unknown = sorted(set(g) - known)
        if unknown:
            raise InputError(
                source, f"unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})", field=where
            )
        if not isinstance(g.get("gpu_type"), str) or not g["gpu_type"]:
            raise InputError(source, "must be a GPU type name such as 'v100'", field=f"{where}.gpu_type")
        nodes = _positive_int(g.get("nodes"), source, f"{where}.nodes")
        per_node = _positive_int(
            g.get("gpus_per_node", DEFAULT_GPUS_PER_NODE), source, f"{where}.gpus_per_node"
        )
        price = g.get("price_per_gpu_hour", float("nan"))
        if not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0:
            raise InputError(
                source, f"must be a non-negative number, got {price!r}", field=f"{where}.price_per_gpu_hour"
            )
        cpus = g.get("cpus_per_node")
        if cpus is not None:
            cpus = _positive_int(cpus, source, f"{where}.cpus_per_node")
        memory = g.get("memory_gib_per_node")
        if memory is not None and (not isinstance(memory, (int, float)) or isinstance(memory, bool)
                                   or not math.isfinite(memory) or memory <= 0):
            raise InputError(
                source, f"must be a positive number of GiB, got {memory!r}", field=f"{where}.memory_gib_per_node"
            )
        groups.append(NodeGroup(g["gpu_type"].lower(), nodes * per_node, per_node, float(price),
                                cpus, None if memory is None else float(memory)))
    return Cluster(tuple(groups))


def _positive_int(value: object, source: str, field_name: str) -> int:
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError
        number = int(str(value).strip())
    except ValueError:
        raise InputError(source, f"must be a positive integer, got {value!r}", field=field_name) from None
    if number <= 0:
        raise InputError(source, f"must be a positive integer, got {value!r}", field=field_name)
    return number
