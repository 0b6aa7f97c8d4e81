"""`apportion simulate`, `compare` and `kinds`: replays of a workload on a cluster on paper."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.inputs import (
    check_cpu_split, preemptions_line, prepare_replay, rented_options, rented_setup, with_privacy, workload_settings,
)
from apportion.cli.output import (
    console, escape, fail, out_dir_problem, print_json, print_line, print_table, print_wrote, progress_bar,
)
from apportion.stdio import stdout_to_stderr


def simulate(
    ctx: typer.Context,
    workload: Optional[str] = opt.Workload,
    trace_format: Optional[str] = opt.TraceFormat,
    cluster: str = opt.Cluster,
    policy: str = typer.Option("max-min-fairness", "--policy", "-p", help=f"One of: {opt.POLICY_NAMES} (NAME:agnostic for the heterogeneity-agnostic variant, NAME:space-sharing to share GPUs).", rich_help_panel="Policy options"),
    out: Optional[Path] = opt.Out,
    jobs: Optional[int] = opt.Jobs,
    rate: float = opt.Rate,
    seed: int = opt.Seed,
    shape: str = opt.Shape,
    start_s: Optional[float] = opt.Start,
    end_s: Optional[float] = opt.End,
    throughputs: Optional[str] = opt.Throughputs,
    reference_gpu_type: str = opt.Reference,
    round_s: float = opt.SimRound,
    restart_cost_s: float = opt.RestartCost,
    learn_models: bool = opt.LearnModels,
    cpu_split: str = opt.CpuSplit,
    blocks: Optional[str] = opt.Blocks,
    privacy_policy: str = opt.PrivacyPolicyName,
    privacy_n: Optional[int] = opt.PrivacyN,
    privacy_t: Optional[float] = opt.PrivacyT,
    privacy_timeout_s: Optional[float] = opt.PrivacyTimeout,
    received_since: Optional[str] = typer.Option(None, "--received-since", help="Where the received share the round ranks jobs by counts from: allocation (its last change, Gavel's rule; the default) or arrival (each job's).", rich_help_panel="Mechanism"),
    share_by_user: bool = typer.Option(False, "--share-by-user", help="Divide the cluster among the workload's users first (each active user an equal share, or by --user-weights), then run the policy per user, as apportion serve does by default.", rich_help_panel="Mechanism"),
    user_weights: Optional[str] = typer.Option(None, "--user-weights", help="With --share-by-user: USER=WEIGHT,.. each user's share, relative (alice=2,bob=1; others 1).", rich_help_panel="Mechanism"),
    market: Optional[list[str]] = opt.Market,
    market_start: Optional[str] = opt.MarketStart,
    interruption_rates: Optional[str] = opt.InterruptionRates,
    provisioning: str = typer.Option("static", "--provisioning", help=f"With --market, which instances each job rents: one of {', '.join(opt.PROVISIONING_NAMES)} (docs/cloud.md).", rich_help_panel="Rented cluster"),
    checkpoint_gb: float = opt.CheckpointGb,
    as_json: bool = opt.json_option("the summary", "Output"),
) -> None:
    """Replay a workload on a cluster under one policy and summarise it.

    With no options: a seeded synthetic workload on a small heterogeneous cluster. With --market:
    on instances each job rents from a market, as --provisioning chooses them (docs/cloud.md).
    """
    from apportion.experiment import run_policy, run_rented
    from apportion.mechanism.received import RECEIVED_SINCE

    _check_out(out)
    rented_options(market, market_start, interruption_rates)
    check_cpu_split(cpu_split)
    if received_since is not None and received_since not in RECEIVED_SINCE:
        raise fail(f"--received-since must be one of {', '.join(RECEIVED_SINCE)}, got '{received_since}'")
    weights = _user_weights(share_by_user, user_weights)
    with stdout_to_stderr():
        inputs, config, options = prepare_replay(
            [policy], opt.policy_options(ctx),
            with_privacy(workload_settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs,
                                           reference_gpu_type, shape, trace_format),
                         blocks, privacy_policy, privacy_n, privacy_t, privacy_timeout_s),
            round_s, restart_cost_s, learn_models,
        )
        config = replace(config, cpu_split=cpu_split)
        if received_since is not None:
            config = replace(config, received_since=received_since)
        if share_by_user:
            config = replace(config, share_by_user=True, user_weights=weights)
        rented = None if not market else rented_setup(market, [provisioning], checkpoint_gb, inputs, seed, market_start,
                                                      interruption_rates)
        with progress_bar(as_json) as bar:
            task = bar.add_task(policy if rented is None else provisioning, total=len(inputs.jobs), day=0.0)

            def report(ended: int, total: int, now_s: float) -> None:
                bar.update(task, completed=ended, day=now_s / 86400)

            try:
                if rented is None:
                    result = run_policy(inputs, policy, config, progress=report, record_holdings=out is not None,
                                        **options)
                else:
                    result = run_rented(inputs, *rented[:1], provisioning, config, rented[1], progress=report)
            except ValueError as exc:  # a policy that cannot work on these inputs, e.g. min-cost without prices
                raise fail(str(exc)) from None
    if as_json:
        print_json(result.summary)
    else:
        from apportion.report.tables import summary_table, unschedulable_lines

        console.print(f"[bold]{escape(result.policy)}[/]: {escape(inputs.workload_name)} on "
                      f"{escape(result.summary['cluster'] if rented else inputs.cluster.describe())}", highlight=False)
        print_table(summary_table([result.summary]))
        for line in unschedulable_lines(result):
            print_line(line)
        if preemptions_line(result):
            print_line(preemptions_line(result))
    if out is not None:
        from apportion.report.outputs import write_run

        with stdout_to_stderr():
            paths = write_run(result, out)
        print_wrote(paths, as_json)


def compare(
    ctx: typer.Context,
    policies: str = typer.Option("fifo,las,max-min-fairness", "--policies", help=f"Comma-separated, of: {opt.POLICY_NAMES} (NAME:agnostic and NAME:space-sharing for the variants).", rich_help_panel="Policy options"),
    workload: Optional[str] = opt.Workload,
    trace_format: Optional[str] = opt.TraceFormat,
    cluster: str = opt.Cluster,
    out: Optional[Path] = opt.Out,
    jobs: Optional[int] = opt.Jobs,
    rate: float = opt.Rate,
    seed: int = opt.Seed,
    shape: str = opt.Shape,
    start_s: Optional[float] = opt.Start,
    end_s: Optional[float] = opt.End,
    throughputs: Optional[str] = opt.Throughputs,
    reference_gpu_type: str = opt.Reference,
    round_s: float = opt.SimRound,
    restart_cost_s: float = opt.RestartCost,
    learn_models: bool = opt.LearnModels,
    cpu_split: str = opt.CpuSplit,
    blocks: Optional[str] = opt.Blocks,
    privacy_policy: str = opt.PrivacyPolicyName,
    privacy_n: Optional[int] = opt.PrivacyN,
    privacy_t: Optional[float] = opt.PrivacyT,
    privacy_timeout_s: Optional[float] = opt.PrivacyTimeout,
    workers: int = typer.Option(0, "--workers", help="Parallel processes (default: one per policy, at most the CPU count).", rich_help_panel="Output"),
    market: Optional[list[str]] = opt.Market,
    market_start: Optional[str] = opt.MarketStart,
    interruption_rates: Optional[str] = opt.InterruptionRates,
    provisioning: str = typer.Option(",".join(opt.PROVISIONING_NAMES), "--provisioning", help=f"With --market, comma-separated, of: {', '.join(opt.PROVISIONING_NAMES)} (compared in place of --policies).", rich_help_panel="Rented cluster"),
    checkpoint_gb: float = opt.CheckpointGb,
    as_json: bool = opt.json_option("the summaries", "Output"),
) -> None:
    """Run several policies on the same workload and print them side by side.

    With --market: the provisioning policies, each job renting its instances from the market."""
    from apportion.compare import run_policies
    from apportion.experiment import run_rented

    specs = [p.strip() for p in policies.split(",") if p.strip()]
    if not specs:
        raise fail("--policies is empty")
    rented_specs = [p.strip() for p in provisioning.split(",") if p.strip()]
    if market and not rented_specs:
        raise fail("--provisioning is empty")
    _check_out(out)
    rented_options(market, market_start, interruption_rates)
    check_cpu_split(cpu_split)
    with stdout_to_stderr():
        inputs, config, options = prepare_replay(
            specs, opt.policy_options(ctx),
            with_privacy(workload_settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs,
                                           reference_gpu_type, shape, trace_format),
                         blocks, privacy_policy, privacy_n, privacy_t, privacy_timeout_s),
            round_s, restart_cost_s, learn_models,
        )
        rented = None if not market else rented_setup(market, rented_specs, checkpoint_gb, inputs, seed, market_start,
                                                      interruption_rates)
        shown = specs if rented is None else rented_specs
        config = replace(config, cpu_split=cpu_split)
        with progress_bar(as_json) as bar:
            tasks = {spec: bar.add_task(spec, total=len(inputs.jobs), day=0.0) for spec in shown}

            def report(spec: str, ended: int, total: int, now_s: float) -> None:
                bar.update(tasks[spec], completed=ended, day=now_s / 86400)

            try:
                if rented is None:
                    results = run_policies(inputs, specs, config, workers=workers, progress=report,
                                           record_holdings=out is not None, **options)
                else:  # a rented replay takes seconds: one after another, in this process
                    results = [run_rented(inputs, rented[0], spec, config, rented[1],
                                          progress=lambda ended, total, now_s, spec=spec: report(spec, ended, total, now_s))
                               for spec in rented_specs]
            except ValueError as exc:
                raise fail(str(exc)) from None
    summaries = [r.summary for r in results]
    if as_json:
        print_json({"policies": summaries})
    else:
        from apportion.report.tables import summary_table, unschedulable_lines

        where = results[0].summary["cluster"] if rented else inputs.cluster.describe()
        console.print(f"{escape(inputs.workload_name)} on {escape(where)}", highlight=False)
        print_table(summary_table(summaries))
        for result in results:
            for line in unschedulable_lines(result):
                print_line(line)
        if preemptions_line(results[0]):
            print_line(preemptions_line(results[0]))
    if out is not None:
        from apportion.report.outputs import write_comparison

        with stdout_to_stderr():
            paths = write_comparison(results, out)
        print_wrote(paths, as_json)


def kinds() -> None:
    """List the built-in job kinds and their steps/s on each GPU type (1 GPU)."""
    from rich.table import Table

    from apportion.workloads.catalog import builtin_throughputs

    with stdout_to_stderr():
        table = builtin_throughputs()
    view = Table(title="built-in job kinds: steps/s on one GPU", header_style="bold")
    view.add_column("kind")
    for gpu in table.gpu_types:
        view.add_column(gpu, justify="right")
    for k, kind in enumerate(table.kinds):
        view.add_row(escape(kind), *(f"{v:.2f}" if v == v else "—" for v in table.steps_per_s[k, :, 0]))
    print_table(view)
    console.print("k80/p100/v100: Gavel's measurements; t4/a100/h100: roofline prediction (docs/throughputs.md).")


def _check_out(out: Optional[Path]) -> None:
    """Refuse an ``--out`` that cannot be written before the replay, not after it."""
    problem = None if out is None else out_dir_problem(out)
    if problem is not None:
        raise fail(f"--out: {problem}")


def _user_weights(share_by_user: bool, text: str | None) -> tuple[tuple[str, float], ...]:
    """--user-weights as (user, weight) pairs; a one-line error when it is malformed or given alone."""
    if text is None:
        return ()
    if not share_by_user:
        raise fail("--user-weights needs --share-by-user")
    from apportion.policies.by_user import parse_user_weights

    try:
        return tuple(parse_user_weights(text).items())
    except ValueError as exc:
        raise fail(f"--user-weights: {exc}") from None
