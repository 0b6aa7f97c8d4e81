"""The library a training job imports: lease, checkpoint/resume, data order, reports (data stalls too).

Needs only the standard library and httpx; torch is imported only when a job's state holds
tensors. See docs/runtime.md and docs/serve-contract.md.
"""

from apportion.runtime.checkpoint import Checkpointer
from apportion.runtime.client import LeaseAnswer, LeaseClient, ServerError, ServerUnreachable, StaleAttempt
from apportion.runtime.elastic import ElasticSetting, GradientNoise, replica_indices
from apportion.runtime.env import JobEnv
from apportion.runtime.job import PREEMPTED_EXIT_CODE, STALE_EXIT_CODE, Job
from apportion.runtime.rng import rng_state, set_rng_state
from apportion.runtime.sampler import ResumableSampler
from apportion.runtime.stalls import DataStall, fetching
from apportion.runtime.weights import weights_checksum

__all__ = [
    "weights_checksum",
    "PREEMPTED_EXIT_CODE",
    "STALE_EXIT_CODE",
    "Checkpointer",
    "DataStall",
    "ElasticSetting",
    "GradientNoise",
    "Job",
    "JobEnv",
    "LeaseAnswer",
    "LeaseClient",
    "ResumableSampler",
    "ServerError",
    "ServerUnreachable",
    "StaleAttempt",
    "fetching",
    "replica_indices",
    "rng_state",
    "set_rng_state",
]
