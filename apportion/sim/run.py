"""``simulate``: one replay of a workload, by the simulator its jobs need (elastic jobs: the
elastic one). Above both simulators, so that neither imports the other."""

from __future__ import annotations

from apportion.core.cluster import Cluster
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.mechanism.privacy_budget import PrivacyStage
from apportion.policies.base import Policy
from apportion.sim.result import SimResult
from apportion.sim.simulator import ProgressCallback, SimConfig, Simulator


def simulate(
    jobs: JobTable,
    cluster: Cluster,
    throughputs: ThroughputTable,
    policy: Policy,
    config: SimConfig = SimConfig(),
    progress: ProgressCallback | None = None,
    record_holdings: bool = False,
    privacy: PrivacyStage | None = None,
) -> SimResult:
    """Run one replay and return its result (with ``record_holdings``, who held which GPUs when;
    elastic jobs: ``throughputs`` is not used, their model is; ``privacy``: the stage that
    grants the jobs' privacy claims, a fresh one per replay)."""
    if jobs.elastic is not None and privacy is not None:
        raise ValueError("elastic jobs cannot claim privacy budget (yet): replay them without blocks")
    if jobs.elastic is not None:
        from apportion.sim.elastic import ElasticSimulator  # imported only for elastic jobs, as before

        return ElasticSimulator(jobs, cluster, policy, config, progress).run()
    if config.learn_models:
        raise ValueError("learning models online applies to elastic jobs only; this workload has none")
    return Simulator(jobs, cluster, throughputs, policy, config, progress, record_holdings, privacy=privacy).run()
