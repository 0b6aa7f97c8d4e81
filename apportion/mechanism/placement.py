"""Turn "job j runs on s GPUs of type t" into concrete GPU ids for one round.

Jobs that keep their type and GPU count keep their GPUs (their lease is renewed). The rest
are gang-placed: a multi-GPU job goes to the single node that fits it most tightly, or
across as few nodes as possible; single-GPU jobs fill the fullest nodes first so that
whole nodes stay free for gangs. Where nodes count CPU cores and memory and jobs ask for them
(``demand``), a job goes only where its share of them is free (``room_placement.py``).
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.node_resources import NodeDemand
from apportion.mechanism.room_placement import place_in_room


@dataclass(frozen=True)
class Placement:
    """``gpu_job[g]`` is the JobTable row holding GPU g this round, -1 when idle."""

    gpu_job: np.ndarray  # [G]

    @classmethod
    def empty(cls, cluster: Cluster) -> Placement:
        return cls(np.full(cluster.num_gpus, -1, dtype=np.int64))

    def busy_gpus(self) -> int:
        return int(np.count_nonzero(self.gpu_job >= 0))


def place_on_gpus(
    cluster: Cluster,
    previous_owner: np.ndarray,  # [G] job index (0..n-1) holding each GPU last round, -1 if idle
    chosen_type: np.ndarray,  # [n] GPU type index each job runs on this round, -1 if it waits
    num_gpus: np.ndarray,  # [n] GPUs each job runs on
    demand: NodeDemand | None = None,  # cores and memory each job needs beside each GPU; None: GPUs only
) -> tuple[np.ndarray, np.ndarray]:
    """GPU owners for this round ([G], -1 idle), and for each job whether it kept exactly its GPUs.

    With ``demand``, a chosen job that no node has room for is on no GPU: it waits this round.

    Keeping is decided with numpy over all GPUs. The jobs left to place (a few hundred at most
    in a round) are placed in plain Python over per-node lists of free GPUs: at this size a
    list walk is several times cheaper than the dozens of tiny numpy calls per GPU type it
    replaces, and it makes the same choices (see ``_place_type``).
    """
    n = len(chosen_type)
    owner = np.full(cluster.num_gpus, -1, dtype=np.int64)
    held = np.flatnonzero(previous_owner >= 0)
    held_owner = previous_owner[held]
    same_type = chosen_type[held_owner] == cluster.gpu_type[held]
    held_count = np.bincount(held_owner[same_type], minlength=n)
    keep_gpus = held[same_type & (held_count[held_owner] == num_gpus[held_owner])]
    owner[keep_gpus] = previous_owner[keep_gpus]
    kept = np.zeros(n, dtype=bool)
    kept[owner[keep_gpus]] = True

    todo = np.flatnonzero((chosen_type >= 0) & ~kept)
    if not len(todo):  # every running job kept its GPUs: nothing left to place
        return owner, kept
    if demand is not None:
        place_in_room(cluster, owner, todo, chosen_type, num_gpus, demand)
        return owner, kept
    free_ids = np.flatnonzero(owner < 0)
    free_list = free_ids.tolist()
    bounds = np.searchsorted(free_ids, cluster.node_first_gpu).tolist() + [len(free_list)]
    free_on = [free_list[bounds[i] : bounds[i + 1]] for i in range(cluster.num_nodes)]  # free ids per node
    by_type: dict[int, list[tuple[int, int]]] = {}
    for job, gpu_type, count in zip(todo.tolist(), chosen_type[todo].tolist(), num_gpus[todo].astype(np.int64).tolist()):
        by_type.setdefault(gpu_type, []).append((job, count))
    layout = _layout(cluster)
    placed_gpus: list[int] = []
    placed_jobs: list[int] = []
    for t, jobs in by_type.items():
        nodes, sizes = layout[t]
        _place_type(cluster.gpu_types[t], jobs, nodes, sizes, free_on, placed_gpus, placed_jobs)
    owner[placed_gpus] = placed_jobs
    return owner, kept


_LAYOUT: list = [None, None]  # the last cluster seen, and its nodes and node sizes per GPU type


def _layout(cluster: Cluster) -> list[tuple[list[int], list[int]]]:
    """Per GPU type: its nodes (ascending) and their sizes, as lists; cached for the last cluster."""
    if _LAYOUT[0] is not cluster:
        node_type, node_gpus = cluster.node_type.tolist(), cluster.node_gpus.tolist()
        per_type = []
        for t in range(len(cluster.gpu_types)):
            nodes = [node for node, nt in enumerate(node_type) if nt == t]
            per_type.append((nodes, [node_gpus[node] for node in nodes]))
        _LAYOUT[:] = [cluster, per_type]
    return _LAYOUT[1]


def _place_type(
    type_name: str,
    jobs: list[tuple[int, int]],  # (job, GPUs) to place on this type, by ascending job index
    nodes: list[int],  # this type's nodes, ascending
    sizes: list[int],  # GPUs in each of those nodes
    free_on: list[list[int]],  # free GPU ids per node (all nodes); taken ids are removed
    placed_gpus: list[int],
    placed_jobs: list[int],
) -> None:
    """Place one GPU type's jobs: gangs largest first, then single-GPU jobs; appends (GPU, job).

    Gangs go largest first (ties by job index). While every node of the type has the same
    size, gangs that are whole multiples of it take whole free nodes in node order, as a batch
    that stops at the first such gang that no longer fits; every other gang takes the
    tightest single node that fits it (lowest index on ties), else the emptiest nodes in turn.
    Single-GPU jobs then fill the fullest nodes first, lowest GPU id first.

    ``by_free[f]`` lists the nodes with exactly f free GPUs, ascending, so "tightest fit",
    "emptiest" and "fullest first" are short walks over free counts rather than over nodes.
    """
    largest = max(sizes, default=0)
    by_free: list[list[int]] = [[] for _ in range(largest + 1)]
    for node in nodes:
        by_free[len(free_on[node])].append(node)

    def take(node: int, count: int, job: int) -> int:
        """Give ``job`` up to ``count`` of the node's lowest free GPU ids; how many it got."""
        free = free_on[node]
        got = free[:count]
        free_on[node] = free[count:]
        by_free[len(free)].remove(node)
        insort(by_free[len(free) - len(got)], node)
        placed_gpus.extend(got)
        placed_jobs.extend([job] * len(got))
        return len(got)

    gangs = sorted((job_count for job_count in jobs if job_count[1] > 1), key=lambda jc: -jc[1])
    if gangs and sizes and all(size == largest for size in sizes):
        whole = by_free[largest]  # wholly free nodes, ascending
        used = 0
        rest = []
        batch_open = True
        for job, count in gangs:
            if count % largest:
                rest.append((job, count))
                continue
            need = count // largest
            if batch_open and used + need <= len(whole):
                for node in whole[used : used + need]:
                    placed_gpus.extend(free_on[node])
                    free_on[node] = []
                placed_jobs.extend([job] * count)
                used += need
            else:
                batch_open = False  # the batch is the longest prefix that fits
                rest.append((job, count))
        by_free[largest] = whole[used:]
        gangs = rest
    for job, count in gangs:
        fitting = next((group for group in by_free[count:] if group), None)  # the tightest single node
        needed = count
        while needed > 0:
            if fitting is not None:
                node = fitting[0]
            else:  # the emptiest node (lowest index on ties)
                node = next((group[0] for group in reversed(by_free[1:]) if group), -1)
                if node < 0:
                    raise ValueError("placement over capacity")
            needed -= take(node, needed, job)
    singles = [job for job, count in jobs if count == 1]
    if singles:
        ids = [gpu for group in by_free[1:] for node in group for gpu in free_on[node]]  # fullest nodes first
        if len(ids) < len(singles):
            raise ValueError(f"placement over capacity on GPU type {type_name}")
        placed_gpus.extend(ids[: len(singles)])
        placed_jobs.extend(singles)
