"""The domain, pure and I/O-free: jobs, cluster, throughput tables, allocations, placements."""

from apportion.core.allocation import Allocation
from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import ClusterView, JobView, ThroughputView

__all__ = [
    "Allocation",
    "Cluster",
    "ClusterView",
    "InputError",
    "JobTable",
    "JobView",
    "NodeGroup",
    "ThroughputTable",
    "ThroughputView",
]
