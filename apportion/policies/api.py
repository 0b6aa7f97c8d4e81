"""The public API for writing a policy outside apportion: what a policy receives and returns.

A policy is a class with::

    name: str                                            # set by apportion to what it was asked for by
    def allocate(self, jobs: JobView, cluster: ClusterView, throughputs: ThroughputView) -> Allocation
    def next_change_s(self, jobs: JobView, running: np.ndarray) -> float   # inf: only when jobs come or go

Its constructor takes its options as keyword arguments (``options``: a tuple of ``Option``, each a
flag of ``simulate``, ``compare``, ``sweep`` and ``serve``). Class attributes a plugin may set:
``summary`` (one line for ``apportion policies``; else its docstring's first line), ``options``,
``is_lp`` (POP ``--partitions`` apply; an ``LPPolicy`` subclass is one), ``requires_api`` (the
``POLICY_API_VERSION`` it is written for; a newer one than this apportion's is refused),
``space_sharing`` and ``sizes_jobs`` as the built-ins use them. docs/policies.md is the tutorial.

Stable (kept as they are for ``POLICY_API_VERSION`` 1; a change that breaks them raises it):
the fields of ``JobView`` named in ``STABLE_JOB_FIELDS``, ``ClusterView``, ``ThroughputView``'s
``steps_per_s``, ``runnable`` and ``normalised``, ``Allocation(job_index, share)``,
``OrderingPolicy.rank_key``, ``LPPolicy.value``/``solve``, ``Option``, ``PolicyEntry``, the built-ins'
options a plugin may take too (``AGNOSTIC``: ``NAME:agnostic``; ``LP_OPTIONS``), and the LP
helpers ``LinearProgram``, ``add_share_columns`` and ``shares_from``. Everything else a view
carries (pairs, elastic models, predictions, cores and memory) may still change.

What apportion checks of a plugin's answer: an ``Allocation`` for exactly the jobs it was given
(``job_index`` = ``jobs.index``), ``share`` of shape [jobs, GPU types], finite, ≥ 0, each job's
shares summing to at most 1. Anything else stops the run with one line naming the plugin.
"""

from __future__ import annotations

from typing import Any

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies.base import OrderingPolicy, Policy
from apportion.policies.entry import POLICY_API_VERSION
from apportion.policies.registry import AGNOSTIC, LP_OPTIONS, Option, PolicyEntry

STABLE_JOB_FIELDS = ("index", "submit_time_s", "kind", "num_gpus", "priority", "total_steps", "steps_done",
                     "attained_service_s", "first_start_s", "running_type", "queue", "user", "now_s")
_LAZY = {  # imported on first use: they load the solver
    "LPPolicy": "apportion.policies.lp",
    "LinearProgram": "apportion.solve.lp",
    "add_share_columns": "apportion.solve.lp",
    "shares_from": "apportion.solve.lp",
}


def __getattr__(attribute: str) -> Any:
    if attribute in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[attribute]), attribute)
    raise AttributeError(f"module 'apportion.policies.api' has no attribute '{attribute}'")


__all__ = [
    "AGNOSTIC", "LP_OPTIONS", "POLICY_API_VERSION", "STABLE_JOB_FIELDS", "Allocation", "ClusterView", "JobView", "LPPolicy", "LinearProgram",
    "Option", "OrderingPolicy", "Policy", "PolicyEntry", "ThroughputView", "add_share_columns", "shares_from",
]
