"""``apportion.simulate``, ``compare`` and ``sweep``: the commands, from Python (a notebook).

Each takes its command's arguments, by the same names (the flag's, in snake_case: ``trace_format``
reads ``workload`` as ``--trace-format`` does) and with the same defaults, and the policy options as
keywords (``agnostic=True``, ``queues="queues.yaml"``); a list may be given where the command
takes comma-separated text. The arguments go through ``apportion.arguments``, as the command
line's do, so a bad one is an ``ArgumentError`` with the command's message, naming the argument
by its keyword. ``out`` writes the files the command writes. The results (``apportion.results``)
hold the replays, give their jobs, timeline and summary as pandas DataFrames, and show
report.html inline in Jupyter::

    import apportion
    run = apportion.simulate(jobs=100)
    run.summary
    apportion.compare(policies=["fifo", "las"], jobs=100)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from apportion.arguments import check_out, market_sources, names, replay_arguments, run, run_sweep, sweep_arguments
from apportion.results import Comparison, Run, Sweep
from apportion.workloads.defaults import DEFAULT_CLUSTER, DEFAULT_RATE_PER_HOUR

DEFAULT_POLICIES = "fifo,las,max-min-fairness"
DEFAULT_PROVISIONING = "static,cheapest-now,cheapest-now:daily,spot-fallback,deadline-aware"


def simulate(
    workload: str | Path | None = None,
    cluster: str | Path = DEFAULT_CLUSTER,
    policy: str = "max-min-fairness",
    out: str | Path | None = None,
    jobs: int | None = None,
    rate: float = DEFAULT_RATE_PER_HOUR,
    seed: int = 0,
    shape: str = "philly",
    start_s: float | None = None,
    end_s: float | None = None,
    throughputs: str | Path | None = None,
    reference_gpu_type: str = "v100",
    round_s: float = 360.0,
    restart_cost_s: float = 10.0,
    learn_models: bool = False,
    cpu_split: str = "proportional",
    blocks: str | Path | None = None,
    privacy_policy: str = "dpf-n",
    privacy_n: int | None = None,
    privacy_t: float | None = None,
    privacy_timeout_s: float | None = None,
    privacy_decide: str = "arrival",
    privacy_rejected_portions: str = "lost",
    received_since: str | None = None,
    share_by_user: bool = False,
    user_weights: str | None = None,
    market: str | Path | Sequence[str | Path] | None = None,
    market_start: str | None = None,
    interruption_rates: str | Path | None = None,
    provisioning: str = "static",
    checkpoint_gb: float = 10.0,
    trace_format: str | None = None,
    **policy_options,
) -> Run:
    """Replay a workload on a cluster under one policy (``apportion simulate``).

    With no arguments: a seeded synthetic workload on a small heterogeneous cluster. With
    ``market`` (a file, a directory, several of them merged, or ``"synthetic"``): on instances each
    job rents from it, as ``provisioning`` chooses them.
    """
    check_out(out)
    replay = replay_arguments(
        [policy], policy_options, workload=workload, cluster=cluster, jobs=jobs, rate=rate, seed=seed, shape=shape,
        start_s=start_s, end_s=end_s, throughputs=throughputs, reference_gpu_type=reference_gpu_type,
        round_s=round_s, restart_cost_s=restart_cost_s, learn_models=learn_models, cpu_split=cpu_split,
        blocks=blocks, privacy_policy=privacy_policy, privacy_n=privacy_n, privacy_t=privacy_t,
        privacy_timeout_s=privacy_timeout_s, trace_format=trace_format, privacy_decide=privacy_decide,
        privacy_rejected_portions=privacy_rejected_portions, received_since=received_since, share_by_user=share_by_user,
        user_weights=user_weights, market=market, market_start=market_start, interruption_rates=interruption_rates,
        provisioning=[provisioning], checkpoint_gb=checkpoint_gb,
    )
    result, = run(replay, [policy if replay.market is None else provisioning], record_holdings=True)
    outcome = Run(result, replay.inputs.workload_name)
    if out is not None:
        outcome.write(out)
    return outcome


def compare(
    policies: str | Sequence[str] = DEFAULT_POLICIES,
    workload: str | Path | None = None,
    cluster: str | Path = DEFAULT_CLUSTER,
    out: str | Path | None = None,
    jobs: int | None = None,
    rate: float = DEFAULT_RATE_PER_HOUR,
    seed: int = 0,
    shape: str = "philly",
    start_s: float | None = None,
    end_s: float | None = None,
    throughputs: str | Path | None = None,
    reference_gpu_type: str = "v100",
    round_s: float = 360.0,
    restart_cost_s: float = 10.0,
    learn_models: bool = False,
    cpu_split: str = "proportional",
    blocks: str | Path | None = None,
    privacy_policy: str = "dpf-n",
    privacy_n: int | None = None,
    privacy_t: float | None = None,
    privacy_timeout_s: float | None = None,
    privacy_decide: str = "arrival",
    privacy_rejected_portions: str = "lost",
    workers: int = 0,
    market: str | Path | Sequence[str | Path] | None = None,
    market_start: str | None = None,
    interruption_rates: str | Path | None = None,
    provisioning: str | Sequence[str] = DEFAULT_PROVISIONING,
    checkpoint_gb: float = 10.0,
    trace_format: str | None = None,
    **policy_options,
) -> Comparison:
    """Run several policies on the same workload (``apportion compare``); with ``market``, the
    provisioning policies. ``workers``: processes, by default one a policy up to the CPU count
    (1: one after another, in this process)."""
    specs = names(policies, "policies")
    rented_specs = names(provisioning, "provisioning") if market_sources(market) else []
    check_out(out)
    replay = replay_arguments(
        specs, policy_options, workload=workload, cluster=cluster, jobs=jobs, rate=rate, seed=seed, shape=shape,
        start_s=start_s, end_s=end_s, throughputs=throughputs, reference_gpu_type=reference_gpu_type,
        round_s=round_s, restart_cost_s=restart_cost_s, learn_models=learn_models, cpu_split=cpu_split,
        blocks=blocks, privacy_policy=privacy_policy, privacy_n=privacy_n, privacy_t=privacy_t,
        privacy_timeout_s=privacy_timeout_s, trace_format=trace_format, privacy_decide=privacy_decide,
        privacy_rejected_portions=privacy_rejected_portions, market=market, market_start=market_start,
        interruption_rates=interruption_rates, provisioning=rented_specs, checkpoint_gb=checkpoint_gb,
    )
    results = run(replay, rented_specs if replay.market is not None else specs, workers=workers, record_holdings=True)
    outcome = Comparison(results, replay.inputs.workload_name)
    if out is not None:
        outcome.write(out)
    return outcome


def sweep(
    policies: str | Sequence[str] = DEFAULT_POLICIES,
    rates: str | Iterable[float] | None = None,
    seeds: str | int | Iterable[int] = "0-4",
    clusters: str | Sequence[str] | None = None,
    workload: str | Path | None = None,
    cluster: str | Path = DEFAULT_CLUSTER,
    jobs: int | None = None,
    shape: str = "philly",
    throughputs: str | Path | None = None,
    reference_gpu_type: str = "v100",
    round_s: float = 360.0,
    restart_cost_s: float = 10.0,
    learn_models: bool = False,
    cpu_split: str = "proportional",
    blocks: str | Path | None = None,
    privacy_policy: str = "dpf-n",
    privacy_n: int | None = None,
    privacy_t: float | None = None,
    privacy_timeout_s: float | None = None,
    privacy_decide: str = "arrival",
    privacy_rejected_portions: str = "lost",
    workers: int = 0,
    ray_address: str | None = None,
    out: str | Path | None = None,
    trace_format: str | None = None,
    **policy_options,
) -> Sweep:
    """Replay each policy over a grid of loads (``rates``, synthetic workload: 4,8,12 jobs/h by
    default), ``seeds`` and ``clusters`` (``apportion sweep``): each metric's mean over the seeds
    with a 95% interval. ``workers``: local processes, by default one a CPU (1: in this process)."""
    from apportion.sweep import metrics_of, summarize

    plan = sweep_arguments(
        policies, policy_options, rates=rates, seeds=seeds, clusters=clusters, workload=workload, cluster=cluster,
        jobs=jobs, shape=shape, throughputs=throughputs, reference_gpu_type=reference_gpu_type, round_s=round_s,
        restart_cost_s=restart_cost_s, learn_models=learn_models, cpu_split=cpu_split, blocks=blocks,
        privacy_policy=privacy_policy, privacy_n=privacy_n, privacy_t=privacy_t, privacy_timeout_s=privacy_timeout_s,
        privacy_decide=privacy_decide, privacy_rejected_portions=privacy_rejected_portions, trace_format=trace_format,
        workers=workers, ray_address=ray_address, out=out,
    )
    rows = run_sweep(plan, workers=workers, ray_address=ray_address)
    metrics = metrics_of(rows)
    outcome = Sweep(rows, summarize(rows, metrics), plan.description, metrics)
    if out is not None:
        outcome.write(out)
    return outcome
