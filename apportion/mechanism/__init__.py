"""Rounds, priorities, leases, and gang placement of jobs onto concrete GPUs."""

from apportion.mechanism.placement import Placement, place_on_gpus
from apportion.mechanism.rounds import RoundMechanism

__all__ = ["Placement", "RoundMechanism", "place_on_gpus"]
