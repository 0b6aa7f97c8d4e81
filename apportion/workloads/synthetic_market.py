"""A seeded synthetic market over the built-in catalogue, so a rented replay runs anywhere.

Every catalogue instance is offered in every region of its cloud, on-demand and spot.
On-demand costs its list price times the region's factor, constant. A spot price is a
mean-reverting random walk in log space around its own level: each (instance, region) draws a
level ``spot_fraction[cloud] × U(1 − level_spread, 1 + level_spread)`` of its on-demand price, then
each hour ``log p ← log p + reversion · (log level − log p) + volatility · N(0, 1)``, kept within
[``floor``, ``ceiling``] × on-demand. Spot preemptions are a Poisson process per spot type whose
rate rises with its price: ``preemptions_per_hour · (price / level) ** price_exponent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from apportion.core.market import ON_DEMAND, SPOT, Market
from apportion.workloads.instance_catalog import (
    DEFAULT_EGRESS_USD_PER_GB, EGRESS_USD_PER_GB, INSTANCES, INTER_REGION_USD_PER_GB, REGIONS,
)


@dataclass(frozen=True)
class MarketModel:
    """The synthetic market's parameters (module docstring); the defaults are its documented model."""

    days: float = 60.0
    step_s: float = 3600.0
    spot_fraction: dict = field(default_factory=lambda: {"aws": 0.30, "azure": 0.20, "gcp": 0.30})
    level_spread: float = 0.3
    reversion: float = 0.05  # per step
    volatility: float = 0.10  # of log price, per step
    floor: float = 0.10
    ceiling: float = 1.0
    preemptions_per_hour: float = 1 / 48  # at a spot type's own level
    price_exponent: float = 4.0
    seed: int = 0


def synthetic_market(model: MarketModel = MarketModel()) -> Market:
    """The catalogue's instances in every region, on-demand and spot, over ``model.days``."""
    rng = np.random.default_rng(model.seed)
    rows = [(i, region, factor) for i in INSTANCES for region, factor in REGIONS[i.cloud].items()]
    on_demand = np.array([i.on_demand_per_hour * factor for i, _, factor in rows])
    steps = max(int(np.ceil(model.days * 86400 / model.step_s)), 1)
    times = np.arange(steps) * model.step_s
    fraction = np.array([model.spot_fraction.get(i.cloud, 0.3) for i, _, _ in rows])
    level = on_demand * fraction * rng.uniform(1 - model.level_spread, 1 + model.level_spread, len(rows))
    spot = spot_walk(level, on_demand, steps, model, rng)
    preempt_type, preempt_s = modelled_preemptions(spot, level, times, model, rng)
    both = rows + rows
    cloud = np.array([i.cloud for i, _, _ in both], dtype=object)
    return Market(
        name=np.array([i.name for i, _, _ in both], dtype=object),
        cloud=cloud,
        region=np.array([region for _, region, _ in both], dtype=object),
        gpu_type=np.array([i.gpu_type for i, _, _ in both], dtype=object),
        gpus=np.array([i.gpus for i, _, _ in both], dtype=np.int64),
        market=np.repeat([ON_DEMAND, SPOT], len(rows)),
        times_s=times.astype(np.float64),
        price_per_hour=np.vstack([np.repeat(on_demand[:, None], steps, axis=1), spot]),
        preempt_type=preempt_type + len(rows),
        preempt_s=preempt_s,
        egress_usd_per_gb=egress_of(cloud, EGRESS_USD_PER_GB),
        inter_region_usd_per_gb=egress_of(cloud, INTER_REGION_USD_PER_GB),
        source=f"synthetic market (seed {model.seed}, {model.days:g} days)",
        preemptions_from=f"drawn by the synthetic market's rule ({model.preemptions_per_hour:.3g} an hour per spot "
                         f"type at its usual price, × (price / usual)^{model.price_exponent:g})",
    )


def spot_walk(level: np.ndarray, on_demand: np.ndarray, steps: int, model: MarketModel,
              rng: np.random.Generator) -> np.ndarray:
    """[K, steps] spot prices: the mean-reverting log walk around ``level``, started at it."""
    log_level = np.log(level)
    low, high = np.log(model.floor * on_demand), np.log(model.ceiling * on_demand)
    noise = rng.standard_normal((steps, len(level))) * model.volatility
    out = np.empty((len(level), steps))
    current = log_level.copy()
    for s in range(steps):
        out[:, s] = current
        current = np.clip(current + model.reversion * (log_level - current) + noise[s], low, high)
    return np.exp(out)


def modelled_preemptions(spot: np.ndarray, level: np.ndarray, times: np.ndarray, model: MarketModel,
                         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(type, time) of each preemption of the [K, S] spot series, drawn by the model's rule;
    a step's preemptions fall uniformly within it (the last step lasts ``model.step_s``)."""
    lengths = np.diff(np.append(times, times[-1] + model.step_s))
    ratio = np.nan_to_num(spot / level[:, None], nan=0.0)
    rate = model.preemptions_per_hour * ratio ** model.price_exponent * lengths[None, :] / 3600.0
    counts = rng.poisson(rate)
    types, steps = np.nonzero(counts)
    repeat = counts[types, steps]
    types, steps = np.repeat(types, repeat), np.repeat(steps, repeat)
    when = times[steps] + rng.uniform(0.0, 1.0, len(steps)) * lengths[steps]
    order = np.lexsort((when, types))
    return types[order].astype(np.int64), when[order]


def egress_of(cloud: np.ndarray, table: dict) -> np.ndarray:
    return np.array([table.get(c, DEFAULT_EGRESS_USD_PER_GB) for c in cloud], dtype=np.float64)
