"""Markets from files: AWS's ``describe-spot-price-history`` JSON and a plain CSV (docs/cloud.md),
one file, many, or a directory of them, merged into one market.

Prices hold from their time until the series' next price. The market starts where every series
has a price: the latest of the series' first prices (AWS lists the price in force at a query's
start with the time it was set, often weeks earlier), or at ``start`` when given; a series with
no price yet at a time is not offered then (NaN). AWS gives spot prices only: each instance type
and region also gets an on-demand type at the catalogue's list price × the region's factor (a
region without a factor is refused). Preemptions are a CSV's own (its ``event`` column), else
drawn from ``interruption_rates`` (InterruptionRates) when given, else by the synthetic market's
rule from the spot prices; all seeded. Anything wrong raises InputError naming file, line, field.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np

from apportion.core.errors import InputError
from apportion.core.market import MARKETS, ON_DEMAND, SPOT, Market
from apportion.workloads.aws_spot_history import aws_spot_series
from apportion.workloads.instance_catalog import (
    AWS_ON_DEMAND, AWS_REGION_FACTORS, EGRESS_USD_PER_GB, INTER_REGION_USD_PER_GB, instance,
)
from apportion.workloads.interruption_rates import InterruptionRates
from apportion.workloads.price_series import PriceSeries, number, seconds_or_time, shown_time
from apportion.workloads.synthetic_market import MarketModel, egress_of, modelled_preemptions
from apportion.workloads.text_file import read_text

CSV_REQUIRED = ("time_s", "cloud", "region", "instance_type", "market", "price_per_hour")
CSV_OPTIONAL = ("gpu_type", "gpus", "event")
MARKET_FIELDS = tuple(f.name for f in fields(Market) if f.init)
STEP_S = 3600.0  # prices change at most hourly in a market read from files (as the synthetic market's)
MODELLED = ("drawn by the synthetic market's rule (about 0.5 a day per spot type at its usual price; "
            "the file gives none: --interruption-rates gives AWS's)")


def read_market(sources: str | Sequence[str], seed: int = 0, start: str | float | None = None,
                interruption_rates: InterruptionRates | None = None) -> Market:
    """The market in ``sources``: files (AWS's JSON when one starts with ``{``, else the CSV format) or
    directories of them, merged; ``start`` (seconds or an ISO 8601 time) sets the market's time 0."""
    files = market_files([sources] if isinstance(sources, str) else list(sources))
    merged: dict[tuple, PriceSeries] = {}
    aws: list[PriceSeries] = []
    for path in files:
        text = read_text(path)
        found = aws_spot_series(path, text) if text.lstrip().startswith("{") else _csv_series(path, text)
        for entry in found:
            key = (entry.cloud, entry.region, entry.name, entry.market)
            kept = merged.setdefault(key, entry)
            if kept is not entry:
                kept.times += entry.times
                kept.prices += entry.prices
                if entry.preemptions is not None:
                    kept.preemptions = (kept.preemptions or []) + entry.preemptions
            elif entry.cloud == "aws" and entry.market == SPOT and entry.preemptions is None:
                aws.append(entry)
    source = files[0] if len(files) == 1 else f"{len(files)} files ({files[0]}, …)"
    series = _aws_on_demand(aws, merged) + list(merged.values())
    begin = _start(series, start, source)
    notes = _start_notes(source, series, begin, given_start=start is not None)
    market = _market(source, series, begin, seed, interruption_rates, notes)
    dear = _spot_over_on_demand(market)
    if dear:
        market = Market(**{**{f: getattr(market, f) for f in MARKET_FIELDS}, "notes": market.notes + (dear,)})
    return market


def market_files(given: list[str]) -> list[str]:
    """The files ``given`` names: each a file, or the files under a directory, its subdirectories' too
    (sorted; hidden ones skipped)."""
    if not given:
        raise InputError("--market", "no market file given")
    files: list[str] = []
    for name in given:
        path = Path(name)
        if path.is_dir():
            inside = sorted(str(p) for p in path.rglob("*") if p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not inside:
                raise InputError(name, "a directory with no market file in it")
            files += inside
        else:
            files.append(name)
    return list(dict.fromkeys(files))


def _aws_on_demand(spot: list[PriceSeries], merged: dict) -> list[PriceSeries]:
    """One constant on-demand series per AWS instance type and region that has spot prices."""
    out: dict[tuple[str, str], PriceSeries] = {}
    for entry in spot:
        name = entry.name.split(" ")[0]
        if (name, entry.region) in out or ("aws", entry.region, name, ON_DEMAND) in merged:
            continue
        factor = AWS_REGION_FACTORS[entry.region]  # aws_spot_series refuses a region without one
        found = instance("aws", name)
        price = AWS_ON_DEMAND.get((name, entry.region), found.on_demand_per_hour * factor)
        out[(name, entry.region)] = PriceSeries("aws", entry.region, name, found.gpu_type, found.gpus, ON_DEMAND,
                                                [], [price])
    return list(out.values())


def _start(series: list[PriceSeries], start: str | float | None, source: str) -> float:
    """The market's time 0: ``start``, else the latest of the series' first prices."""
    if start is not None:
        return start if isinstance(start, float) else seconds_or_time(str(start), "--market-start", None, None)
    firsts = [min(s.times) for s in series if s.times]
    if not firsts:
        raise InputError(source, "no prices")
    return max(firsts)


def _csv_series(source: str, text: str) -> list[PriceSeries]:
    """The CSV format: one price (or, with ``event`` = preemption, one preemption) a row."""
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise InputError(source, f"missing column (needs {', '.join(CSV_REQUIRED)})", line=1, field=missing[0])
    unknown = [c for c in header if c not in CSV_REQUIRED + CSV_OPTIONAL]
    if unknown:
        raise InputError(source, f"unknown column (known: {', '.join(CSV_REQUIRED + CSV_OPTIONAL)})",
                         line=1, field=unknown[0])
    at = {name: i for i, name in enumerate(header)}
    series: dict[tuple[str, str, str, int], PriceSeries] = {}
    preemptions: list[tuple[tuple[str, str, str, int], float, int]] = []
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(source, f"has {len(row)} fields, the header {len(header)}", line=line)
        cell = {name: row[i].strip() for name, i in at.items()}
        when = seconds_or_time(cell["time_s"], source, line, "time_s")
        if cell["market"] not in MARKETS:
            raise InputError(source, f"must be one of {', '.join(MARKETS)}, got '{cell['market']}'",
                             line=line, field="market")
        market = MARKETS.index(cell["market"])
        for name in ("cloud", "region", "instance_type"):
            if not cell[name]:
                raise InputError(source, "must not be empty", line=line, field=name)
        key = (cell["cloud"], cell["region"], cell["instance_type"], market)
        event = cell.get("event", "") or "price"
        if event not in ("price", "preemption"):
            raise InputError(source, f"must be price or preemption, got '{event}'", line=line, field="event")
        if event == "preemption":
            if market != SPOT:
                raise InputError(source, "only a spot instance is preempted", line=line, field="market")
            preemptions.append((key, when, line))
            continue
        price = number(cell["price_per_hour"], source, line, "price_per_hour")
        if key not in series:
            gpu_type, gpus = _gpus_of(cell, source, line)
            series[key] = PriceSeries(*key[:3], gpu_type, gpus, market)
        series[key].times.append(when)
        series[key].prices.append(price)
    if not series:
        raise InputError(source, "no prices")
    if "event" in at:
        for entry in series.values():
            entry.preemptions = []
        for key, when, line in preemptions:
            if key not in series:
                raise InputError(source, "a preemption of an instance type the file gives no price for",
                                 line=line, field="instance_type")
            series[key].preemptions.append(when)
    return list(series.values())


def _market(source: str, series: list[PriceSeries], start: float, seed: int, rates: InterruptionRates | None,
            notes: tuple[str, ...] = (), step_s: float = STEP_S) -> Market:
    """One Market from price series over absolute times, ``start`` becoming time 0. Prices change at
    most every ``step_s``: a step where a series' price changed holds its time-weighted mean there."""
    stamps = np.concatenate([np.asarray(s.times, dtype=np.float64) for s in series] + [np.array([start])])
    times = np.unique(np.floor((stamps[stamps >= start] - start) / step_s) * step_s)
    ends = np.append(times[1:], times[-1] + step_s)
    prices = np.full((len(series), len(times)), np.nan)
    for k, s in enumerate(series):
        if not s.times:
            prices[k] = s.prices[0]
        else:
            prices[k] = _step_prices(np.asarray(s.times, dtype=np.float64) - start, np.asarray(s.prices), times, ends)
    market = np.array([s.market for s in series], dtype=np.int64)
    preempt_type, preempt_s, preemptions_from = _preemptions(series, prices, times, start, market, seed, rates)
    cloud = np.array([s.cloud for s in series], dtype=object)
    return Market(
        name=np.array([s.name for s in series], dtype=object), cloud=cloud,
        region=np.array([s.region for s in series], dtype=object),
        gpu_type=np.array([s.gpu_type for s in series], dtype=object),
        gpus=np.array([s.gpus for s in series], dtype=np.int64), market=market,
        times_s=times, price_per_hour=prices, preempt_type=preempt_type, preempt_s=preempt_s,
        egress_usd_per_gb=egress_of(cloud, EGRESS_USD_PER_GB),
        inter_region_usd_per_gb=egress_of(cloud, INTER_REGION_USD_PER_GB), source=source,
        preemptions_from=preemptions_from, notes=notes,
    )


def _spot_over_on_demand(market: Market) -> str | None:
    """A note naming the spot types that cost more than on-demand at some time (AWS caps spot at the
    on-demand price: the on-demand price used is then too low), or None."""
    on_demand = {(c, r, n): k for k, (c, r, n, m) in
                 enumerate(zip(market.cloud, market.region, market.name, market.market)) if m == ON_DEMAND}
    over = []
    for k in np.flatnonzero(market.market == SPOT):
        base = on_demand.get((market.cloud[k], market.region[k], str(market.name[k]).split(" ")[0]))
        if base is not None:
            with np.errstate(invalid="ignore"):
                ratio = np.nanmax(market.price_per_hour[k] / market.price_per_hour[base])
            if ratio > 1.001:
                over.append(f"{market.labels[k]} {ratio:.2f}x")
    if not over:
        return None
    return (f"{market.source}: {len(over)} spot types cost more than their on-demand type at times "
            f"({', '.join(over[:3])}{', …' if len(over) > 3 else ''}): check the on-demand prices")


def _step_prices(own: np.ndarray, price: np.ndarray, times: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """[S] one series' price in each step [times, ends): the price in force where it holds all the step,
    else the time-weighted mean of the prices within it (from its first price); NaN before that."""
    order = np.argsort(own, kind="stable")
    own, price = own[order], price[order]
    paid = np.concatenate([[0.0], np.cumsum(price[:-1] * np.diff(own))])  # price-seconds from own[0] to own[j]

    def paid_at(t: np.ndarray) -> np.ndarray:
        j = np.maximum(np.searchsorted(own, t, side="right") - 1, 0)
        return paid[j] + price[j] * (t - own[j])

    at_start = np.searchsorted(own, times, side="right") - 1
    last_in = np.searchsorted(own, ends, side="left") - 1  # the last change before the step ends
    held = np.where(at_start >= 0, price[np.maximum(at_start, 0)], np.nan)
    changed = last_in != at_start
    if changed.any():
        low = np.maximum(times[changed], own[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            held[changed] = (paid_at(ends[changed]) - paid_at(low)) / (ends[changed] - low)
    return held


def _start_notes(source: str, series: list[PriceSeries], start: float, given_start: bool) -> tuple[str, ...]:
    """What a user should know about where the market starts: prices left out before it, and series
    with no price yet at it (not offered until their first)."""
    firsts = {s.label: min(s.times) for s in series if s.times}
    notes = []
    earlier = [label for label, first in firsts.items() if first < start]
    if earlier and not given_start:
        days = (start - min(firsts.values())) / 86400
        notes.append(f"{source}: the market starts at {shown_time(start)}, the latest of its series' first prices; "
                     f"{len(earlier)} of {len(firsts)} series start up to {days:.1f} days earlier (AWS lists the "
                     "price in force at a query's start with the time it was set), left out before it; "
                     "--market-start sets another start")
    late = [label for label, first in firsts.items() if first > start]
    if late:
        notes.append(f"{source}: {len(late)} series have no price at the start {shown_time(start)} "
                     f"({', '.join(late[:3])}{', …' if len(late) > 3 else ''}): not offered until their first")
    return tuple(notes)


def _preemptions(series: list[PriceSeries], prices: np.ndarray, times: np.ndarray, start: float, market: np.ndarray,
                 seed: int, rates: InterruptionRates | None) -> tuple[np.ndarray, np.ndarray, str]:
    """(type, time) of every spot preemption, the earliest of each type first, and where they come from."""
    rng = np.random.default_rng(seed)
    model = MarketModel(seed=seed)
    given = [k for k, s in enumerate(series) if s.preemptions is not None]
    drawn = np.array([k for k in np.flatnonzero(market == SPOT) if series[k].preemptions is None], dtype=np.int64)
    types = [np.full(len(series[k].preemptions), k, dtype=np.int64) for k in given]
    when = [np.asarray(series[k].preemptions, dtype=np.float64) - start for k in given]
    words = ["the files' own"] if given else []
    if len(drawn) and rates is not None:
        per_hour = np.empty(len(drawn))
        for i, k in enumerate(drawn):
            rate = rates.per_hour(series[k].name.split(" ")[0], series[k].region)
            if rate is None:
                raise InputError(rates.source, f"no interruption rate for {series[k].name.split(' ')[0]} in "
                                 f"{series[k].region} (a spot type of the market)", field="instance_type")
            per_hour[i] = rate
        span_h = (times[-1] + model.step_s) / 3600.0
        counts = rng.poisson(per_hour * span_h)
        types.append(np.repeat(drawn, counts))
        when.append(rng.uniform(0.0, span_h * 3600.0, int(counts.sum())))
        words.append(f"drawn at {rates.source}'s interruption rates (Poisson, over the prices' span)")
    elif len(drawn):
        with np.errstate(invalid="ignore"):
            level = np.nanmean(prices[drawn], axis=1)
        kinds, at = modelled_preemptions(prices[drawn], level, times, model, rng)
        types.append(drawn[kinds])
        when.append(at)
        words.append(MODELLED)
    kept_type = np.concatenate(types) if types else np.zeros(0, dtype=np.int64)
    kept_s = np.concatenate(when) if when else np.zeros(0)
    keep = kept_s >= 0
    kept_type, kept_s = kept_type[keep], kept_s[keep]
    order = np.lexsort((kept_s, kept_type))
    return kept_type[order].astype(np.int64), kept_s[order], "; ".join(words) or "none (no spot type)"


def _gpus_of(cell: dict, source: str, line: int) -> tuple[str, int]:
    if cell.get("gpu_type") and cell.get("gpus"):
        gpus = number(cell["gpus"], source, line, "gpus")
        if gpus != int(gpus) or gpus < 1:
            raise InputError(source, f"must be a whole number of GPUs, got '{cell['gpus']}'", line=line, field="gpus")
        return cell["gpu_type"].lower(), int(gpus)
    found = instance(cell["cloud"], cell["instance_type"])
    if found is None:
        raise InputError(source, f"instance type '{cell['instance_type']}' on '{cell['cloud']}' is not in the "
                         "built-in catalogue: give gpu_type and gpus", line=line, field="instance_type")
    return found.gpu_type, found.gpus
