"""CPU cores and memory beside the GPUs: what jobs need of a node, and which GPU types' nodes can ever give it.

A job's cores and memory are spread over its GPUs evenly: a job asking 8 cores with 4 GPUs needs
2 cores beside each GPU it holds, so a node that gives it 3 of its GPUs must have 6 cores free and
a node that gives it the fourth must have 2. Shares are not rounded (3 cores over 2 GPUs on two
nodes is 1.5 on each). A resource counts only where the cluster limits it and some job asks for it;
otherwise placement is by GPUs alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster

RESOURCES = ("cpus", "memory_gib")  # the JobTable and JobView fields a job asks with
NODE_AMOUNT = {"cpus": "node_cpus", "memory_gib": "node_memory_gib"}  # the Cluster array of each
UNITS = {"cpus": "CPU cores", "memory_gib": "GiB of memory"}
SLACK = 1e-9  # a share this much over what is free still fits (float sums of shares)


@dataclass(frozen=True)
class NodeDemand:
    """What each job needs beside each GPU it holds, of the resources the cluster limits and jobs ask for."""

    resources: tuple[str, ...]  # names from RESOURCES, in that order
    per_gpu: np.ndarray  # [n, R] amount of each resource beside each of a job's GPUs
    node_amount: np.ndarray  # [N, R] each node's amount of each resource (inf where its group has no limit)

    def of_units(self, first: np.ndarray, second: np.ndarray) -> NodeDemand:
        """The demand of units of one job or two sharing GPUs (``second`` -1 when alone): their sum."""
        both = second >= 0
        per_gpu = self.per_gpu[first].copy()
        per_gpu[both] += self.per_gpu[second[both]]
        return NodeDemand(self.resources, per_gpu, self.node_amount)


def node_demand(cluster: Cluster, num_gpus: np.ndarray, cpus: np.ndarray | None,
                memory_gib: np.ndarray | None) -> NodeDemand | None:
    """Jobs' needs beside each GPU (their ``cpus`` and ``memory_gib`` over their ``num_gpus``), for the
    resources the cluster limits and some job asks for; None when there is none."""
    if cpus is None and memory_gib is None:
        return None
    asked = {"cpus": cpus, "memory_gib": memory_gib}
    limited = {"cpus": cluster.limits_cpus, "memory_gib": cluster.limits_memory}
    names = tuple(r for r in RESOURCES if asked[r] is not None and limited[r] and np.any(asked[r] > 0))
    if not names:
        return None
    per_gpu = np.column_stack([asked[r] / num_gpus for r in names])
    node_amount = np.column_stack([getattr(cluster, NODE_AMOUNT[r]) for r in names])
    return NodeDemand(names, per_gpu, node_amount)


def gpus_room_gives(room: np.ndarray, per_gpu: np.ndarray) -> np.ndarray:
    """How many GPUs' shares ``per_gpu`` [..., R] fit in ``room`` [..., R] (broadcast over the leading
    axes); inf where nothing is asked."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(per_gpu > 0, room / np.where(per_gpu > 0, per_gpu, 1.0), math.inf)
    return np.floor(shares + SLACK).min(axis=-1)


def fits_on_nodes(cluster: Cluster, num_gpus: np.ndarray, cpus: np.ndarray | None = None,
                  memory_gib: np.ndarray | None = None) -> np.ndarray | bool:
    """[n, T] whether each job's cores and memory fit beside its GPUs on the nodes of each type of the
    empty cluster; True (for every job and type) when nothing is limited or asked for."""
    given = gpus_with_room(cluster, num_gpus, cpus, memory_gib)
    return True if given is None else given >= num_gpus[:, None]


def gpus_with_room(cluster: Cluster, num_gpus: np.ndarray, cpus: np.ndarray | None = None,
                   memory_gib: np.ndarray | None = None) -> np.ndarray | None:
    """[n, T] how many GPUs of each type the empty cluster can give each job with room for their shares
    of its cores and memory: per node, its GPUs or the shares its cores and memory hold if fewer,
    summed over the type's nodes. None when nothing is limited or asked for."""
    demand = node_demand(cluster, num_gpus, cpus, memory_gib)
    if demand is None:
        return None
    shapes, count = np.unique(
        np.column_stack([cluster.node_type, cluster.node_gpus, demand.node_amount]), axis=0, return_counts=True
    )
    given = np.zeros((len(num_gpus), len(cluster.gpu_types)))
    for shape, nodes in zip(shapes, count.tolist()):  # a handful of node shapes
        gpu_type, gpus, amount = int(shape[0]), shape[1], shape[2:]
        given[:, gpu_type] += nodes * np.minimum(gpus, gpus_room_gives(amount[None, :], demand.per_gpu))
    return given
