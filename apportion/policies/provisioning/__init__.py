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
    "cheapest-now": "each round, the type (on-demand or spot) cheapest to finish the job at today's prices",
    "cheapest-now:daily": "as cheapest-now, re-chosen once a day per job",
    "spot-fallback": "the cheapest spot type until preempted; on-demand while every spot type was just preempted",
    "deadline-aware": "spot while the deadline's slack allows, then on-demand to the end (Can't Be Late)",
}


class ProvisioningPolicy(Protocol):
    name: str

    def choose(self, view: RentalView) -> np.ndarray:
        """[a] the type each active job holds this round, -1 for none."""


def checked_choice(policy: ProvisioningPolicy, view: RentalView) -> np.ndarray:
    """[a] the type ``policy`` chooses for each of ``view``'s jobs (-1: none); ValueError when it answers
    for another number of jobs or names a type that does not exist or that the job cannot use."""
    try:
        choice = np.asarray(policy.choose(view), dtype=np.int64)
    except Exception as exc:  # noqa: BLE001 - a plugin's own code: named, never a traceback from the round
        raise ValueError(f"provisioning policy '{policy.name}': choose() raised {type(exc).__name__}: {exc}") from None
    jobs, types = view.usable.shape
    if choice.ndim != 1 or len(choice) != jobs or np.any(choice >= types) or np.any(choice < -1):
        raise ValueError(f"provisioning policy '{policy.name}' chose an instance type that does not exist")
    chosen = choice >= 0
    if not view.usable[np.flatnonzero(chosen), choice[chosen]].all():
        raise ValueError(f"provisioning policy '{policy.name}' chose an instance type a job cannot use")
    return choice


def make_provisioning(spec: str) -> ProvisioningPolicy:
    """A fresh policy for one of ``PROVISIONING``'s names; ValueError naming the known ones otherwise."""
    from apportion.policies.provisioning.cheapest_now import CheapestNow
    from apportion.policies.provisioning.deadline_aware import DeadlineAware
    from apportion.policies.provisioning.spot_fallback import SpotFallback
    from apportion.policies.provisioning.static import Static

    builders = {
        "static": Static, "cheapest-now": CheapestNow, "cheapest-now:daily": lambda: CheapestNow(DAY_S),
        "spot-fallback": SpotFallback, "deadline-aware": DeadlineAware,
    }
    if spec not in builders:
        return _plugin(spec)
    policy = builders[spec]()
    policy.name = spec
    return policy


def _plugin(spec: str) -> ProvisioningPolicy:
    """A provisioning policy from outside apportion: an entry point of ``apportion.provisioning`` or a
    file spec, naming a class (or factory) built with no arguments that has ``choose(view)``."""
    from apportion.plugins import PluginError, from_entry_point, from_file, is_file_spec

    plugin = from_file("provisioning", spec) if is_file_spec(spec) else from_entry_point("provisioning", spec)
    if plugin is None:
        raise ValueError(f"unknown provisioning policy '{spec}' (known: {', '.join(PROVISIONING)})")
    where = f"provisioning plugin {plugin.name} ({plugin.source})"
    if not callable(plugin.value):
        raise PluginError(f"{where}: is a {type(plugin.value).__name__}, not a provisioning policy class")
    try:
        policy = plugin.value()
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"{where}: building it failed: {type(exc).__name__}: {exc}") from None
    if not callable(getattr(policy, "choose", None)):
        raise PluginError(f"{where}: {type(policy).__name__} has no choose(view)")
    policy.name = spec
    return policy


__all__ = ["PROVISIONING", "ProvisioningPolicy", "RentalView", "checked_choice", "make_provisioning"]
