"""One simulation experiment from user-level settings: load inputs, build the policy, run.

Shared by the command line and the benchmarks, so both replay exactly the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Sequence
from typing import TYPE_CHECKING

from apportion.core.cluster import Cluster
from apportion.perf.accelerators import ACCELERATORS, ALIASES
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.market import Market
from apportion.core.throughputs import ThroughputTable
from apportion.policies import Policy, registry
from apportion.sim import SimConfig, SimResult, simulate
from apportion.sim.privacy import PrivacySetup
from apportion.sim.simulator import ProgressCallback
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.cluster_file import load_cluster
from apportion.workloads.defaults import DEFAULT_CLUSTER, DEFAULT_RATE_PER_HOUR, DEFAULT_SYNTHETIC_JOBS
from apportion.workloads.gavel_throughputs import read_gavel_throughputs
from apportion.workloads.plugin_readers import plugin_reader, read_with_plugin
from apportion.workloads.synthetic import generate_workload
from apportion.workloads.trace_csv import read_workload_with_models

if TYPE_CHECKING:
    from apportion.sim.rented import RentalConfig


@dataclass(frozen=True)
class Inputs:
    jobs: JobTable
    cluster: Cluster
    throughputs: ThroughputTable
    workload_name: str
    privacy: PrivacySetup | None = None  # the jobs' privacy claims on blocks, and the policy granting them


@dataclass(frozen=True)
class WorkloadSettings:
    path: str | None = None  # a Philly-style CSV; None means the seeded synthetic workload
    jobs: int | None = None  # synthetic: how many; CSV: keep the first N
    rate_per_hour: float = DEFAULT_RATE_PER_HOUR
    seed: int = 0
    start_s: float | None = None
    end_s: float | None = None
    reference_gpu_type: str = "v100"
    cluster: str = DEFAULT_CLUSTER
    throughputs_path: str | None = None
    shape: str = "philly"  # synthetic: "philly", "gavel", "gavel-1gpu" or "pollux" (apportion.workloads.synthetic)
    blocks_path: str | None = None  # privacy blocks (workloads/privacy_files.py); the trace's rows claim them
    privacy_policy: str = "dpf-n"  # how claims are granted (mechanism/privacy_policies.py)
    privacy_n: int | None = None  # unlock a block over this many claims
    privacy_t_s: float | None = None  # unlock a block over this many seconds
    privacy_timeout_s: float | None = None  # reject a claim not granted within this long
    privacy_decide: str = "arrival"  # ask claims at each arrival, or once per GPU round ("round")
    privacy_rejected_portions: str = "lost"  # round robin: a rejected claim's portions "lost" or "returned"
    trace_format: str | None = None  # how to read path (workloads/trace_formats.py); None: told by its content


def load_inputs(settings: WorkloadSettings) -> Inputs:
    """Read (or generate) the workload, the cluster and the throughputs; InputError on bad input."""
    cluster = with_list_prices(load_cluster(settings.cluster))
    throughputs = builtin_throughputs()
    if settings.throughputs_path:
        throughputs = throughputs.merged_with(read_gavel_throughputs(settings.throughputs_path))
    unknown = [t for t in cluster.gpu_types if t not in throughputs.gpu_types]
    if unknown:
        raise InputError(
            settings.cluster,
            f"GPU type '{unknown[0]}' has no throughputs (known: {', '.join(throughputs.gpu_types)};"
            " add one with --throughputs)",
        )
    if settings.path:
        def read(path: str, table: ThroughputTable = throughputs) -> tuple[JobTable, ThroughputTable]:
            return read_workload_with_models(
                path,
                throughputs=table,
                reference_gpu_type=settings.reference_gpu_type,
                seed=settings.seed,
                max_jobs=settings.jobs,
                start_s=settings.start_s,
                end_s=settings.end_s,
                trace_format=settings.trace_format,
            )

        plugin = plugin_reader(settings.path)  # READER:PATH, a reader from outside apportion
        jobs, throughputs = read(settings.path) if plugin is None else read_with_plugin(*plugin, read)
        name = settings.path
    else:
        count = settings.jobs if settings.jobs is not None else DEFAULT_SYNTHETIC_JOBS
        jobs = generate_workload(
            jobs=count,
            rate_per_hour=settings.rate_per_hour,
            throughputs=throughputs,
            reference_gpu_type=settings.reference_gpu_type,
            seed=settings.seed,
            shape=settings.shape,
        )
        shape = "" if settings.shape == "philly" else f" {settings.shape}"
        name = f"synthetic{shape} ({count} jobs, {settings.rate_per_hour:g}/h, seed {settings.seed})"
    if jobs.elastic is not None:
        missing = [t for t in cluster.gpu_types if t not in jobs.elastic.kinds.gpu_types]
        if missing:
            raise InputError(settings.cluster, f"GPU type '{missing[0]}' has no elastic job model "
                             f"(known: {', '.join(jobs.elastic.kinds.gpu_types)})")
    return Inputs(jobs, cluster, throughputs, name, _privacy(settings, jobs))


def _privacy(settings: WorkloadSettings, jobs: JobTable) -> PrivacySetup | None:
    """The privacy setup when a block file is given: its blocks, the trace's claims on them, the policy."""
    from apportion.workloads.privacy_files import read_blocks, read_claims

    if settings.blocks_path is None:
        return None
    if not settings.path:
        raise InputError(settings.blocks_path, "privacy blocks need a trace whose rows claim them (--workload)")
    if jobs.elastic is not None:
        raise InputError(settings.path, "elastic jobs cannot claim privacy budget (yet)")
    blocks = read_blocks(settings.blocks_path)
    setup = PrivacySetup(blocks, read_claims(settings.path, jobs, blocks), settings.privacy_policy,
                         settings.privacy_n, settings.privacy_t_s, settings.privacy_timeout_s,
                         settings.privacy_decide, settings.privacy_rejected_portions)
    setup.stage()  # a policy that cannot take these blocks says so now
    return setup


