"""Steps/s of each job kind on each GPU type at each scale (number of GPUs).

A value of NaN means "not known / cannot run there". Space-sharing pairs (two jobs on the
same GPUs) are kept separately, keyed by (kind, other kind, GPU type), for later policies.
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

        A count between two measured scales takes the smaller scale's per-GPU rate; a count
        above the largest measured scale keeps the last measured doubling's efficiency per
        further doubling: T(2s) = 2·e·T(s) with e = T(s_max) / (2·T(s_max/2)), capped at 1.
        """
        wanted = sorted(set(int(c) for c in np.unique(gpu_counts)) | set(self.scales))
        if wanted == list(self.scales):
            return self
        out = np.full((len(self.kinds), len(self.gpu_types), len(wanted)), np.nan)
        measured = np.asarray(self.scales)
        for j, count in enumerate(wanted):
            if count in self.scales:
                out[:, :, j] = self.steps_per_s[:, :, self.scales.index(count)]
            else:
                out[:, :, j] = self._extrapolate(count, measured)
        return ThroughputTable(
            self.kinds, self.gpu_types, tuple(wanted), out, self.pair_steps_per_s, self.sources
        )

    def _extrapolate(self, count: int, measured: np.ndarray) -> np.ndarray:
        below = measured[measured < count]
        if len(below) == 0:  # fewer GPUs than the smallest measured scale: same per-GPU rate
            base = measured[0]
            return self.steps_per_s[:, :, 0] * (count / base)
        base = int(below[-1])
        base_rate = self.steps_per_s[:, :, self.scales.index(base)]
        if base != measured[-1] or len(measured) < 2:
            return base_rate * 1.0  # between measured scales: take the smaller one's rate
        half = int(measured[-2])
        half_rate = self.steps_per_s[:, :, self.scales.index(half)]
        with np.errstate(invalid="ignore", divide="ignore"):
            efficiency = np.where(
                np.isnan(half_rate), 1.0, np.minimum(1.0, base_rate / (half_rate * (base / half)))
            )
        doublings = np.log2(count / base)
        return base_rate * (count / base) * efficiency**doublings
