"""Placement when nodes count CPU cores and memory: a job goes only where its share of them is free.

A job's cores and memory are spread over its GPUs evenly (``core/node_resources.py``), so a node
that gives a job k GPUs must have k shares free. Jobs that keep their GPUs keep their shares. The
rest are placed as ``placement.py`` places them, over the nodes with room: per GPU type, gangs
largest first (ties by job index), each on the tightest single node with room for all of it (fewest
free GPUs, lowest index on ties), else over the nodes that can give it the most GPUs in turn;
then single-GPU jobs by job index, each on the fullest node with room for it, lowest GPU id first.
A job no set of free nodes has room for is left out: it waits this round.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.node_resources import SLACK, NodeDemand


def place_in_room(
    cluster: Cluster,
    owner: np.ndarray,  # [G] job on each GPU (those that kept theirs), -1 free; filled in place
    todo: np.ndarray,  # jobs to place, ascending
    chosen_type: np.ndarray,  # [n]
    num_gpus: np.ndarray,  # [n]
    demand: NodeDemand,
) -> None:
    """Give the jobs ``todo`` free GPUs of their chosen type on nodes with room for their shares."""
    held = np.flatnonzero(owner >= 0)
    used = np.column_stack([
        np.bincount(cluster.gpu_node[held], weights=demand.per_gpu[owner[held], r], minlength=cluster.num_nodes)
        for r in range(len(demand.resources))
    ])
    room = (demand.node_amount - used).tolist()  # per node, per resource
    free_ids = np.flatnonzero(owner < 0)
    free_list = free_ids.tolist()
    bounds = np.searchsorted(free_ids, cluster.node_first_gpu).tolist() + [len(free_list)]
    free_on = [free_list[bounds[i] : bounds[i + 1]] for i in range(cluster.num_nodes)]
    # per type, its nodes with a free GPU, ascending: in a busy round they are few
    open_nodes = [[node for node in np.flatnonzero(cluster.node_type == t).tolist() if free_on[node]]
                  for t in range(len(cluster.gpu_types))]

    jobs = sorted(zip(chosen_type[todo].tolist(), num_gpus[todo].tolist(), todo.tolist()),
                  key=lambda job: (job[0], job[1] == 1, -job[1], job[2]))
    placed_gpus: list[int] = []
    placed_jobs: list[int] = []
    no_room: set[tuple] = set()  # (type, GPUs, shares) that found no room: free GPUs and room only shrink
    for gpu_type, count, job in jobs:
        share = demand.per_gpu[job].tolist()
        alike = (gpu_type, count, *share)
        if alike in no_room:
            continue
        gives = {}  # node -> GPUs it can give the job with room for their shares, where any
        for node in open_nodes[gpu_type]:
            most = len(free_on[node])
            for free, asked in zip(room[node], share):
                if asked > 0 and free != math.inf:
                    most = min(most, math.floor(free / asked + SLACK))
            if most > 0:
                gives[node] = most
        whole = [node for node, most in gives.items() if most >= count]
        if whole:  # the tightest single node with room for all of it
            takes = [(min(whole, key=lambda node: (len(free_on[node]), node)), count)]
        else:
            if sum(gives.values()) < count:
                no_room.add(alike)
                continue  # no room for it anywhere this round: it waits
            takes, needed = [], count
            for node in sorted(gives, key=lambda node: (-gives[node], node)):
                got = min(gives[node], needed)
                takes.append((node, got))
                needed -= got
                if not needed:
                    break
        for node, got in takes:
            placed_gpus += free_on[node][:got]
            placed_jobs += [job] * got
            free_on[node] = free_on[node][got:]
            room[node] = [free - got * asked for free, asked in zip(room[node], share)]
            if not free_on[node]:
                open_nodes[gpu_type].remove(node)
    owner[placed_gpus] = placed_jobs

