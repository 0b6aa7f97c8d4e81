"""Scheduling policies, one module each, looked up by name in apportion.policies.registry.

Importing this package loads no policy module and no solver: each is imported when first built.
"""

from __future__ import annotations

from typing import Any

from apportion.core.queues import QueueConfig
from apportion.policies import registry
from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.registry import ENTRIES, LP_NAMES, policy_info, policy_names

POLICIES = ENTRIES  # name -> PolicyEntry, in the table's order
LP_POLICIES = LP_NAMES  # the names of the LP policies (POP partitions and space sharing apply)


def make_policy(
    name: str,
    *,
    agnostic: bool = False,
    partitions: int = 1,
    slo: bool = False,
    water_filling: bool = False,
    space_sharing: bool = False,
    queues: QueueConfig | None = None,
    **options: Any,
) -> Policy:
    """The policy ``name`` (or ``NAME:variant…``); unknown names list the known ones.

    ``partitions`` > 1 solves an LP policy as that many POP sub-problems; ``slo`` makes
    ``min-cost`` honour the workload's deadlines; ``water_filling`` makes ``max-min-fairness``
    max-min fair in the strong sense; ``space_sharing`` lets pairs of one-GPU jobs share a GPU
    where the throughputs know the pair; ``queues`` is what ``hierarchical`` shares by (it needs
    one; other policies ignore it). Other policies' options (``policy_info(name).options``)
    pass through ``options``.
    """
    return registry.make_policy(
        name, agnostic=agnostic, partitions=partitions, slo=slo, water_filling=water_filling,
        space_sharing=space_sharing, queues=queues, **options,
    )


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
