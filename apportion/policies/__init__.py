"""Scheduling policies, one module each, looked up by their command-line name."""

from __future__ import annotations

from typing import Callable

from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.fifo import Fifo
from apportion.policies.las import Las
from apportion.policies.max_min_fairness import MaxMinFairness
from apportion.policies.srtf import Srtf

POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": Fifo,
    "srtf": Srtf,
    "las": Las,
    "max-min-fairness": MaxMinFairness,
}


def make_policy(name: str, *, agnostic: bool = False) -> Policy:
    """The policy called ``name`` on the command line; unknown names list the known ones."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy '{name}' (known: {', '.join(POLICIES)})") from None
    return factory(agnostic=agnostic)


__all__ = ["POLICIES", "OrderingPolicy", "Policy", "make_policy"]
