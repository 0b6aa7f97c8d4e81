"""`apportion sweep`: policies over a grid of loads, seeds and clusters, each metric's mean with a 95% interval."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.inputs import check_cpu_split, prepare_replay, with_privacy, workload_settings
from apportion.cli.output import console, escape, fail, out_dir_problem, print_json, print_table, print_wrote, progress_bar
from apportion.stdio import stdout_to_stderr

DEFAULT_RATES = "4,8,12"


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
    workers: int = typer.Option(0, "--workers", help="Local processes (default: one a CPU).", rich_help_panel="Running"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run each replay as a Ray task on this cluster instead (auto: the one started on this machine); every node needs apportion and the input files (docs/ray.md).", rich_help_panel="Running"),
    out: Optional[Path] = opt.Out,
    as_json: bool = opt.json_option("the grid, the means with their intervals and every replay", "Output"),
) -> None:
    """Replay each policy over a grid of loads, seeds and clusters; report each metric's mean over
    the seeds with a 95% confidence interval, and plot it against the load (--out)."""
    from dataclasses import replace

    from apportion.sweep import grid, metrics_of, run_grid, summarize

    specs = [p.strip() for p in policies.split(",") if p.strip()]
    if not specs:
        raise fail("--policies is empty")
    if workload and rates is not None:
        raise fail("--rates applies to the synthetic workload only: a trace has its own arrival times")
    loads = _numbers(rates or DEFAULT_RATES, "--rates", float)
    if any(r <= 0 for r in loads):
        raise fail(f"--rates must be positive, got {rates!r}")
    seed_list = _seeds(seeds)
    cluster_list = [c.strip() for c in (clusters or cluster).split(";") if c.strip()]
    if not cluster_list:
        raise fail("--clusters is empty")
    if workers < 0:
        raise fail(f"--workers must be >= 0, got {workers}")
    problem = None if out is None else out_dir_problem(out)
    if problem is not None:
        raise fail(f"--out: {problem}")
    check_cpu_split(cpu_split)
    with stdout_to_stderr():
        def settings_on(each: str):
            return with_privacy(workload_settings(workload, each, jobs, loads[0], seed_list[0], None, None, throughputs,
                                                  reference_gpu_type, shape, trace_format),
                                blocks, privacy_policy, privacy_n, privacy_t, privacy_timeout_s)

        base = settings_on(cluster_list[0])
        policy_options = opt.policy_options(ctx)
        for each in cluster_list:  # every cluster and policy is checked before any replay starts
            _, config, options = prepare_replay(specs, policy_options, settings_on(each), round_s, restart_cost_s,
                                                learn_models)
        config = replace(config, cpu_split=cpu_split)
        cells = grid(specs, loads, seed_list, cluster_list)
        with progress_bar(as_json, what="replays done", virtual_time=False) as bar:
            task = bar.add_task(f"{len(cells)} replays", total=len(cells), day=0.0)
            try:
                rows = run_grid(cells, base, config, workers=workers, ray_address=ray_address,
                                progress=lambda done, total: bar.update(task, completed=done), **options)
            except (ValueError, OSError) as exc:
                raise fail(str(exc)) from None
        metrics = metrics_of(rows)
        summary = summarize(rows, metrics)
    shown = [m for m in metrics if m not in ("completed", "preemptions")]
    description = {"policies": specs, "rates_per_hour": loads, "seeds": seed_list, "clusters": cluster_list,
                   "jobs": jobs, "workload": workload or f"synthetic {shape}", "ran_on": ray_address or "local",
                   "cpu_split": cpu_split, "blocks": blocks}
    if as_json:
        print_json({"grid": description, "summary": summary, "cells": rows})
    else:
        console.print(f"{len(cells)} replays: {len(specs)} policies × {len(loads)} loads × {len(seed_list)} seeds"
                      + (f" × {len(cluster_list)} clusters" if len(cluster_list) > 1 else f" on {escape(cluster_list[0])}"),
                      highlight=False)
        from apportion.report.sweep import sweep_table

        print_table(sweep_table(summary, shown))
    if out is not None:
        from apportion.report.sweep import write_sweep

        with stdout_to_stderr():
            paths = write_sweep(rows, summary, description, out)
        print_wrote(paths, as_json)


def _numbers(text: str, option: str, kind) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise fail(f"{option} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise fail(f"{option} is empty")
    return values


def _seeds(text: str) -> list[int]:
    """``0-4`` → [0, 1, 2, 3, 4]; ``1,5,7`` → [1, 5, 7]."""
    low, dash, high = text.partition("-")
    if dash and low.strip().isdigit() and high.strip().isdigit():
        if int(high) < int(low):
            raise fail(f"--seeds: {text!r} is an empty range")
        return list(range(int(low), int(high) + 1))
    return _numbers(text, "--seeds", int)
