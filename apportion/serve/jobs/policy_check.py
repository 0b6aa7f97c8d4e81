"""Asking a policy about one made-up job: can the policy work on these slots at all, and could
a job of this shape ever run under it."""

from __future__ import annotations

import math

import numpy as np

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.mechanism.round_state import job_view
from apportion.policies.base import Policy
from apportion.serve.base.slots import Slot


def check_policy(policy: Policy, slots: list[Slot], prices: dict[str, float] | None = None) -> None:
    """Run ``policy`` once on one made-up job over ``slots``: ValueError if it cannot work here
    (min-cost without prices, say). Use a throwaway policy object: policies keep state."""
    types = list(dict.fromkeys(s.gpu_type for s in slots))
    capacity = np.array([sum(s.gpu_type == t for s in slots) for t in types], dtype=np.int64)
    cluster = ClusterView(tuple(types), capacity, np.array([(prices or {}).get(t, math.nan) for t in types]))
    policy.allocate(one_job_view(), cluster, ThroughputView(np.ones((1, len(types)))))


def one_job_view(gpus: int = 1, queue: str = "") -> JobView:
    """A JobView of one made-up, never-started job, to ask a policy about it."""
    return job_view(
        index=np.array([0]), submit_time_s=np.zeros(1), kind=np.zeros(1, dtype=np.int64),
        num_gpus=np.array([gpus], dtype=np.int64), priority=np.ones(1), total_steps=np.ones(1),
        queue=np.array([queue], dtype=object), user=np.array([""], dtype=object), now_s=0.0,
    )
