"""A market of rentable instances: what each costs over time and, for spot, when it is taken back.

An instance type is one offer: a cloud, a region, an instance name, its GPU type and count, and a
market (on-demand or spot). Prices are per instance-hour and piecewise constant: type k costs
``price_per_hour[k, s]`` from ``times_s[s]`` until ``times_s[s + 1]`` (the last step lasts
forever). A spot preemption is an event (type, time): every instance of that type held then is
taken back. Arrays only, so a replay asks about all the jobs of a round at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ON_DEMAND, SPOT = 0, 1
MARKETS = ("on-demand", "spot")
_TYPE_SPAN = 2.0**40  # seconds: keys type * span + time order preemptions by type, then time


@dataclass(frozen=True)
class Market:
    name: np.ndarray  # [K] str, the cloud's instance name (p3.2xlarge, Standard_NC6s_v3, …)
    cloud: np.ndarray  # [K] str
    region: np.ndarray  # [K] str (an availability zone where the source names one)
    gpu_type: np.ndarray  # [K] str, a GPU type of the throughput table (v100, a100, t4, k80, …)
    gpus: np.ndarray  # [K] int, GPUs per instance
    market: np.ndarray  # [K] int, ON_DEMAND or SPOT
    times_s: np.ndarray  # [S] ascending, the first 0: when each price step starts
    price_per_hour: np.ndarray  # [K, S] dollars per instance-hour; NaN: not offered in that step
    preempt_type: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [E]
    preempt_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [E], when that type is taken back
    egress_usd_per_gb: np.ndarray | None = None  # [K] leaving the type's cloud; None: free
    inter_region_usd_per_gb: np.ndarray | None = None  # [K] to another region of the same cloud; None: free
    source: str = "market"
    preemptions_from: str = "given"  # where the preemptions come from, said beside results (a file's, a model's)
    notes: tuple[str, ...] = ()  # what a user should know about how the market was read (where it starts, …)
    _cumulative: np.ndarray = field(init=False, repr=False)  # [K, S] dollars per instance from 0 to times_s[s]
    _preempt_key: np.ndarray = field(init=False, repr=False)  # [E] sorted type * span + time
    _price_or_0: np.ndarray = field(init=False, repr=False)  # [K, S] price_per_hour, 0 where not offered

    def __post_init__(self) -> None:
        k, s = len(self.name), len(self.times_s)
        for column in ("cloud", "region", "gpu_type", "gpus", "market"):
            if len(getattr(self, column)) != k:
                raise ValueError(f"Market column '{column}' has {len(getattr(self, column))} rows, expected {k}")
        if self.price_per_hour.shape != (k, s):
            raise ValueError(f"price_per_hour has shape {self.price_per_hour.shape}, expected {(k, s)}")
        if s == 0 or self.times_s[0] != 0 or np.any(np.diff(self.times_s) <= 0):
            raise ValueError("times_s must start at 0 and increase")
        if len(self.preempt_type) != len(self.preempt_s):
            raise ValueError("preempt_type and preempt_s must have one entry per preemption")
        steps = np.diff(self.times_s)
        object.__setattr__(self, "_price_or_0", np.nan_to_num(self.price_per_hour, nan=0.0))
        paid = self._price_or_0[:, :-1] * steps[None, :] / 3600.0
        object.__setattr__(self, "_cumulative", np.concatenate([np.zeros((k, 1)), np.cumsum(paid, axis=1)], axis=1))
        key = np.asarray(self.preempt_type, dtype=np.float64) * _TYPE_SPAN + np.asarray(self.preempt_s, dtype=np.float64)
        object.__setattr__(self, "_preempt_key", np.sort(key))

    def __len__(self) -> int:
        return len(self.name)

    @property
    def is_spot(self) -> np.ndarray:
        return self.market == SPOT

    @property
    def labels(self) -> np.ndarray:
        """[K] cloud/region/name/market, one string per type."""
        words = np.asarray(MARKETS, dtype=object)[self.market]
        return np.array([f"{c}/{r}/{n}/{m}" for c, r, n, m in zip(self.cloud, self.region, self.name, words)],
                        dtype=object)

    def step_at(self, now_s: float) -> int:
        """The price step in force at ``now_s``."""
        return max(int(np.searchsorted(self.times_s, now_s, side="right")) - 1, 0)

    def prices_at(self, now_s: float) -> np.ndarray:
        """[K] dollars per instance-hour at ``now_s`` (NaN: not offered)."""
        return self.price_per_hour[:, self.step_at(now_s)]

    def paid_until(self, types: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Dollars one instance of each of ``types`` costs from 0 to ``t`` (arrays of one shape)."""
        step = np.maximum(np.searchsorted(self.times_s, t, side="right") - 1, 0)
        price = self._price_or_0[types, step]
        return self._cumulative[types, step] + price * (t - self.times_s[step]) / 3600.0

    def cost(self, types: np.ndarray, start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
        """Dollars one instance of each of ``types`` costs from ``start_s`` to ``end_s``."""
        return self.paid_until(types, end_s) - self.paid_until(types, start_s)

    def next_preemption(self, types: np.ndarray, after_s: float | np.ndarray, until_s: float | np.ndarray) -> np.ndarray:
        """The first preemption of each of ``types`` in (after_s, until_s]; inf where none."""
        types = np.asarray(types, dtype=np.float64)
        if len(self._preempt_key) == 0:
            return np.full(types.shape, np.inf)
        base = types * _TYPE_SPAN
        at = np.searchsorted(self._preempt_key, base + after_s, side="right")
        key = self._preempt_key[np.minimum(at, len(self._preempt_key) - 1)]
        when = key - base
        hit = (at < len(self._preempt_key)) & (when >= 0) & (when < _TYPE_SPAN) & (when <= until_s)
        return np.where(hit, when, np.inf)

    def preemptions_in_time_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(types, times) of every preemption, the earliest first."""
        order = np.argsort(self.preempt_s, kind="stable")
        return np.asarray(self.preempt_type, dtype=np.int64)[order], np.asarray(self.preempt_s, dtype=np.float64)[order]

    def egress_between(self, from_types: np.ndarray, to_types: np.ndarray) -> np.ndarray:
        """Dollars per GB moving a checkpoint from one type's region to another's (0 in the same region)."""
        same_region = (self.cloud[from_types] == self.cloud[to_types]) & (self.region[from_types] == self.region[to_types])
        same_cloud = self.cloud[from_types] == self.cloud[to_types]
        out = np.zeros(np.shape(from_types))
        if self.egress_usd_per_gb is not None:
            out = np.where(same_cloud, out, self.egress_usd_per_gb[from_types])
        if self.inter_region_usd_per_gb is not None:
            out = np.where(same_cloud & ~same_region, self.inter_region_usd_per_gb[from_types], out)
        return np.where(same_region, 0.0, out)

    def same_region(self, from_types: np.ndarray, to_types: np.ndarray) -> np.ndarray:
        return (self.cloud[from_types] == self.cloud[to_types]) & (self.region[from_types] == self.region[to_types])
