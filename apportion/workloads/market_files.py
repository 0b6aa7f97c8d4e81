"""Markets from files: AWS's ``describe-spot-price-history`` JSON and a plain CSV (docs/cloud.md).

Both give prices that hold from their time until the series' next price; a series is taken at its
first price before that (so every type is offered from the market's start, time 0 being the
earliest time in the file). AWS gives spot prices only: each instance type and region also gets
an on-demand type at the built-in catalogue's list price, and preemptions, which AWS does not
publish, are drawn by the synthetic market's rule from the spot prices (seeded). A CSV gives its
own preemptions when it has an ``event`` column, else they are drawn the same way. Anything wrong
raises InputError naming the file, line and field.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from apportion.core.errors import InputError
from apportion.core.market import MARKETS, ON_DEMAND, SPOT, Market
from apportion.workloads.instance_catalog import EGRESS_USD_PER_GB, INTER_REGION_USD_PER_GB, REGIONS, instance
from apportion.workloads.synthetic_market import MarketModel, egress_of, modelled_preemptions
from apportion.workloads.text_file import read_text

CSV_REQUIRED = ("time_s", "cloud", "region", "instance_type", "market", "price_per_hour")
CSV_OPTIONAL = ("gpu_type", "gpus", "event")
LINUX = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


@dataclass
class _Series:
    cloud: str
    region: str
    name: str
    gpu_type: str
    gpus: int
    market: int
    times: list[float] = field(default_factory=list)
    prices: list[float] = field(default_factory=list)


def read_market(source: str, seed: int = 0) -> Market:
    """The market in ``source``: AWS's JSON when it starts with ``{``, else the CSV format."""
    text = read_text(source)
    if text.lstrip().startswith("{"):
        return read_aws_spot_history(source, text, seed)
    return read_market_csv(source, text, seed)


def read_aws_spot_history(source: str, text: str, seed: int = 0) -> Market:
    """``aws ec2 describe-spot-price-history`` output; Linux/UNIX prices where a type has them."""
    series: dict[tuple[str, str], _Series] = {}
    descriptions: dict[tuple[str, str], str] = {}
    for line_of, record in _aws_records(source, text):
        def value(name: str) -> str:
            if name not in record or not isinstance(record[name], str):
                raise InputError(source, "missing or not a string", line=line_of(name), field=name)
            return record[name]

        zone, name = value("AvailabilityZone"), value("InstanceType")
        found = instance("aws", name)
        if found is None:
            raise InputError(source, f"instance type '{name}' is not in the built-in catalogue (GPU type and "
                             "count unknown; docs/cloud.md lists it)", line=line_of("InstanceType"), field="InstanceType")
        price = _number(value("SpotPrice"), source, line_of("SpotPrice"), "SpotPrice")
        when = _timestamp(value("Timestamp"), source, line_of("Timestamp"), "Timestamp")
        description = str(record.get("ProductDescription", "Linux/UNIX"))
        key = (name, zone)
        kept = descriptions.setdefault(key, description)
        if kept != description:
            if description in LINUX and kept not in LINUX:  # Linux/UNIX wins over the others
                descriptions[key] = description
                series.pop(key, None)
            else:
                continue
        entry = series.setdefault(key, _Series("aws", _region_of(zone), f"{name} ({zone})", found.gpu_type,
                                               found.gpus, SPOT))
        entry.times.append(when)
        entry.prices.append(price)
    if not series:
        raise InputError(source, "no prices in 'SpotPriceHistory'")
    on_demand = {}
    for entry in series.values():
        name = entry.name.split(" ")[0]
        found = instance("aws", name)
        factor = REGIONS["aws"].get(entry.region, 1.0)
        on_demand.setdefault((name, entry.region), _Series("aws", entry.region, name, found.gpu_type, found.gpus,
                                                           ON_DEMAND, [entry.times[0]],
                                                           [found.on_demand_per_hour * factor]))
    return _market(source, list(on_demand.values()) + list(series.values()), None, seed)


def read_market_csv(source: str, text: str, seed: int = 0) -> Market:
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
    series: dict[tuple[str, str, str, int], _Series] = {}
    preemptions: list[tuple[tuple[str, str, str, int], float, int]] = []
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(source, f"has {len(row)} fields, the header {len(header)}", line=line)
        cell = {name: row[i].strip() for name, i in at.items()}
        when = _time(cell["time_s"], source, line, "time_s")
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
        price = _number(cell["price_per_hour"], source, line, "price_per_hour")
        if key not in series:
            gpu_type, gpus = _gpus_of(cell, source, line)
            series[key] = _Series(*key[:3], gpu_type, gpus, market)
        series[key].times.append(when)
        series[key].prices.append(price)
    if not series:
        raise InputError(source, "no prices")
    given = None
    if "event" in at:
        keys = list(series)
        given = []
        for key, when, line in preemptions:
            if key not in series:
                raise InputError(source, "a preemption of an instance type the file gives no price for",
                                 line=line, field="instance_type")
            given.append((keys.index(key), when))
    return _market(source, list(series.values()), given, seed)


