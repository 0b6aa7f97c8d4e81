"""apportion: share a cluster of accelerators among deep-learning training jobs."""

__version__ = "0.1.0"
