"""`apportion simulate`, `compare` and `kinds`: replays of a workload on a cluster on paper."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.flow import replay_command
from apportion.cli.inputs import checked, keywords_of, market_notes, preemptions_line
from apportion.cli.output import console, escape, print_line, print_table
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
    privacy_decide: str = opt.PrivacyDecide,
    privacy_rejected_portions: str = opt.PrivacyRejectedPortions,
    received_since: Optional[str] = typer.Option(None, "--received-since", help="Where the received share the round ranks jobs by counts from: allocation (its last change, Gavel's rule; the default) or arrival (each job's).", rich_help_panel="Mechanism"),
    share_by_user: bool = typer.Option(False, "--share-by-user", help="Divide the cluster among the workload's users first (each active user an equal share, or by --user-weights), then run the policy per user, as apportion serve does by default.", rich_help_panel="Mechanism"),
    user_weights: Optional[str] = typer.Option(None, "--user-weights", help="With --share-by-user: USER=WEIGHT,.. each user's share, relative (alice=2,bob=1; others 1).", rich_help_panel="Mechanism"),
    market: Optional[list[str]] = opt.Market,
    market_start: Optional[str] = opt.MarketStart,
    interruption_rates: Optional[str] = opt.InterruptionRates,
    provisioning: str = typer.Option("static", "--provisioning", help=f"With --market, which instances each job rents: one of {', '.join(opt.PROVISIONING_NAMES)} (docs/cloud.md), or a plugin (docs/policies.md).", rich_help_panel="Rented cluster"),
    checkpoint_gb: float = opt.CheckpointGb,
    as_json: bool = opt.json_option("the summary", "Output"),
) -> None:
    """Replay a workload on a cluster under one policy and summarise it.

    With no options: a seeded synthetic workload on a small heterogeneous cluster. With --market:
    on instances each job rents from a market, as --provisioning chooses them (docs/cloud.md).
    """
    given = dict(locals())  # every option, by name: what replay_arguments takes of them is passed on
    from apportion.arguments import replay_arguments, run

    def prepare():
        replay = replay_arguments([policy], opt.given_policy_options(ctx),
                                  **{**keywords_of(replay_arguments, given), "provisioning": [provisioning]})
        market_notes(replay)
        return replay

    def shown(replay) -> str:
        return provisioning if replay.market is not None else policy

    def work(replay, progress):
        result, = run(replay, [shown(replay)], progress=progress.jobs_ended, record_holdings=out is not None)
        return result

    def write(replay, result, out: Path) -> list:
        from apportion.report.outputs import write_run

        return write_run(result, out)

    replay_command(out=out, as_json=as_json, prepare=prepare,
                   tasks=lambda replay: {shown(replay): len(replay.inputs.jobs)}, work=work,
                   to_json=lambda replay, result: result.summary,
                   show=lambda replay, result: _show(replay, [result], f"[bold]{escape(result.policy)}[/]: "),
                   write=write)


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
    privacy_decide: str = opt.PrivacyDecide,
    privacy_rejected_portions: str = opt.PrivacyRejectedPortions,
    workers: int = typer.Option(0, "--workers", help="Parallel processes (default: one per policy, at most the CPU count).", rich_help_panel="Output"),
    market: Optional[list[str]] = opt.Market,
    market_start: Optional[str] = opt.MarketStart,
    interruption_rates: Optional[str] = opt.InterruptionRates,
    provisioning: str = typer.Option(",".join(opt.PROVISIONING_NAMES), "--provisioning", help=f"With --market, comma-separated, of: {', '.join(opt.PROVISIONING_NAMES)} or plugins (compared in place of --policies).", rich_help_panel="Rented cluster"),
    checkpoint_gb: float = opt.CheckpointGb,
    as_json: bool = opt.json_option("the summaries", "Output"),
) -> None:
    """Run several policies on the same workload and print them side by side.

    With --market: the provisioning policies, each job renting its instances from the market."""
    given = dict(locals())  # every option, by name: what replay_arguments takes of them is passed on
    from apportion.arguments import names, replay_arguments, run

    specs = checked(names, policies, "policies")
    rented_specs = checked(names, provisioning, "provisioning") if market else []

    def prepare():
        replay = replay_arguments(specs, opt.given_policy_options(ctx),
                                  **{**keywords_of(replay_arguments, given), "provisioning": rented_specs})
        market_notes(replay)
        return replay

    def shown(replay) -> list[str]:
        return rented_specs if replay.market is not None else specs

    def work(replay, progress):
        return run(replay, shown(replay), workers=workers, progress=progress.jobs_ended,
                   record_holdings=out is not None)

    def write(replay, results, out: Path) -> list:
        from apportion.report.outputs import write_comparison

        return write_comparison(results, out)

    replay_command(out=out, as_json=as_json, prepare=prepare,
                   tasks=lambda replay: {spec: len(replay.inputs.jobs) for spec in shown(replay)}, work=work,
                   to_json=lambda replay, results: {"policies": [r.summary for r in results]}, show=_show, write=write)


def _show(replay, results, title: str = "") -> None:
    """The replays' summaries side by side under ``title`` (markup), the workload and where it ran;
    then the jobs no policy could place and where a rented run's spot preemptions came from."""
    from apportion.report.tables import summary_table, unschedulable_lines

    where = results[0].summary["cluster"] if replay.market is not None else replay.inputs.cluster.describe()
    console.print(f"{title}{escape(replay.inputs.workload_name)} on {escape(where)}", highlight=False)
    print_table(summary_table([r.summary for r in results]))
    for result in results:
        for line in unschedulable_lines(result):
            print_line(line)
    if preemptions_line(results[0]):
        print_line(preemptions_line(results[0]))


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
