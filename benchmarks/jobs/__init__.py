"""Torch-free jobs that benchmarks start under a real server."""
