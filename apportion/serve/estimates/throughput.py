"""steps/s of each (job kind, slot type, slots), learned from the jobs' progress reports.

The estimates are what the policies see as throughputs. A kind never measured on a type runs
at the speed a prior table gives it there (the built-in catalog for its kinds, say), or for a
kind named after a model and layout (a job file's ``model``) the perf model's prediction, else at
``default_steps_per_s``, so policies treat unmeasured types as equally fast. Pairs sharing a
slot (space sharing) run at the prior's pair speeds; only known pairs are ever formed.
"""

from __future__ import annotations

import math

import numpy as np

from apportion.core.throughputs import ThroughputTable
from apportion.serve.store.state import StateStore
from apportion.workloads.model_jobs import model_job_of_kind
from apportion.workloads.model_jobs import steps_per_s as model_steps_per_s


class ThroughputEstimates:
    """Smoothed steps/s per (kind, gpu_type, gpus), kept in the state file, over a prior table."""

    def __init__(self, store: StateStore, capacity: dict[str, int], default_steps_per_s: float,
                 prior: ThroughputTable | None = None) -> None:
        self.store = store
        self.capacity = capacity
        self.default_steps_per_s = default_steps_per_s
        self.prior = prior
        self.table = store.throughputs()  # (kind, gpu_type, gpus) -> (steps/s, samples)
        self.version = 0  # bumped when an estimate is new or moves by over 10%: the allocation is stale
        self._prior_rates: dict[tuple[str, str, int], float] = {}
        self._pair_matrices: dict[tuple, np.ndarray] = {}

    def record(self, kind: str, gpu_type: str, gpus: int, steps_per_s: float, now: float) -> None:
        """Fold one report into the estimate (exponential average, 0.2 to the newest) and store it."""
        key = (kind, gpu_type, gpus)
        old, samples = self.table.get(key, (0.0, 0))
        new = steps_per_s if samples == 0 else 0.8 * old + 0.2 * steps_per_s
        if samples == 0 or abs(new - old) > 0.1 * old:
            self.version += 1
        self.table[key] = (new, samples + 1)
        self.store.put_throughput(*key, new, samples + 1, now)

    def rate(self, kind: str, gpu_type: str, gpus: int, allowed: tuple[str, ...] | None) -> float:
        """steps/s of a job of ``kind`` on ``gpus`` slots of ``gpu_type``: 0 where it cannot run there,
        the latest estimate where measured, else the prior's, else ``default_steps_per_s``."""
        if gpus > self.capacity.get(gpu_type, 0) or (allowed is not None and gpu_type not in allowed):
            return 0.0
        measured = self.table.get((kind, gpu_type, gpus))
        if measured is not None:
            return measured[0]
        return self._prior_rate(kind, gpu_type, gpus)

    def _prior_rate(self, kind: str, gpu_type: str, gpus: int) -> float:
        key = (kind, gpu_type, gpus)
        if key not in self._prior_rates:
            rate = math.nan
            prior = self.prior
            if prior is not None and kind in prior.kinds and gpu_type in prior.gpu_types:
                table = prior.at_scales(np.array([gpus]))
                rate = float(table.steps_per_s[table.kind_index(kind), table.gpu_types.index(gpu_type),
                                               table.scales.index(gpus)])
            elif (job := model_job_of_kind(kind)) is not None:
                rate = model_steps_per_s(job, gpu_type, gpus)
            self._prior_rates[key] = rate if math.isfinite(rate) and rate > 0 else self.default_steps_per_s
        return self._prior_rates[key]

    def kind_indices(self, kinds: np.ndarray) -> np.ndarray:
        """[n] an index per kind name: the prior's own index where it knows the kind (so pair
        speeds, indexed by kind, line up), then the others after it in name order."""
        known = self.prior.kinds if self.prior is not None else ()
        at = {kind: i for i, kind in enumerate(known)}
        extra = iter(range(len(known), len(known) + len(kinds)))
        distinct = set(kinds)  # a few names over many jobs: each looked up once
        index_of = {name: at[name] if name in at else next(extra) for name in sorted(set(map(str, distinct)))}
        of_kind = {kind: index_of[str(kind)] for kind in distinct}
        return np.fromiter(map(of_kind.__getitem__, kinds), dtype=np.int64, count=len(kinds))

    def pair_rates(self, gpu_types: tuple[str, ...], num_kinds: int) -> np.ndarray | None:
        """[K, K, T] steps/s of kind i sharing a slot of each type with kind j (NaN: unknown), over
        at least ``num_kinds`` kind indices; None when the prior knows no pair."""
        if self.prior is None or not self.prior.pair_steps_per_s:
            return None
        size = max(num_kinds, len(self.prior.kinds))
        key = (gpu_types, size)
        if key not in self._pair_matrices:
            known = self.prior.pair_matrix(gpu_types)
            matrix = np.full((size, size, len(gpu_types)), np.nan)
            matrix[: known.shape[0], : known.shape[1]] = known
            self._pair_matrices = {key: matrix}
        return self._pair_matrices[key]
