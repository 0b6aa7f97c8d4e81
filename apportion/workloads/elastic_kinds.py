"""The built-in elastic job kinds: six models fitted from the Pollux authors' measurements.

``data/elastic_kinds.json`` (written by scripts/fit_elastic_kinds.py from
../shared/profiles/pollux/, Apache-2.0) holds each model's step-time parameters on the T4 it
was measured on, its batch limits, its target and its gradient noise scale through training.

Other GPU types are derived, not measured: compute terms (α_c, β_c) are divided by how much
faster a similar model runs on one GPU of that type than on a T4 in the throughput catalog
(``PROXY_KINDS``), and synchronisation terms are multiplied by the T4's link bandwidth over the
type's (intra-node for α_r, β_r; inter-node for α_n, β_n) from perf's accelerator catalog. It
is an approximation: the shape of each model's scaling is kept, its speed moved.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np

from apportion.core.elastic import ElasticKinds
from apportion.core.errors import InputError
from apportion.core.goodput import NUM_PARAMS, PARAM_NAMES
from apportion.perf.accelerators import ACCELERATORS, ALIASES
from apportion.workloads.catalog import builtin_throughputs

RESOURCE = "data/elastic_kinds.json"
SOURCE = f"apportion/workloads/{RESOURCE}"
# a kind of the throughput catalog whose speed across GPU types stands in for each model's compute
PROXY_KINDS = {
    "bert": "transformer/bs32",
    "cifar10": "resnet18/bs128",
    "deepspeech2": "lm/bs20",
    "imagenet": "resnet50/bs64",
    "ncf": "recommendation/bs2048",
    "yolov3": "resnet50/bs32",
}


@lru_cache(maxsize=1)
def elastic_kinds_document() -> dict:
    """The shipped JSON: provenance, and each kind's fitted numbers."""
    text = resources.files("apportion.workloads").joinpath(RESOURCE).read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=16)
def builtin_elastic_kinds(gpu_types: tuple[str, ...] | None = None) -> ElasticKinds:
    """The six kinds with step-time parameters for ``gpu_types`` (measured on t4, derived for the
    rest; None: every type of the throughput catalog).

    InputError naming a GPU type that the accelerator catalog or the throughput catalog lacks.
    """
    if gpu_types is None:
        gpu_types = builtin_throughputs().gpu_types
    document = elastic_kinds_document()
    measured_on = document["measured_on"]
    entries = document["kinds"]
    names = tuple(entries)
    params = np.full((len(names), len(gpu_types), NUM_PARAMS), np.nan)
    for k, name in enumerate(names):
        base = np.array([entries[name]["step_time"][measured_on][p] for p in PARAM_NAMES])
        for t, gpu_type in enumerate(gpu_types):
            params[k, t] = base if gpu_type == measured_on else derived_params(name, base, measured_on, gpu_type)
    knots = max(len(e["noise_scale"]["examples"]) for e in entries.values())

    def padded(values: list[float]) -> list[float]:
        return list(values) + [values[-1]] * (knots - len(values))

    def column(key: str) -> np.ndarray:
        return np.array([float(entries[n][key]) for n in names])

    fraction = np.array([padded(entries[n]["noise_scale"]["progress_fraction"]) for n in names])
    fraction[:, -1] = np.maximum(fraction[:, -1], 1.0)  # hold the last knot's value to the end
    fraction = np.maximum.accumulate(fraction, axis=1)
    kinds = ElasticKinds(
        names=names, gpu_types=tuple(gpu_types), step_params=params,
        init_batch=column("init_batch"), max_batch=column("max_batch"),
        min_local_batch=column("min_local_batch"), max_local_batch=column("max_local_batch"),
        target_examples=column("target_examples"), noise_fraction=fraction,
        noise_scale=np.array([padded(entries[n]["noise_scale"]["examples"]) for n in names]),
    )
    for array in (kinds.step_params, kinds.noise_fraction, kinds.noise_scale):
        array.setflags(write=False)
    return kinds


def derived_params(name: str, measured: np.ndarray, measured_on: str, gpu_type: str) -> np.ndarray:
    """``measured`` (on ``measured_on``) moved to ``gpu_type`` by its compute speed and link bandwidths."""
    table = builtin_throughputs()
    here = ACCELERATORS.get(ALIASES.get(gpu_type, gpu_type))
    there = ACCELERATORS[ALIASES.get(measured_on, measured_on)]
    if here is None or gpu_type not in table.gpu_types:
        known = sorted(set(table.gpu_types) & (set(ACCELERATORS) | set(ALIASES)))
        raise InputError(SOURCE, f"no elastic job model for GPU type '{gpu_type}' (known: {', '.join(known)})")
    proxy = table.kind_index(PROXY_KINDS[name])
    rate_here = table.steps_per_s[proxy, table.gpu_types.index(gpu_type), 0]
    rate_there = table.steps_per_s[proxy, table.gpu_types.index(measured_on), 0]
    speedup = rate_here / rate_there if rate_here > 0 and rate_there > 0 else np.nan
    params = measured.copy()
    params[0:2] /= speedup  # α_c, β_c
    params[2:4] *= there.inter_node_bandwidth / here.inter_node_bandwidth  # α_n, β_n
    params[4:6] *= there.intra_node_bandwidth / here.intra_node_bandwidth  # α_r, β_r
    return params
