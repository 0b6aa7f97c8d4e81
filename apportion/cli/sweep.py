"""`apportion sweep`: policies over a grid of loads, seeds and clusters, each metric's mean with a 95% interval."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

import typer

from apportion.cli import options as opt
from apportion.cli.flow import replay_command
from apportion.cli.inputs import keywords_of
from apportion.cli.output import console, escape, print_table


class Swept(NamedTuple):
    """What a sweep found: every replay's row, the metrics they hold, and each metric's mean and interval."""

    rows: list[dict]
    metrics: list[str]
    summary: list[dict]


def sweep(
    ctx: typer.Context,
    policies: str = typer.Option("fifo,las,max-min-fairness", "--policies", help=f"Comma-separated, of: {opt.POLICY_NAMES} (NAME:agnostic and NAME:space-sharing for the variants).", rich_help_panel="Policy options"),
    rates: Optional[str] = typer.Option(None, "--rates", help="Synthetic: the loads, in jobs per hour, comma-separated (default 4,8,12).", rich_help_panel="Grid"),
    seeds: str = typer.Option("0-4", "--seeds", help="Seeds of each point: a range (0-9) or a list (1,5,7).", rich_help_panel="Grid"),
    clusters: Optional[str] = typer.Option(None, "--clusters", help="Clusters to sweep over, separated by ';' (each a YAML file or TYPE:GPUS,...); default: --cluster.", rich_help_panel="Grid"),
    workload: Optional[str] = opt.Workload,
    trace_format: Optional[str] = opt.TraceFormat,
    cluster: str = opt.Cluster,
    jobs: Optional[int] = opt.Jobs,
    shape: str = opt.Shape,
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
    workers: int = typer.Option(0, "--workers", help="Local processes (default: one a CPU).", rich_help_panel="Running"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run each replay as a Ray task on this cluster instead (auto: the one started on this machine); every node needs apportion and the input files (docs/ray.md).", rich_help_panel="Running"),
    out: Optional[Path] = opt.Out,
    as_json: bool = opt.json_option("the grid, the means with their intervals and every replay", "Output"),
) -> None:
    """Replay each policy over a grid of loads, seeds and clusters; report each metric's mean over
    the seeds with a 95% confidence interval, and plot it against the load (--out)."""
    given = dict(locals())  # every option, by name: what sweep_arguments takes of them is passed on
    from apportion.arguments import run_sweep, sweep_arguments
    from apportion.sweep import metrics_of, summarize

    def prepare():
        return sweep_arguments(policies, opt.given_policy_options(ctx), **keywords_of(sweep_arguments, given))

    def replays(plan) -> str:
        return f"{len(plan.cells)} replays"

    def work(plan, progress) -> list[dict]:
        return run_sweep(plan, workers=workers, ray_address=ray_address,
                         progress=lambda done, total: progress.update(replays(plan), completed=done))

    def digest(plan, rows: list[dict]) -> Swept:
        metrics = metrics_of(rows)
        return Swept(rows, metrics, summarize(rows, metrics))

    def show(plan, swept) -> None:
        from apportion.report.sweep import sweep_table

        description = plan.description
        specs, loads, seed_list = description["policies"], description["rates_per_hour"], description["seeds"]
        cluster_list = description["clusters"]
        console.print(f"{replays(plan)}: {len(specs)} policies × {len(loads)} loads × {len(seed_list)} seeds"
                      + (f" × {len(cluster_list)} clusters" if len(cluster_list) > 1 else f" on {escape(cluster_list[0])}"),
                      highlight=False)
        print_table(sweep_table(swept.summary, [m for m in swept.metrics if m not in ("completed", "preemptions")]))

    def write(plan, swept, out: Path) -> list:
        from apportion.report.sweep import write_sweep

        return write_sweep(swept.rows, swept.summary, plan.description, out)

    replay_command(out=out, as_json=as_json, prepare=prepare, tasks=lambda plan: {replays(plan): len(plan.cells)},
                   work=work,
                   to_json=lambda plan, swept: {"grid": plan.description, "summary": swept.summary, "cells": swept.rows},
                   show=show, write=write, digest=digest, what="replays done", virtual_time=False, check_out=False)
