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


def node_per_type(gpu_types: tuple[str, ...], counts, prices) -> Cluster:
    """A cluster of one node per GPU type of ``counts[t]`` GPUs, at ``prices[t]`` a GPU hour (NaN: unknown)."""
    return Cluster(tuple(NodeGroup(t, int(n), max(1, int(n)), float(p) if p is not None else math.nan)
                         for t, n, p in zip(gpu_types, counts, prices)))


class NodePerType:
    """One :func:`node_per_type` cluster object per set of counts of a cluster's types: the planner
    re-solves when the cluster object changes, so the same counts must give the same object."""

    def __init__(self, gpu_types: tuple[str, ...], prices: np.ndarray) -> None:
        self.gpu_types = tuple(gpu_types)
        self.prices = np.asarray(prices, dtype=np.float64)
        self._by_counts: dict[tuple[int, ...], Cluster] = {}

    @classmethod
    def like(cls, cluster: Cluster) -> NodePerType:
        return cls(cluster.gpu_types, cluster.price_per_gpu_hour)

    def matches(self, cluster: Cluster) -> bool:
        """Whether ``cluster`` has this one's types and prices."""
        return (cluster.gpu_types == self.gpu_types
                and cluster.price_per_gpu_hour.tobytes() == self.prices.tobytes())

    def cluster(self, counts: tuple[int, ...]) -> Cluster:
        """The cluster of ``counts[t]`` GPUs of each type (the same object for the same counts)."""
        found = self._by_counts.get(counts)
        if found is None:
            if len(self._by_counts) > _MOST_KEPT:
                self._by_counts.clear()
            found = self._by_counts[counts] = node_per_type(self.gpu_types, counts, self.prices.tolist())
        return found

    def of(self, gpu_type: np.ndarray, gpus: np.ndarray) -> tuple[Cluster, np.ndarray]:
        """The cluster of GPUs ``gpus`` (ids into ``gpu_type``, each GPU's type index), and for each of
        its GPUs the id it stands for."""
        types = gpu_type[gpus]
        order = gpus[np.argsort(types, kind="stable")]
        counts = tuple(np.bincount(types, minlength=len(self.gpu_types)).tolist())
        return self.cluster(counts), order
