"""Elastic training: the batch size a job is told to use, the learning rate that goes with it,
the gradient noise scale it measures, and a data order any number of replicas resumes exactly.

The environment (docs/serve-contract.md) may set

- ``APPORTION_BATCH_SIZE``: the total batch, over all replicas, to train with now;
- ``APPORTION_INIT_BATCH_SIZE``: M0, the batch the job's learning rate was tuned for;
- ``APPORTION_LR_RULE``: how the learning rate follows the batch: ``sqrt`` (× √(M/M0), the
  square-root rule, for Adam-like optimisers), ``adascale`` (× the AdaScale gain
  (σ²/M0 + |g|²) / (σ²/M + |g|²), measured as the job trains, for SGD) or ``none``;
- ``APPORTION_TARGET_EXAMPLES``: a job whose target is in examples stops at the first step
  that reaches it, whatever batch each attempt ran at (``steps_left``);

and torch.distributed's own ``WORLD_SIZE`` and ``RANK`` say how many data-parallel replicas
run and which one this is. The script's own values are defaults; the environment wins.

**Data position.** Every replica draws the whole global batch from the same seeded order
(``ResumableSampler``) and keeps its slice, so the examples seen are a count of the global
batches taken, whatever the number of replicas: a checkpoint written by N replicas (rank 0
writes it) resumes on M at exactly the next example.

**Gradient noise scale.** ``GradientNoise`` estimates it from the squared norms of gradients
at two batch sizes (McCandlish et al., 2018, as Pollux does): each replica's own gradient
(b examples) and the averaged one (B = the total), or, on one replica, two micro-batches and
their sum. φ = tr(Σ) / |g|² in examples; efficiency E(M) = (φ + M0) / (φ + M).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from apportion.runtime.sampler import ResumableSampler

LR_RULES = ("sqrt", "adascale", "none")


@dataclass(frozen=True)
class ElasticSetting:
    """How this replica trains this attempt: the total batch, M0, the learning-rate rule, its place."""

    batch_size: int
    init_batch_size: int
    lr_rule: str = "sqrt"
    world_size: int = 1
    rank: int = 0
    target_examples: int | None = None  # None: the job's target is in steps

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.init_batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {self.batch_size} and {self.init_batch_size}")
        if self.lr_rule not in LR_RULES:
            raise ValueError(f"learning-rate rule must be one of {', '.join(LR_RULES)}, got '{self.lr_rule}'")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in a world of {self.world_size}")
        if self.target_examples is not None and self.target_examples < 1:
            raise ValueError(f"the target must be at least 1 example, got {self.target_examples}")
        if self.batch_size < self.world_size:
            raise ValueError(f"a batch of {self.batch_size} cannot be split over {self.world_size} replicas")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, *, batch_size: int, init_batch_size: int,
                     lr_rule: str = "sqrt", target_examples: int | None = None) -> ElasticSetting:
        """The script's defaults, overridden by whatever the environment sets."""
        env = os.environ if environ is None else environ

        def whole(name: str, default: int | None) -> int | None:
            value = env.get(name, "").strip()
            if not value:
                return default
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{name}={value!r} is not a number") from None
            if number != int(number):
                raise ValueError(f"{name}={value!r} is not a whole number")
            return int(number)

        return cls(
            batch_size=whole("APPORTION_BATCH_SIZE", batch_size),
            init_batch_size=whole("APPORTION_INIT_BATCH_SIZE", init_batch_size),
            lr_rule=env.get("APPORTION_LR_RULE", "").strip() or lr_rule,
            world_size=whole("WORLD_SIZE", 1),
            rank=whole("RANK", 0),
            target_examples=whole("APPORTION_TARGET_EXAMPLES", target_examples),
        )

    def steps_left(self, examples_seen: int) -> int:
        """Steps at this batch until ``examples_seen`` reaches the target (the last one may pass it)."""
        if self.target_examples is None:
            raise ValueError("this job's target is in steps (no APPORTION_TARGET_EXAMPLES)")
        return -(-max(self.target_examples - examples_seen, 0) // self.batch_size)

    def local_slice(self) -> tuple[int, int]:
        """[start, stop) of this replica's part of each global batch: an even split, the first
        ``batch_size % world_size`` replicas taking one example more."""
        base, extra = divmod(self.batch_size, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    @property
    def local_batch(self) -> int:
        start, stop = self.local_slice()
        return stop - start

    def lr_scale(self, noise: GradientNoise | None = None) -> float:
        """What to multiply the tuned learning rate by at this batch (AdaScale: 1 until measured)."""
        if self.lr_rule == "none":
            return 1.0
        if self.lr_rule == "sqrt":
            return math.sqrt(self.batch_size / self.init_batch_size)
        return 1.0 if noise is None else noise.gain(self.batch_size, self.init_batch_size)


def replica_indices(sampler: ResumableSampler, setting: ElasticSetting) -> list[int]:
    """This replica's examples of the next global batch (every replica's sampler moves the same)."""
    batch = sampler.take(setting.batch_size)
    start, stop = setting.local_slice()
    return batch[start:stop]


class GradientNoise:
    """The gradient noise scale, from gradient norms at two batch sizes, smoothed over steps.

    ``update(small_sqr, small_batch, big_sqr, big_batch)``: ``small_sqr`` the mean over the
    small gradients (one per replica or micro-batch, ``small_batch`` examples each) of their
    squared norm, ``big_sqr`` the squared norm of their average (``big_batch`` examples).
    Unbiased estimates of |g|² and tr(Σ) are then
    |g|² ≈ (B·|G_B|² − b·|G_b|²) / (B − b) and tr(Σ) ≈ (|G_b|² − |G_B|²) / (1/b − 1/B),
    each an exponential moving average (``smoothing``), bias-corrected like Adam's.
    """

    def __init__(self, smoothing: float = 0.9) -> None:
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self._sqr = 0.0
        self._var = 0.0
        self._weight = 0.0

    def update(self, small_sqr: float, small_batch: float, big_sqr: float, big_batch: float) -> None:
        if not big_batch > small_batch > 0:
            raise ValueError(f"need big_batch > small_batch > 0, got {big_batch} and {small_batch}")
        sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
        var = (small_sqr - big_sqr) / (1.0 / small_batch - 1.0 / big_batch)
        keep = self.smoothing
        self._sqr = keep * self._sqr + (1 - keep) * sqr
        self._var = keep * self._var + (1 - keep) * var
        self._weight = keep * self._weight + (1 - keep)

    @property
    def measured(self) -> bool:
        return self._weight > 0

    @property
    def sqr(self) -> float:
        """|g|², the true gradient's squared norm (estimated)."""
        return self._sqr / self._weight if self._weight else float("nan")

    @property
    def var(self) -> float:
        """tr(Σ), the per-example gradient variance (estimated)."""
        return self._var / self._weight if self._weight else float("nan")

    @property
    def noise_scale(self) -> float:
        """φ = tr(Σ) / |g|², in examples (NaN until measured; inf while |g|² is estimated ≤ 0)."""
        if not self._weight:
            return float("nan")
        sqr, var = self.sqr, max(self.var, 0.0)
        return var / sqr if sqr > 0 else float("inf")

    def efficiency(self, batch: float, init_batch: float) -> float:
        """E(M) = (φ + M0) / (φ + M): what an example at ``batch`` is worth against one at M0."""
        phi = self.noise_scale
        if math.isnan(phi):
            return 1.0
        if math.isinf(phi):
            return 1.0
        return (phi + init_batch) / (phi + batch)

    def gain(self, batch: float, init_batch: float) -> float:
        """AdaScale's gain (σ²/M0 + |g|²) / (σ²/M + |g|²) = E(M) · M / M0: the learning-rate factor."""
        return self.efficiency(batch, init_batch) * batch / init_batch

    def state(self) -> dict:
        return {"smoothing": self.smoothing, "sqr": self._sqr, "var": self._var, "weight": self._weight}

    def load_state(self, state: dict) -> None:
        self.smoothing = float(state["smoothing"])
        self._sqr, self._var, self._weight = float(state["sqr"]), float(state["var"]), float(state["weight"])
