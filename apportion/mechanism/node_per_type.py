"""The cluster a server's round is planned over: one node per GPU type, holding the GPUs left.

A server plans over the slots its attempts still starting and its lost nodes leave, all of a
type counted as one node (slots on one machine, or a Ray cluster whose nodes come and go).
The simulator on the server's clock and ``apportion replay`` plan over the same.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup

_MOST_KEPT = 256  # clusters cached per set of types and prices; the same few counts recur


def node_per_type(gpu_types: tuple[str, ...], counts, prices, cpus=None, memory_gib=None) -> Cluster:
    """A cluster of one node per GPU type of ``counts[t]`` GPUs, at ``prices[t]`` a GPU hour (NaN: unknown),
    with ``cpus[t]`` cores and ``memory_gib[t]`` GiB beside them (None, or a None entry: not counted)."""
    cpus = cpus or [None] * len(gpu_types)
    memory_gib = memory_gib or [None] * len(gpu_types)
    return Cluster(tuple(NodeGroup(t, int(n), max(1, int(n)), float(p) if p is not None else math.nan, c, m)
                         for t, n, p, c, m in zip(gpu_types, counts, prices, cpus, memory_gib)))


class NodePerType:
    """One :func:`node_per_type` cluster object per set of counts of a cluster's types: the planner
    re-solves when the cluster object changes, so the same counts must give the same object.
    ``cpus`` and ``memory_gib`` ([T], None: not counted) are each type's node's cores and memory."""

    def __init__(self, gpu_types: tuple[str, ...], prices: np.ndarray, cpus=None, memory_gib=None) -> None:
        self.gpu_types = tuple(gpu_types)
        self.prices = np.asarray(prices, dtype=np.float64)
        self.cpus = list(cpus) if cpus is not None else [None] * len(self.gpu_types)
        self.memory_gib = list(memory_gib) if memory_gib is not None else [None] * len(self.gpu_types)
        self._by_counts: dict[tuple, Cluster] = {}

    @classmethod
    def like(cls, cluster: Cluster) -> NodePerType:
        """Of ``cluster``'s types and prices, each type's node with the cores and memory of its first node."""
        cpus, memory = _first_node_room(cluster)
        return cls(cluster.gpu_types, cluster.price_per_gpu_hour, cpus, memory)

    def matches(self, cluster: Cluster) -> bool:
        """Whether ``cluster`` has this one's types, prices, and cores and memory per type."""
        return (cluster.gpu_types == self.gpu_types
                and cluster.price_per_gpu_hour.tobytes() == self.prices.tobytes()
                and _first_node_room(cluster) == (self.cpus, self.memory_gib))

    def cluster(self, counts: tuple[int, ...], held: tuple | None = None) -> Cluster:
        """The cluster of ``counts[t]`` GPUs of each type (the same object for the same counts), less
        ``held`` (((cores, GiB) of each type) that jobs planned elsewhere hold of its nodes."""
        key = counts if held is None else (counts, held)
        found = self._by_counts.get(key)
        if found is None:
            if len(self._by_counts) > _MOST_KEPT:
                self._by_counts.clear()
            cpus, memory = self.cpus, self.memory_gib
            if held is not None:
                cpus = [None if c is None else max(c - h[0], 0.0) for c, h in zip(cpus, held)]
                memory = [None if m is None else max(m - h[1], 0.0) for m, h in zip(memory, held)]
            found = self._by_counts[key] = node_per_type(self.gpu_types, counts, self.prices.tolist(), cpus, memory)
        return found

    @property
    def counts_resources(self) -> bool:
        """Some type's node has a known number of cores or amount of memory."""
        return any(c is not None for c in self.cpus) or any(m is not None for m in self.memory_gib)

    def of(self, gpu_type: np.ndarray, gpus: np.ndarray, held: tuple | None = None) -> tuple[Cluster, np.ndarray]:
        """The cluster of GPUs ``gpus`` (ids into ``gpu_type``, each GPU's type index), less ``held``
        (:meth:`cluster`), and for each of its GPUs the id it stands for."""
        types = gpu_type[gpus]
        order = gpus[np.argsort(types, kind="stable")]
        counts = tuple(np.bincount(types, minlength=len(self.gpu_types)).tolist())
        return self.cluster(counts, held), order


def _first_node_room(cluster: Cluster) -> tuple[list, list]:
    """([T] the cores, [T] the GiB) of the first node of each of ``cluster``'s types (None: not counted)."""
    first = {}
    for group in cluster.groups:
        first.setdefault(group.gpu_type, group)
    groups = [first[t] for t in cluster.gpu_types]
    return [g.cpus_per_node for g in groups], [g.memory_gib_per_node for g in groups]
