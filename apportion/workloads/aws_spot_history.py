"""AWS's ``aws ec2 describe-spot-price-history --output json``, read as it is: one spot price series
per (instance type, availability zone), its GPUs from the built-in catalogue.

Linear in the file: the JSON is decoded once, and a record's line is found only when it is wrong
(``_located``), so a million records read in seconds and an error still names file, line and field.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

from apportion.core.errors import InputError
from apportion.core.market import SPOT
from apportion.workloads.instance_catalog import AWS_REGION_FACTORS, instance
from apportion.workloads.price_series import PriceSeries, region_of

LINUX = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
FIELDS = ("AvailabilityZone", "InstanceType", "SpotPrice", "Timestamp")


def aws_spot_series(source: str, text: str) -> list[PriceSeries]:
    """The spot series of one file; Linux/UNIX prices where a type has them, else its first product's."""
    records = _history(source, text)
    series: dict[tuple[str, str], PriceSeries] = {}
    descriptions: dict[tuple[str, str], str] = {}
    fromisoformat, utc = datetime.fromisoformat, timezone.utc
    for index, record in enumerate(records):
        if type(record) is not dict:
            raise _located(source, text, index, "", "an entry of SpotPriceHistory is not an object")
        try:
            zone, name = record["AvailabilityZone"], record["InstanceType"]
            price, when = record["SpotPrice"], record["Timestamp"]
        except KeyError as missing:
            raise _located(source, text, index, str(missing.args[0]), "missing") from None
        if type(zone) is not str or type(name) is not str or type(price) is not str or type(when) is not str:
            wrong = next(f for f in FIELDS if type(record[f]) is not str)
            raise _located(source, text, index, wrong, "not a string")
        description = record.get("ProductDescription", "Linux/UNIX")
        key = (name, zone)
        entry = series.get(key)
        if entry is None:
            found = instance("aws", name)
            if found is None:
                raise _located(source, text, index, "InstanceType",
                               f"instance type '{name}' is not in the built-in catalogue (GPU type and count "
                               "unknown; docs/cloud.md lists it)")
            region = region_of(zone)
            if region not in AWS_REGION_FACTORS:
                raise _located(source, text, index, "AvailabilityZone",
                               f"region '{region}' has no on-demand price in the built-in catalogue (known: "
                               f"{', '.join(AWS_REGION_FACTORS)}), so spot there could not be set against on-demand")
            entry = series[key] = PriceSeries("aws", region, f"{name} ({zone})", found.gpu_type,
                                              found.gpus, SPOT)
            descriptions[key] = description
        elif descriptions[key] != description:
            if description in LINUX and descriptions[key] not in LINUX:  # Linux/UNIX wins over the others
                descriptions[key] = description
                entry.times.clear()
                entry.prices.clear()
            else:
                continue
        try:
            value = float(price)
        except ValueError:
            raise _located(source, text, index, "SpotPrice", f"not a number: '{price}'") from None
        if not 0 <= value < math.inf:
            raise _located(source, text, index, "SpotPrice", f"must be a number >= 0, got '{price}'")
        try:
            moment = fromisoformat(when)
        except ValueError:
            raise _located(source, text, index, "Timestamp", f"not an ISO 8601 time: '{when}'") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=utc)
        entry.times.append(moment.timestamp())
        entry.prices.append(value)
    return list(series.values())


def _history(source: str, text: str) -> list:
    """The file's SpotPriceHistory list (errors name the line)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"not JSON: {err.msg}", line=err.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("SpotPriceHistory"), list):
        raise InputError(source, "expected an object with a 'SpotPriceHistory' list (aws ec2 "
                         "describe-spot-price-history --output json)", line=1, field="SpotPriceHistory")
    return data["SpotPriceHistory"]


def _located(source: str, text: str, index: int, key: str, message: str) -> InputError:
    """The error for entry ``index``'s ``key``, on the line the key is on in that entry (its first line
    where it has none). Walks the list once, for the one error a file raises."""
    decoder = json.JSONDecoder()
    pos = text.index("[", text.index('"SpotPriceHistory"')) + 1
    for _ in range(index + 1):
        while text[pos] in " \t\r\n,":
            pos += 1
        start = pos
        _, pos = decoder.raw_decode(text, pos)
    found = text.find(f'"{key}"', start, pos) if key else -1
    line = text.count("\n", 0, start if found < 0 else found) + 1
    return InputError(source, message, line=line, field=key or None)
