"""Turn "job j runs on s GPUs of type t" into concrete GPU ids for one round.

Jobs that keep their type and GPU count keep their GPUs (their lease is renewed). The rest
are gang-placed: a multi-GPU job goes to the single node that fits it most tightly, or
across as few nodes as possible; single-GPU jobs fill the fullest nodes first so that
whole nodes stay free for gangs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster


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
) -> tuple[np.ndarray, np.ndarray]:
    """GPU owners for this round ([G], -1 idle), and for each job whether it kept exactly its GPUs."""
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

    free = owner < 0
    todo = (chosen_type >= 0) & ~kept
    for t in range(len(cluster.gpu_types)):
        jobs = np.flatnonzero(todo & (chosen_type == t))
        if not len(jobs):
            continue
        counts = num_gpus[jobs]
        free_of_type = free & (cluster.gpu_type == t)
        node_free = np.bincount(cluster.gpu_node[free_of_type], minlength=cluster.num_nodes)
        gangs = jobs[counts > 1]
        gangs = gangs[np.argsort(-num_gpus[gangs], kind="stable")]
        gangs = _place_whole_node_gangs(cluster, t, gangs, num_gpus, free_of_type, node_free, owner)
        for job in gangs:
            owner[_gang_gpus(cluster, free_of_type, node_free, int(num_gpus[job]))] = job
        singles = jobs[counts == 1]
        if len(singles):
            ids = np.flatnonzero(free_of_type)
            if len(ids) < len(singles):
                raise ValueError(f"placement over capacity on GPU type {cluster.gpu_types[t]}")
            order = np.lexsort((ids, node_free[cluster.gpu_node[ids]]))
            owner[ids[order[: len(singles)]]] = singles
        free = owner < 0
    return owner, kept


def _place_whole_node_gangs(
    cluster: Cluster,
    gpu_type: int,
    gangs: np.ndarray,
    num_gpus: np.ndarray,
    free_of_type: np.ndarray,
    node_free: np.ndarray,
    owner: np.ndarray,
) -> np.ndarray:
    """Give gangs that are whole multiples of the node size whole free nodes, all at once.

    The same nodes the one-gang-at-a-time rule would pick; returns the gangs left to place.
    """
    type_nodes = np.flatnonzero(cluster.node_type == gpu_type)
    node_size = cluster.node_gpus[type_nodes]
    if not len(gangs) or not np.all(node_size == node_size[0]):
        return gangs
    per_node = int(node_size[0])
    multiple = num_gpus[gangs] % per_node == 0
    if not multiple.any():
        return gangs
    whole_nodes = type_nodes[node_free[type_nodes] == per_node]
    batch = gangs[multiple]
    nodes_needed = np.cumsum(num_gpus[batch] // per_node)
    fitting = int(np.searchsorted(nodes_needed, len(whole_nodes), side="right"))
    if fitting == 0:
        return gangs
    used_nodes = whole_nodes[: nodes_needed[fitting - 1]]
    node_job = np.repeat(batch[:fitting], num_gpus[batch[:fitting]] // per_node)
    gpus = (cluster.node_first_gpu[used_nodes][:, None] + np.arange(per_node)[None, :]).reshape(-1)
    owner[gpus] = np.repeat(node_job, per_node)
    free_of_type[gpus] = False
    node_free[used_nodes] = 0
    placed = np.zeros(len(gangs), dtype=bool)
    placed[np.flatnonzero(multiple)[:fitting]] = True
    return gangs[~placed]


def _gang_gpus(
    cluster: Cluster, free_of_type: np.ndarray, node_free: np.ndarray, count: int
) -> np.ndarray:
    """GPU ids for one gang: the tightest single node that fits, else the emptiest nodes.

    Marks the GPUs it takes as no longer free in ``free_of_type`` and ``node_free``.
    """
    fits = np.flatnonzero(node_free >= count)
    single = int(fits[np.argmin(node_free[fits])]) if len(fits) else -1
    picked: list[np.ndarray] = []
    needed = count
    while needed > 0:
        node = single if single >= 0 else int(np.argmax(node_free))
        if node_free[node] == 0:
            break
        first = cluster.node_first_gpu[node]
        on_node = first + np.flatnonzero(free_of_type[first : first + cluster.node_gpus[node]])[:needed]
        free_of_type[on_node] = False
        picked.append(on_node)
        node_free[node] -= len(on_node)
        needed -= len(on_node)
    if needed > 0:
        raise ValueError("placement over capacity")
    return np.concatenate(picked)