def _market(source: str, series: list[_Series], preemptions: list[tuple[int, float]] | None, seed: int) -> Market:
    """One Market from price series over absolute times (the earliest becomes 0)."""
    start = min(min(s.times) for s in series)
    times = np.unique(np.concatenate([np.asarray(s.times) for s in series])) - start
    prices = np.empty((len(series), len(times)))
    for k, s in enumerate(series):
        order = np.argsort(s.times, kind="stable")
        own = np.asarray(s.times)[order] - start
        at = np.maximum(np.searchsorted(own, times, side="right") - 1, 0)
        prices[k] = np.asarray(s.prices)[order][at]
    market = np.array([s.market for s in series], dtype=np.int64)
    if preemptions is None:
        spot = np.flatnonzero(market == SPOT)
        model = MarketModel(seed=seed)
        level = prices[spot].mean(axis=1) if len(times) else np.ones(len(spot))
        kinds, when = modelled_preemptions(prices[spot], level, times, model, np.random.default_rng(seed))
        preempt_type, preempt_s = spot[kinds], when
    else:
        preempt_type = np.array([k for k, _ in preemptions], dtype=np.int64)
        preempt_s = np.array([w for _, w in preemptions], dtype=np.float64) - start
    cloud = np.array([s.cloud for s in series], dtype=object)
    return Market(
        name=np.array([s.name for s in series], dtype=object), cloud=cloud,
        region=np.array([s.region for s in series], dtype=object),
        gpu_type=np.array([s.gpu_type for s in series], dtype=object),
        gpus=np.array([s.gpus for s in series], dtype=np.int64), market=market,
        times_s=times, price_per_hour=prices, preempt_type=preempt_type, preempt_s=preempt_s,
        egress_usd_per_gb=egress_of(cloud, EGRESS_USD_PER_GB),
        inter_region_usd_per_gb=egress_of(cloud, INTER_REGION_USD_PER_GB), source=source,
    )


def _aws_records(source: str, text: str):
    """(line_of, record) for each entry of SpotPriceHistory: ``line_of(key)`` is the line the key is on
    in that entry (the entry's first line where it has none)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"not JSON: {err.msg}", line=err.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("SpotPriceHistory"), list):
        raise InputError(source, "expected an object with a 'SpotPriceHistory' list (aws ec2 "
                         "describe-spot-price-history --output json)", line=1, field="SpotPriceHistory")
    decoder = json.JSONDecoder()
    pos = text.index("[", text.index('"SpotPriceHistory"'))
    for record in data["SpotPriceHistory"]:
        pos += 1
        while text[pos] in " \t\r\n,":
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        start = pos

        def line_of(key: str, start: int = start, end: int = end) -> int:
            found = text.find(f'"{key}"', start, end) if key else -1
            return text.count("\n", 0, start if found < 0 else found) + 1

        if not isinstance(record, dict):
            raise InputError(source, "an entry of SpotPriceHistory is not an object", line=line_of(""))
        yield line_of, record
        pos = end - 1


def _gpus_of(cell: dict, source: str, line: int) -> tuple[str, int]:
    if cell.get("gpu_type") and cell.get("gpus"):
        gpus = _number(cell["gpus"], source, line, "gpus")
        if gpus != int(gpus) or gpus < 1:
            raise InputError(source, f"must be a whole number of GPUs, got '{cell['gpus']}'", line=line, field="gpus")
        return cell["gpu_type"].lower(), int(gpus)
    found = instance(cell["cloud"], cell["instance_type"])
    if found is None:
        raise InputError(source, f"instance type '{cell['instance_type']}' on '{cell['cloud']}' is not in the "
                         "built-in catalogue: give gpu_type and gpus", line=line, field="instance_type")
    return found.gpu_type, found.gpus


def _number(text: str, source: str, line: int, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, f"not a number: '{text}'", line=line, field=name) from None
    if not np.isfinite(value) or value < 0:
        raise InputError(source, f"must be a number >= 0, got '{text}'", line=line, field=name)
    return value


def _time(text: str, source: str, line: int, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        return _timestamp(text, source, line, name)


def _timestamp(text: str, source: str, line: int, name: str) -> float:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(source, f"not an ISO 8601 time or seconds: '{text}'", line=line, field=name) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _region_of(zone: str) -> str:
    """us-east-1a → us-east-1 (a zone's region: the name less its trailing letters)."""
    return zone.rstrip("abcdefghijklmnopqrstuvwxyz") or zone