def with_list_prices(cluster: Cluster) -> Cluster:
    """The cluster with each unpriced GPU type given its catalog list price, where there is one."""
    groups = []
    for group in cluster.groups:
        if group.price_per_gpu_hour == group.price_per_gpu_hour:  # priced in the cluster file
            groups.append(group)
            continue
        accelerator = ACCELERATORS.get(ALIASES.get(group.gpu_type, group.gpu_type))
        price = accelerator.price_per_hour if accelerator and accelerator.price_per_hour else float("nan")
        groups.append(replace(group, price_per_gpu_hour=price))
    return Cluster(tuple(groups))


SYNTHETIC_MARKET = "synthetic"


def load_market(source: str | Sequence[str], throughputs: ThroughputTable, seed: int = 0, days: float | None = None,
                start: str | None = None, interruption_rates: str | None = None) -> Market:
    """The market in ``source``: files or directories (AWS's spot price history JSON or the CSV format,
    merged; ``start`` its time 0, ``interruption_rates`` a file of AWS's rates for its preemptions), or
    the seeded synthetic one for ``synthetic`` (over ``days``, 60 by default); InputError for a GPU
    type no throughput covers."""
    from apportion.workloads.interruption_rates import read_interruption_rates
    from apportion.workloads.market_files import read_market
    from apportion.workloads.synthetic_market import MarketModel, synthetic_market

    sources = [source] if isinstance(source, str) else list(source)
    if SYNTHETIC_MARKET in sources:
        if len(sources) > 1:
            raise InputError("--market", "synthetic is a market of its own: give it alone, or only files")
        for name, given in (("--market-start", start), ("--interruption-rates", interruption_rates)):
            if given is not None:
                raise InputError(name, "applies to a market read from files, not to the synthetic one")
        market = synthetic_market(MarketModel(seed=seed) if days is None else MarketModel(days=days, seed=seed))
    else:
        rates = None if interruption_rates is None else read_interruption_rates(interruption_rates)
        market = read_market(sources, seed, start, rates)
    unknown = sorted(set(market.gpu_type.tolist()) - set(throughputs.gpu_types))
    if unknown:
        raise InputError(source, f"GPU type '{unknown[0]}' has no throughputs (known: "
                         f"{', '.join(throughputs.gpu_types)}; add one with --throughputs)")
    return market


