"""Steps/s of each job kind on each GPU type at each scale (number of GPUs).

A value of NaN means "not known / cannot run there". Space-sharing pairs (two jobs on one
GPU) are kept separately, keyed by (kind, other kind, GPU type); a pair rate of 0 means the
two did not fit on that GPU together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ThroughputTable:
    kinds: tuple[str, ...]
    gpu_types: tuple[str, ...]
    scales: tuple[int, ...]  # ascending GPU counts, e.g. (1, 2, 4, 8)
    steps_per_s: np.ndarray  # [kinds, gpu_types, scales], NaN where unknown
    # (kind, other_kind, gpu_type) -> (steps/s of kind, steps/s of other) when sharing at scale 1
    pair_steps_per_s: dict[tuple[str, str, str], tuple[float, float]] = field(
        default_factory=dict, repr=False
    )
    # kind -> where its numbers come from (a citation or "predicted by ...")
    sources: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        shape = (len(self.kinds), len(self.gpu_types), len(self.scales))
        if self.steps_per_s.shape != shape:
            raise ValueError(f"steps_per_s has shape {self.steps_per_s.shape}, expected {shape}")
        if list(self.scales) != sorted(set(self.scales)) or self.scales[0] < 1:
            raise ValueError(f"scales must be ascending positive GPU counts, got {self.scales}")

    def kind_index(self, kind: str) -> int:
        try:
            return self.kinds.index(kind)
        except ValueError:
            raise KeyError(kind) from None

    def pair_matrix(self, gpu_types: tuple[str, ...]) -> np.ndarray:
        """[K, K, T] steps/s of kind i while sharing one GPU of each given type with kind j.

        NaN where the pair is unknown, 0 where it is known not to fit; the partner's own rate
        is ``[j, i, t]``.
        """
        out = np.full((len(self.kinds), len(self.kinds), len(gpu_types)), np.nan)
        kind_at = {kind: i for i, kind in enumerate(self.kinds)}
        type_at = {gpu: t for t, gpu in enumerate(gpu_types)}
        for (kind, other, gpu), (this_rate, other_rate) in self.pair_steps_per_s.items():
            i, j, t = kind_at.get(kind), kind_at.get(other), type_at.get(gpu)
            if i is None or j is None or t is None:
                continue
            out[i, j, t] = this_rate
            out[j, i, t] = other_rate
        return out

    def merged_with(self, other: ThroughputTable) -> ThroughputTable:
        """This table with ``other``'s known numbers laid on top (other wins where both know)."""
        kinds = list(self.kinds) + [k for k in other.kinds if k not in self.kinds]
        types = list(self.gpu_types) + [t for t in other.gpu_types if t not in self.gpu_types]
        scales = sorted(set(self.scales) | set(other.scales))
        table = np.full((len(kinds), len(types), len(scales)), np.nan)
        for src in (self, other):
            ki = np.array([kinds.index(k) for k in src.kinds])
            ti = np.array([types.index(t) for t in src.gpu_types])
            si = np.array([scales.index(s) for s in src.scales])
            block = src.steps_per_s
            known = ~np.isnan(block)
            sub = table[np.ix_(ki, ti, si)]
            sub[known] = block[known]
            table[np.ix_(ki, ti, si)] = sub
        pairs = {**self.pair_steps_per_s, **other.pair_steps_per_s}
        return ThroughputTable(
            tuple(kinds), tuple(types), tuple(scales), table, pairs, {**self.sources, **other.sources}
        )

    def at_scales(self, gpu_counts: np.ndarray) -> ThroughputTable:
        """A table whose scales include every count in ``gpu_counts``.

        A count between two measured scales interpolates linearly between their rates (or
        keeps the smaller scale's per-GPU rate where the larger is unknown); a count below the
        smallest measured scale keeps its per-GPU rate. Above the largest measured scale s,
        each further doubling keeps the last measured doubling's efficiency:
        T(2s) = 2·e·T(s) with e = T(s) / (2·T(s/2)) capped at 1 (e = 1 where T(s/2) is unknown).
        """
        wanted = sorted(set(int(c) for c in np.unique(gpu_counts)) | set(self.scales))
        if wanted == list(self.scales):
            return self
        out = np.full((len(self.kinds), len(self.gpu_types), len(wanted)), np.nan)
        for j, count in enumerate(wanted):
            if count in self.scales:
                out[:, :, j] = self.steps_per_s[:, :, self.scales.index(count)]
            else:
                out[:, :, j] = self._estimate(count)
        return ThroughputTable(
            self.kinds, self.gpu_types, tuple(wanted), out, self.pair_steps_per_s, self.sources
        )

    def _estimate(self, count: int) -> np.ndarray:
        measured = np.asarray(self.scales)
        rate = lambda scale: self.steps_per_s[:, :, self.scales.index(int(scale))]  # noqa: E731
        below, above = measured[measured < count], measured[measured > count]
        if len(below) == 0:
            return rate(above[0]) * (count / above[0])
        low = int(below[-1])
        if len(above):
            high = int(above[0])
            per_gpu = rate(low) * (count / low)
            between = rate(low) + (rate(high) - rate(low)) * (count - low) / (high - low)
            return np.where(np.isnan(rate(high)), per_gpu, between)
        if len(below) < 2:
            return rate(low) * (count / low)
        half = int(below[-2])
        with np.errstate(invalid="ignore", divide="ignore"):
            efficiency = np.minimum(1.0, rate(low) / (rate(half) * (low / half)))
        efficiency = np.where(np.isnan(efficiency), 1.0, efficiency)
        return rate(low) * (count / low) * efficiency ** np.log2(count / low)
