"""Scheduling policies, one module each, looked up by name in apportion.policies.registry.

Importing this package loads no policy module and no solver: each is imported when first built.
``make_policy(spec, **options)`` builds one (``partitions``, ``agnostic``, ``space_sharing``,
``queues`` …: each policy's options are in ``policy_info(name).options``).
"""

from __future__ import annotations

from typing import Any

from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.registry import ENTRIES, LP_NAMES, make_policy, policy_info, policy_names

POLICIES = ENTRIES  # name -> PolicyEntry, in the table's order
LP_POLICIES = LP_NAMES  # the names of the LP policies (POP partitions and space sharing apply)


def __getattr__(attribute: str) -> Any:
    """The policy classes this package used to import eagerly, now imported on first use."""
    lazy = {"Hierarchical": "apportion.policies.hierarchical", "Partitioned": "apportion.policies.partitioned"}
    if attribute in lazy:
        from importlib import import_module

        return getattr(import_module(lazy[attribute]), attribute)
    raise AttributeError(f"module 'apportion.policies' has no attribute '{attribute}'")


__all__ = [
    "LP_POLICIES",
    "POLICIES",
    "OrderingPolicy",
    "Hierarchical",
    "Partitioned",
    "Policy",
    "make_policy",
    "policy_info",
    "policy_names",
]
