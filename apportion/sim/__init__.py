"""The virtual clock, the simulated executor, and the metrics of a replay."""

from apportion.sim.result import SimResult
from apportion.sim.run import simulate
from apportion.sim.simulator import SimConfig, Simulator

__all__ = ["SimConfig", "SimResult", "Simulator", "simulate"]
