"""Scheduling policies, one module each, looked up by their command-line name."""

from __future__ import annotations

from typing import Callable

from apportion.core.queues import QueueConfig
from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.fifo import Fifo
from apportion.policies.finish_time_fairness import FinishTimeFairness
from apportion.policies.hierarchical import Hierarchical
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
    "hierarchical": Hierarchical,
}
LP_POLICIES = frozenset({"max-min-fairness", "finish-time-fairness", "min-makespan", "max-throughput", "min-cost"})


def make_policy(
    name: str,
    *,
    agnostic: bool = False,
    partitions: int = 1,
    slo: bool = False,
    water_filling: bool = False,
    space_sharing: bool = False,
    queues: QueueConfig | None = None,
) -> Policy:
    """The policy called ``name`` on the command line; unknown names list the known ones.

    ``partitions`` > 1 solves an LP policy as that many POP sub-problems; ``slo`` makes
    ``min-cost`` honour the workload's deadlines; ``water_filling`` makes ``max-min-fairness``
    max-min fair in the strong sense; ``space_sharing`` lets pairs of one-GPU jobs share a GPU
where the throughputs know the pair; ``queues`` is what ``hierarchical`` shares by (it needs
    one; other policies ignore it).
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
    if name == "hierarchical":
        if queues is None:
            raise ValueError("hierarchical needs --queues FILE (a queues YAML, see docs/queues.md)")
        options["queues"] = queues
    if water_filling:
        if name != "max-min-fairness":
            raise ValueError(f"--water-filling applies to max-min-fairness only, not to '{name}'")
        options["water_filling"] = True
    if space_sharing:
        if name not in LP_POLICIES:
            raise ValueError(
                f"--space-sharing applies to {', '.join(sorted(LP_POLICIES))}, not to '{name}'"
            )
        if slo or water_filling:
            raise ValueError("--space-sharing cannot be combined with --slo or --water-filling")
        options["space_sharing"] = True
    if partitions > 1:
        if name not in LP_POLICIES:
            raise ValueError(f"--partitions applies to LP policies ({', '.join(sorted(LP_POLICIES))}), not to '{name}'")
        return Partitioned(lambda: factory(**options), partitions)
    return factory(**options)


__all__ = ["LP_POLICIES", "POLICIES", "OrderingPolicy", "Hierarchical", "Partitioned", "Policy", "make_policy"]
