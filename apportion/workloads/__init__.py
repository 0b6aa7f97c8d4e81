"""Workload inputs: trace readers, the synthetic generator, cluster files. Imports apportion.core only."""
