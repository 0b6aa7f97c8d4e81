"""Spot interruption rates per instance type, as AWS publishes them (the Spot Instance Advisor's
buckets: <5%, 5-10%, 10-15%, 15-20%, >20% of instances interrupted a month), turned into each spot
type's preemptions per hour. Two formats: a CSV ``instance_type,region,interruption`` (region
empty: every region; interruption a bucket or a percent a month) or the Advisor's own JSON
(``spot-advisor-data.json``: ``spot_advisor[region]["Linux"][type]["r"]`` indexes ``ranges``)."""

from __future__ import annotations

import csv
import io
import json
import math

from apportion.core.errors import InputError
from apportion.workloads.text_file import read_text

# a bucket's percent a month: its middle (>20%: taken as 25%)
BUCKETS = {"<5%": 2.5, "5-10%": 7.5, "10-15%": 12.5, "15-20%": 17.5, ">20%": 25.0}
HOURS_A_MONTH = 730.0


class InterruptionRates:
    """Percent of instances interrupted a month, by (instance type, region); region "" for every region."""

    def __init__(self, source: str, percent: dict[tuple[str, str], float]) -> None:
        self.source = source
        self.percent = percent

    def per_hour(self, name: str, region: str) -> float | None:
        """Preemptions an hour of a spot type, so that an instance is taken back within a month with the
        file's probability (1 − exp(−rate · 730 h) = percent); None where the file has no rate."""
        percent = self.percent.get((name, region), self.percent.get((name, "")))
        if percent is None:
            return None
        return -math.log1p(-min(percent, 99.99) / 100.0) / HOURS_A_MONTH


def read_interruption_rates(source: str) -> InterruptionRates:
    text = read_text(source)
    if text.lstrip().startswith("{"):
        return InterruptionRates(source, _advisor_json(source, text))
    return InterruptionRates(source, _rates_csv(source, text))


def bucket_percent(text: str, source: str, line: int | None, name: str) -> float:
    """A bucket (``5-10%``) or a percent a month (``7.5``, ``7.5%``), as a percent."""
    cleaned = text.strip().replace(" ", "").replace("–", "-")
    if cleaned in BUCKETS:
        return BUCKETS[cleaned]
    try:
        value = float(cleaned.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not 0 <= value < 100:
        raise InputError(source, f"must be one of {', '.join(BUCKETS)} or a percent a month in [0, 100), "
                         f"got '{text}'", line=line, field=name)
    return value


def _rates_csv(source: str, text: str) -> dict[tuple[str, str], float]:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    for needed in ("instance_type", "interruption"):
        if needed not in header:
            raise InputError(source, "missing column (needs instance_type, interruption; region optional)",
                             line=1, field=needed)
    at = {name: i for i, name in enumerate(header)}
    out: dict[tuple[str, str], float] = {}
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(source, f"has {len(row)} fields, the header {len(header)}", line=line)
        name = row[at["instance_type"]].strip()
        if not name:
            raise InputError(source, "must not be empty", line=line, field="instance_type")
        region = row[at["region"]].strip() if "region" in at else ""
        out[(name, region)] = bucket_percent(row[at["interruption"]], source, line, "interruption")
    if not out:
        raise InputError(source, "no interruption rates")
    return out


def _advisor_json(source: str, text: str) -> dict[tuple[str, str], float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"not JSON: {err.msg}", line=err.lineno) from None
    ranges, advisor = (data.get("ranges"), data.get("spot_advisor")) if isinstance(data, dict) else (None, None)
    if not isinstance(ranges, list) or not isinstance(advisor, dict):
        raise InputError(source, "expected the Spot Instance Advisor's JSON, with 'ranges' and 'spot_advisor'",
                         field="spot_advisor")
    labels = {}
    for entry in ranges:
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            raise InputError(source, "an entry of 'ranges' has no label", field="ranges")
        labels[entry.get("index")] = bucket_percent(entry["label"], source, None, "ranges")
    out: dict[tuple[str, str], float] = {}
    for region, systems in advisor.items():
        types = systems.get("Linux", {}) if isinstance(systems, dict) else None
        if not isinstance(types, dict):
            raise InputError(source, f"region '{region}' has no Linux types", field="spot_advisor")
        for name, entry in types.items():
            bucket = entry.get("r") if isinstance(entry, dict) else None
            if bucket not in labels:
                raise InputError(source, f"'{region}' '{name}': 'r' names no entry of 'ranges'", field="spot_advisor")
            out[(name, region)] = labels[bucket]
    return out
