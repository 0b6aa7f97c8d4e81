"""Each round, the CPU cores of every node divided among the jobs placed on it, and how fast that lets them train.

The GPU policy and placement are unchanged (Synergy's point): only a node's cores are divided
differently. ``proportional`` gives every GPU of a node the same share of its cores, as a
scheduler that counts GPUs alone does. ``aware`` and ``greedy`` give each job a minimum and the
rest to the jobs that gain the most progress from them (``mechanism/cpu_split.py``); they differ in
the minimum. Under ``aware`` it is the fewest cores per GPU at which the job trains as fast as its
proportional share lets it (the share, or less where the job is as fast with less), so no job is
ever slower than under ``proportional`` (Synergy-TUNE's guarantee); under ``greedy`` it is 1 core per
GPU, the most progress of the node's GPUs at each moment, which may slow one job down to speed up
others. Either way a job that asks for ``cpus`` gets at least its share of them; where the asked
cores leave too few for the others' minimums, those are cut in proportion.

A job trains at its GPU speed times the fraction of its best speed its cores per GPU allow
(``core/cpu_speed.py``); a job spread over nodes goes at the pace of its slowest part. Host memory
is not divided: each job is taken to have its proportional share of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.cpu_speed import CoreCurves, relative_speed
from apportion.core.jobs import JobTable
from apportion.mechanism.cpu_split import proportional_split, split_cores

CPU_SPLITS = ("proportional", "aware", "greedy")
GREEDY_MINIMUM_PER_GPU = 1.0  # cores beside each GPU of a job that asks for none, under ``greedy``


@dataclass(frozen=True)
class CoreDivision:
    """How a replay divides node cores, and the jobs' curves it judges the division by."""

    rule: str  # one of CPU_SPLITS
    curves: CoreCurves  # [n] one per JobTable row
    asked_per_gpu: np.ndarray  # [n] cores each job asks beside each GPU, 0 where it asks none
    node_cores: np.ndarray  # [N]
    node_gpus: np.ndarray  # [N]
    gpu_node: np.ndarray  # [G]

    @classmethod
    def of(cls, jobs: JobTable, cluster: Cluster, rule: str) -> CoreDivision | None:
        """The division for a replay of ``jobs``; None when no job's speed depends on its cores."""
        if rule not in CPU_SPLITS:
            raise ValueError(f"the CPU split must be one of {', '.join(CPU_SPLITS)}, got '{rule}'")
        if jobs.cpu_curves is None:
            return None
        if not cluster.limits_cpus:
            raise ValueError("the jobs' speeds depend on their CPU cores but the cluster's nodes have none given: "
                             "give each node group its cpus_per_node in a cluster file")
        asked = np.zeros(len(jobs)) if jobs.cpus is None else jobs.cpus / jobs.num_gpus
        return cls(rule, jobs.cpu_curves, asked, cluster.node_cpus, cluster.node_gpus, cluster.gpu_node)

    def speed_at_share(self, node_type: np.ndarray, types: int) -> np.ndarray:
        """[n, T] the fraction of its best speed each job trains at on each of ``types`` GPU types with
        the proportional share of the type's nodes (``node_type`` [N]; the smallest share where they
        differ), or the cores it asks where it asks more and the rule gives them: what the policy ranks it
        by. Exact under ``proportional``; under ``aware`` the least it gets (it never trains slower)."""
        share = np.full(types, np.inf)
        np.minimum.at(share, node_type, self.node_cores / self.node_gpus)
        share = np.where(np.isfinite(share), share, 0.0)
        n = len(self.curves)
        cores = np.broadcast_to(share[None, :], (n, types))
        if self.rule != "proportional":
            cores = np.maximum(cores, self.asked_per_gpu[:, None])
        rows = np.repeat(np.arange(n), types)
        return relative_speed(self.curves, rows, cores.ravel()).reshape(n, types)

    def speed(self, gpu_job: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """[m] the fraction of its best speed each of the JobTable ``rows`` [m] trains at, holding the
        GPUs ``gpu_job`` [G] gives it (a JobTable row per GPU, -1 idle); 1 where it holds none."""
        held = np.flatnonzero(gpu_job >= 0)
        nodes = len(self.node_cores)
        placement, gpus = np.unique(gpu_job[held] * nodes + self.gpu_node[held], return_counts=True)
        job, node = np.divmod(placement, nodes)
        share = proportional_split(self.node_cores, self.node_gpus, node)
        if self.rule == "proportional":
            cores = share
        else:
            cores = split_cores(self.node_cores, node, job, gpus, self.curves, self._minimums(job, node, gpus, share))
        at = relative_speed(self.curves, job, cores)
        out = np.ones(len(rows))
        order = np.argsort(rows, kind="stable")
        found = np.searchsorted(rows, job, sorter=order)
        found = np.minimum(found, len(rows) - 1)
        inside = rows[order[found]] == job if len(rows) else np.zeros(len(job), dtype=bool)
        np.minimum.at(out, order[found[inside]], at[inside])
        return out

    def _minimums(self, job: np.ndarray, node: np.ndarray, gpus: np.ndarray, share: np.ndarray) -> np.ndarray:
        """[m] cores per GPU no placement goes below: what its job asks, else the rule's minimum, cut in
        proportion on a node where the asked cores leave too few for them."""
        asked = self.asked_per_gpu[job]
        asking = asked > 0
        if self.rule == "aware":  # as fast as its proportional share, with no more cores than that takes
            wanted = np.minimum(share, self.curves.saturation[job])
        else:
            wanted = np.minimum(share, GREEDY_MINIMUM_PER_GPU)
        wanted = np.where(asking, 0.0, wanted)
        nodes = len(self.node_cores)
        spoken_for = np.bincount(node, weights=gpus * asked, minlength=nodes)
        others = np.bincount(node, weights=gpus * wanted, minlength=nodes)
        with np.errstate(divide="ignore", invalid="ignore"):
            cut = np.clip(np.where(others > 0, (self.node_cores - spoken_for) / others, 1.0), 0.0, 1.0)
        return np.where(asking, asked, wanted * cut[node])
