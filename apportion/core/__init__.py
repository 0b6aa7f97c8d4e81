"""The domain, pure and I/O-free: jobs, cluster, throughput tables, allocations, placements.

The names below are loaded on first use, so that a module needing only ``core.errors`` (the
server's client, say) does not import numpy with the rest.
"""

from __future__ import annotations

import importlib

_MODULES = {
    "Allocation": "allocation",
    "Cluster": "cluster",
    "ClusterView": "views",
    "InputError": "errors",
    "JobTable": "jobs",
    "JobView": "views",
    "NodeGroup": "cluster",
    "ThroughputTable": "throughputs",
    "ThroughputView": "views",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module 'apportion.core' has no attribute '{name}'")
    return getattr(importlib.import_module(f"apportion.core.{_MODULES[name]}"), name)
