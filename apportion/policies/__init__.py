"""Scheduling policies, one module each, looked up by their command-line name."""

from __future__ import annotations

from typing import Callable

from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.fifo import Fifo
from apportion.policies.finish_time_fairness import FinishTimeFairness
from apportion.policies.las import Las
from apportion.policies.max_min_fairness import MaxMinFairness
from apportion.policies.max_throughput import MaxThroughput
from apportion.policies.min_cost import MinCost
from apportion.policies.min_makespan import MinMakespan
from apportion.policies.partitioned import Partitioned
from apportion.policies.srtf import Srtf

POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": Fifo,
    "srtf": Srtf,
    "las": Las,
    "max-min-fairness": MaxMinFairness,
    "finish-time-fairness": FinishTimeFairness,
    "min-makespan": MinMakespan,
    "max-throughput": MaxThroughput,
    "min-cost": MinCost,
}
LP_POLICIES = frozenset({"max-min-fairness", "finish-time-fairness", "min-makespan", "max-throughput", "min-cost"})


def make_policy(name: str, *, agnostic: bool = False, partitions: int = 1, slo: bool = False) -> Policy:
    """The policy called ``name`` on the command line; unknown names list the known ones.

    ``partitions`` > 1 solves an LP policy as that many POP sub-problems; ``slo`` makes
    ``min-cost`` honour the workload's deadlines.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy '{name}' (known: {', '.join(POLICIES)})") from None
    options = {"agnostic": agnostic}
    if slo:
        if name != "min-cost":
            raise ValueError(f"--slo applies to min-cost only, not to '{name}'")
        options["slo"] = True
    if partitions > 1:
        if name not in LP_POLICIES:
            raise ValueError(f"--partitions applies to LP policies ({', '.join(sorted(LP_POLICIES))}), not to '{name}'")
        return Partitioned(lambda: factory(**options), partitions)
    return factory(**options)


__all__ = ["LP_POLICIES", "POLICIES", "OrderingPolicy", "Partitioned", "Policy", "make_policy"]