def run_rented(
    inputs: Inputs,
    market: Market,
    provisioning: str,
    config: SimConfig = SimConfig(),
    rental: RentalConfig | None = None,
    *,
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Replay ``inputs``'s jobs on instances rented from ``market`` under one provisioning policy
    (``apportion.policies.provisioning.PROVISIONING``); ``inputs.cluster`` plays no part."""
    from apportion.policies.provisioning import make_provisioning  # only a rented replay loads them
    from apportion.sim.rented import RentalConfig, simulate_rented

    if inputs.jobs.elastic is not None:
        raise InputError(inputs.workload_name, "a rented cluster takes jobs of a fixed size, not elastic ones")
    if inputs.privacy is not None:
        raise InputError(inputs.workload_name, "privacy claims are not granted on a rented cluster (yet)")
    if inputs.jobs.cpu_curves is not None or config.cpu_split != "proportional":
        raise InputError(inputs.workload_name, "a rented cluster does not model CPU cores (each job rents whole "
                         "instances, their cores not known): leave out --cpu-split and the cpu_speed column")
    policy = make_provisioning(provisioning)
    result = simulate_rented(inputs.jobs, market, inputs.throughputs, policy, config, rental or RentalConfig(), progress)
    result.summary["workload"] = inputs.workload_name
    return result


def parse_policy_spec(spec: str) -> tuple[str, dict]:
    """``max-min-fairness:agnostic`` → ("max-min-fairness", {"agnostic": True}); variants combine."""
    return registry.parse_spec(spec)


def policy_from_spec(spec: str, **options) -> Policy:
    """``las``, ``max-min-fairness:agnostic`` or ``max-min-fairness:space-sharing`` → a fresh policy.

    ``options`` are the policy's (agnostic, partitions, slo, water_filling, space_sharing, queues, …:
    see apportion.policies.registry); its ``name`` is the spec with every variant asked for.
    """
    return registry.make_policy(spec, **options)


def check_policy_specs(specs: list[str], **options) -> None:
    """Raise ValueError naming the first unknown policy or misapplied option before any work starts."""
    registry.check_specs(specs, **options)


def run_policy(
    inputs: Inputs,
    policy_spec: str,
    config: SimConfig = SimConfig(),
    *,
    progress: ProgressCallback | None = None,
    record_holdings: bool = False,
    **options,
) -> SimResult:
    """Replay ``inputs`` under one policy; ``options`` as for policy_from_spec. ``record_holdings``
    keeps who held which GPUs when (``SimResult.holdings``: what report.html's Gantt chart draws).

    A policy that weighs moves against their cost (``restart_cost_s``: fifo, srtf, las) is
    told the mechanism's, unless ``options`` name another.
    """
    if registry.policy_info(policy_spec).option("restart_cost_s") and options.get("restart_cost_s") is None:
        options = {**options, "restart_cost_s": config.restart_cost_s}
    policy = policy_from_spec(policy_spec, **options)
    privacy = None if inputs.privacy is None else inputs.privacy.stage()
    result = simulate(inputs.jobs, inputs.cluster, inputs.throughputs, policy, config, progress, record_holdings,
                      privacy=privacy)
    result.summary["workload"] = inputs.workload_name
    if options.get("partitions", 1) > 1:
        result.summary["partitions"] = options["partitions"]
    return result


__all__ = [
    "Inputs",
    "WorkloadSettings",
    "check_policy_specs",
    "load_inputs",
    "load_market",
    "parse_policy_spec",
    "policy_from_spec",
    "run_policy",
    "run_rented",
]
