"""Provisioning policies for a rented cluster: which market instance type each job holds each round.

Each job rents instances for itself (the shape of Narayanan et al.'s analysis): a policy answers,
from a ``RentalView`` of the round's active jobs and the market, one type per job or -1. They are
policies like the GPU ones (decisions from views, no I/O), so they live beside them; the replay
on a rented cluster is ``apportion.sim.rented``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from apportion.policies.provisioning.view import RentalView

DAY_S = 86400.0
PROVISIONING = {
    "static": "the cheapest on-demand type for the job's whole run, chosen when it starts, kept",
}


class ProvisioningPolicy(Protocol):
    name: str

    def choose(self, view: RentalView) -> np.ndarray:
        """[a] the type each active job holds this round, -1 for none."""


def make_provisioning(spec: str) -> ProvisioningPolicy:
    """A fresh policy for one of ``PROVISIONING``'s names; ValueError naming the known ones otherwise."""
    from apportion.policies.provisioning.static import Static

    builders = {"static": Static}
    if spec not in builders:
        raise ValueError(f"unknown provisioning policy '{spec}' (known: {', '.join(PROVISIONING)})")
    policy = builders[spec]()
    policy.name = spec
    return policy


__all__ = ["PROVISIONING", "ProvisioningPolicy", "RentalView", "make_provisioning"]
