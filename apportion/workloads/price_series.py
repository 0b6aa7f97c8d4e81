"""One price series of a market file (an offer's prices over absolute times), and the cell parsers
the market readers share; anything wrong raises InputError naming the file, line and field."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from apportion.core.errors import InputError
from apportion.core.market import MARKETS


@dataclass
class PriceSeries:
    """An offer's prices at absolute times (seconds since the epoch, or a CSV's own seconds).

    ``times`` empty with one price: a constant price (AWS's on-demand, from the catalogue).
    ``preemptions``: the file's own (None: the file gives none, they are drawn)."""

    cloud: str
    region: str
    name: str
    gpu_type: str
    gpus: int
    market: int
    times: list[float] = field(default_factory=list)
    prices: list[float] = field(default_factory=list)
    preemptions: list[float] | None = None

    @property
    def label(self) -> str:
        return f"{self.cloud}/{self.region}/{self.name}/{MARKETS[self.market]}"


def number(text: str, source: str, line: int | None, name: str) -> float:
    """A price: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, f"not a number: '{text}'", line=line, field=name) from None
    if not np.isfinite(value) or value < 0:
        raise InputError(source, f"must be a number >= 0, got '{text}'", line=line, field=name)
    return value


def seconds_or_time(text: str, source: str, line: int | None, name: str) -> float:
    """Seconds, or an ISO 8601 time as seconds since the epoch."""
    try:
        value = float(text)
    except ValueError:
        return timestamp(text, source, line, name)
    if not np.isfinite(value):
        raise InputError(source, f"must be a finite number of seconds or an ISO 8601 time, got '{text}'",
                         line=line, field=name)
    return value


def timestamp(text: str, source: str, line: int | None, name: str) -> float:
    """An ISO 8601 time (UTC when it names no zone) as seconds since the epoch."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(source, f"not an ISO 8601 time or seconds: '{text}'", line=line, field=name) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def shown_time(seconds: float) -> str:
    """A market time as a user gave it: an ISO 8601 UTC time for epoch seconds, else seconds."""
    if seconds >= 1e8:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{seconds:g} s"


def region_of(zone: str) -> str:
    """us-east-1a → us-east-1 (a zone's region: the name less its trailing letters)."""
    return zone.rstrip("abcdefghijklmnopqrstuvwxyz") or zone
