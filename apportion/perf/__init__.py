"""Predict a training job's step time and memory on any accelerator and parallel layout."""

from apportion.perf.accelerators import ACCELERATORS, Accelerator, get_accelerator

__all__ = ["ACCELERATORS", "Accelerator", "get_accelerator"]
