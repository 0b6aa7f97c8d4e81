"""What the LP policies share: their options, the choice between their two LPs, and the warm
job-class model.

Each LP policy allocates time shares X[job, type] (Gavel's form) by a linear program over
single jobs (``solve``) and, with ``space_sharing`` and throughputs that know pair speeds, by
its variant with candidate pairs of one-GPU jobs sharing a GPU (``solve_sharing``,
apportion.policies.pairs). Both see the same ``value``: what a unit of time share on each
type is worth to each job. The allocation depends on the job set and the throughputs only,
so it never changes between arrivals and departures; its shares are fractions of capacity,
so a POP split into sub-clusters (apportion.policies.partitioned) solves the same LP.
"""

from __future__ import annotations

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.classes import JobClasses


class LPPolicy:
    """The base of the LP policies: set ``name``, override ``solve`` and ``solve_sharing``,
    and ``value`` when the LP weighs shares otherwise than by normalised throughput."""

    name = "lp"

    def __init__(self, *, agnostic: bool = False, space_sharing: bool = False, **alone_only: bool) -> None:
        """``alone_only``: this policy's options that do not work with ``space_sharing``."""
        for option, on in alone_only.items():
            if on and space_sharing:
                flag = "--" + option.replace("_", "-")
                raise ValueError(f"{self.name}: {flag} and --space-sharing cannot be combined")
        self.agnostic = agnostic
        self.space_sharing = space_sharing
        self._classes: JobClasses | None = None  # kept across rounds: HiGHS restarts warm

    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float:
        return float("inf")

    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation:
        value = self.value(jobs, cluster, throughputs)
        if self.space_sharing and throughputs.pair_steps_per_s is not None:
            return self.solve_sharing(jobs, cluster, throughputs, value)
        return self.solve(jobs, cluster, throughputs, value)

    def value(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> np.ndarray:
        """[n, T] the worth of a unit of time share: normalised throughput (all types alike if ``agnostic``)."""
        return throughputs.normalised(cluster.capacity, agnostic=self.agnostic)

    def solve(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
              value: np.ndarray) -> Allocation:
        """The LP over jobs that each hold their GPUs alone."""
        raise NotImplementedError

    def solve_sharing(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView,
                      value: np.ndarray) -> Allocation:
        """The LP with candidate pairs of one-GPU jobs sharing a GPU (throughputs with pair speeds)."""
        raise NotImplementedError

    def most_total(self, jobs: JobView, cluster: ClusterView, value: np.ndarray) -> Allocation:
        """The most total Σ value·X, solved over job classes on the model kept across rounds."""
        self._classes, share = JobClasses.most_total(self._classes, jobs, cluster.capacity, value)
        return Allocation(jobs.index, share)
