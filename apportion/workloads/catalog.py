"""The built-in throughput catalog: steps/s of Gavel's job kinds on k80 … h100 at 1, 2, 4, 8 GPUs.

k80/p100/v100 are Gavel's published measurements; t4/a100/h100 are a roofline prediction from
them (scripts/build_catalog.py regenerates data/catalog.json). Every kind's ``sources`` entry
says which is which; docs/throughputs.md explains both.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable

CATALOG_RESOURCE = "data/catalog.json"


@lru_cache(maxsize=1)
def builtin_throughputs() -> ThroughputTable:
    """The catalog shipped inside the package, loaded once; its array is read-only, so share it."""
    text = resources.files("apportion.workloads").joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
    return catalog_table(json.loads(text), f"apportion/workloads/{CATALOG_RESOURCE}")


def catalog_table(document: dict, source: str) -> ThroughputTable:
    """The ThroughputTable a catalog document (the layout build_catalog.py writes) describes."""
    try:
        gpu_types = tuple(document["gpu_types"])
        scales = tuple(int(s) for s in document["scales"])
        entries = document["kinds"]
        table = np.array(
            [[_rates(entry["steps_per_s"].get(gpu), len(scales)) for gpu in gpu_types]
             for entry in entries.values()],
            dtype=float,
        ).reshape(len(entries), len(gpu_types), len(scales))
        pairs = {
            (kind, other, gpu): (float(this), float(that))
            for gpu, rows in document["pairs_at_one_gpu"].items() if gpu != "columns"
            for kind, other, this, that in rows
        }
        sources = {kind: entry["source"] for kind, entry in entries.items()}
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(source, f"not a throughput catalog: {err!r}") from None
    table.setflags(write=False)
    return ThroughputTable(tuple(entries), gpu_types, scales, table, pairs, sources)


def _rates(values: list | None, count: int) -> list[float]:
    if values is None:
        return [np.nan] * count
    if len(values) != count:
        raise ValueError(f"expected {count} steps/s values, got {len(values)}")
    return [np.nan if v is None else float(v) for v in values]
