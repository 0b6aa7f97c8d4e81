"""The ``apportion`` command: parse, call the library, print. Nothing else lives here."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from apportion.core.errors import InputError
from apportion.experiment import (
    DEFAULT_CLUSTER,
    DEFAULT_RATE_PER_HOUR,
    Inputs,
    WorkloadSettings,
    check_policy_specs,
    load_inputs,
    run_policy,
)
from apportion.policies import POLICIES
from apportion.report import summary_table, write_comparison, write_run
from apportion.sim import SimConfig

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Share a cluster of accelerators among deep-learning training jobs.",
)
console = Console()
errors = Console(stderr=True)

WorkloadOpt = typer.Option(None, "--workload", "-w", help="Philly-style CSV (.csv or .csv.gz); default: a seeded synthetic workload.")
ClusterOpt = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="YAML file, or TYPE:GPUS[:GPUS_PER_NODE],... (4 GPUs a node by default).")
JobsOpt = typer.Option(None, "--jobs", "-n", help="Synthetic: how many jobs (default 400). CSV: keep the first N.")
RateOpt = typer.Option(DEFAULT_RATE_PER_HOUR, "--rate", help="Synthetic: Poisson arrivals, jobs per hour.")
SeedOpt = typer.Option(0, "--seed", help="Seed for the synthetic workload and for job kinds given to trace rows.")
StartOpt = typer.Option(None, "--start-s", help="CSV: keep jobs submitted at or after this second.")
EndOpt = typer.Option(None, "--end-s", help="CSV: keep jobs submitted before this second.")
ThroughputsOpt = typer.Option(None, "--throughputs", help="Gavel-format throughput JSON laid on top of the built-in catalog.")
ReferenceOpt = typer.Option("v100", "--reference-gpu-type", help="CSV: a trace duration is this long on this GPU type.")
RoundOpt = typer.Option(360.0, "--round-s", help="Round length in seconds.")
RestartOpt = typer.Option(10.0, "--restart-cost-s", help="Seconds of no progress each time a job is moved or resumed.")
AgnosticOpt = typer.Option(False, "--agnostic", help="Treat all GPU types as equally fast (heterogeneity-agnostic baseline).")
PartitionsOpt = typer.Option(1, "--partitions", help="Solve an LP policy as K random sub-problems (POP) for speed on large clusters.")
SloOpt = typer.Option(False, "--slo", help="min-cost: honour the workload's deadline_s column.")
OutOpt = typer.Option(None, "--out", "-o", help="Write summary, per-job CSV, timeline and plots to this directory.")
JsonOpt = typer.Option(False, "--json", help="Print the summary as JSON instead of a table.")


def _fail(message: str) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference) -> WorkloadSettings:
    if jobs is not None and jobs <= 0:
        raise _fail(f"--jobs must be positive, got {jobs}")
    if rate <= 0:
        raise _fail(f"--rate must be positive, got {rate}")
    return WorkloadSettings(
        path=workload, jobs=jobs, rate_per_hour=rate, seed=seed, start_s=start_s, end_s=end_s,
        reference_gpu_type=reference, cluster=cluster, throughputs_path=throughputs,
    )


def _config(round_s: float, restart_cost_s: float) -> SimConfig:
    if round_s <= 0:
        raise _fail(f"--round-s must be positive, got {round_s}")
    if restart_cost_s < 0:
        raise _fail(f"--restart-cost-s must be >= 0, got {restart_cost_s}")
    return SimConfig(round_s=round_s, restart_cost_s=restart_cost_s)


def _load(settings: WorkloadSettings) -> Inputs:
    try:
        return load_inputs(settings)
    except (InputError, OSError, ValueError) as exc:
        raise _fail(str(exc)) from None


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs done · day {task.fields[day]:.1f}"),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
        disable=not errors.is_terminal,
    )


@app.command()
def simulate(
    workload: Optional[str] = WorkloadOpt,
    cluster: str = ClusterOpt,
    policy: str = typer.Option("max-min-fairness", "--policy", "-p", help=f"One of: {', '.join(POLICIES)} (NAME:agnostic for the heterogeneity-agnostic variant)."),
    agnostic: bool = AgnosticOpt,
    partitions: int = PartitionsOpt,
    slo: bool = SloOpt,
    out: Optional[Path] = OutOpt,
    jobs: Optional[int] = JobsOpt,
    rate: float = RateOpt,
    seed: int = SeedOpt,
    start_s: Optional[float] = StartOpt,
    end_s: Optional[float] = EndOpt,
    throughputs: Optional[str] = ThroughputsOpt,
    reference_gpu_type: str = ReferenceOpt,
    round_s: float = RoundOpt,
    restart_cost_s: float = RestartOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay a workload on a cluster under one policy and summarise it.

    With no options: a seeded synthetic workload on a small heterogeneous cluster.
    """
    try:
        check_policy_specs([policy], partitions=partitions, slo=slo)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    settings = _settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference_gpu_type)
    config = _config(round_s, restart_cost_s)
    inputs = _load(settings)
    with _progress() as bar:
        task = bar.add_task(policy, total=len(inputs.jobs), day=0.0)

        def report(ended: int, total: int, now_s: float) -> None:
            bar.update(task, completed=ended, day=now_s / 86400)

        result = _run_or_fail(inputs, policy, config, agnostic=agnostic, partitions=partitions, slo=slo, progress=report)
    if as_json:
        console.print_json(json.dumps(result.summary))
    else:
        console.print(f"[bold]{policy}[/]: {inputs.workload_name} on {inputs.cluster.describe()}", highlight=False)
        console.print(summary_table([result.summary]))
    if out is not None:
        paths = write_run(result, out)
        (errors if as_json else console).print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


def _run_or_fail(inputs: Inputs, spec: str, config: SimConfig, **options):
    try:
        return run_policy(inputs, spec, config, **options)
    except ValueError as exc:  # a policy that cannot work on these inputs, e.g. min-cost without prices
        raise _fail(str(exc)) from None


def _run_in_worker(inputs: Inputs, spec: str, config: SimConfig, options: dict, updates) -> object:
    def report(ended: int, total: int, now_s: float) -> None:
        updates.put((spec, ended, now_s))

    return run_policy(inputs, spec, config, progress=report, **options)


@app.command()
def compare(
    policies: str = typer.Option("fifo,las,max-min-fairness", "--policies", help="Comma-separated; NAME:agnostic for the agnostic variant."),
    workload: Optional[str] = WorkloadOpt,
    cluster: str = ClusterOpt,
    agnostic: bool = AgnosticOpt,
    partitions: int = PartitionsOpt,
    slo: bool = SloOpt,
    out: Optional[Path] = OutOpt,
    jobs: Optional[int] = JobsOpt,
    rate: float = RateOpt,
    seed: int = SeedOpt,
    start_s: Optional[float] = StartOpt,
    end_s: Optional[float] = EndOpt,
    throughputs: Optional[str] = ThroughputsOpt,
    reference_gpu_type: str = ReferenceOpt,
    round_s: float = RoundOpt,
    restart_cost_s: float = RestartOpt,
    workers: int = typer.Option(0, "--workers", help="Parallel processes (default: one per policy, at most the CPU count)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run several policies on the same workload and print them side by side."""
    specs = [p.strip() for p in policies.split(",") if p.strip()]
    if not specs:
        raise _fail("--policies is empty")
    try:
        check_policy_specs(specs, partitions=partitions, slo=slo)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    settings = _settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference_gpu_type)
    config = _config(round_s, restart_cost_s)
    inputs = _load(settings)
    processes = workers if workers > 0 else min(len(specs), os.cpu_count() or 1)
    options = {"agnostic": agnostic, "partitions": partitions, "slo": slo}

    results = []
    with _progress() as bar:
        tasks = {spec: bar.add_task(spec, total=len(inputs.jobs), day=0.0) for spec in specs}
        if processes <= 1:
            for spec in specs:
                def report(ended: int, total: int, now_s: float, spec=spec) -> None:
                    bar.update(tasks[spec], completed=ended, day=now_s / 86400)

                results.append(_run_or_fail(inputs, spec, config, progress=report, **options))
        else:
            context = multiprocessing.get_context("spawn")
            with context.Manager() as manager:
                updates = manager.Queue()
                stop = threading.Event()

                def pump() -> None:
                    while not stop.is_set():
                        try:
                            spec, ended, now_s = updates.get(timeout=0.1)
                        except (queue.Empty, EOFError, OSError):
                            continue
                        bar.update(tasks[spec], completed=ended, day=now_s / 86400)

                listener = threading.Thread(target=pump, daemon=True)
                listener.start()
                with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
                    futures = [pool.submit(_run_in_worker, inputs, s, config, options, updates) for s in specs]
                    try:
                        results = [f.result() for f in futures]
                    except ValueError as exc:
                        stop.set()
                        raise _fail(str(exc)) from None
                stop.set()
                listener.join()
    summaries = [r.summary for r in results]
    if as_json:
        console.print_json(json.dumps({"policies": summaries}))
    else:
        console.print(f"{inputs.workload_name} on {inputs.cluster.describe()}", highlight=False)
        console.print(summary_table(summaries))
    if out is not None:
        paths = write_comparison(results, out)
        (errors if as_json else console).print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


@app.command()
def kinds() -> None:
    """List the built-in job kinds and their steps/s on each GPU type (1 GPU)."""
    from rich.table import Table

    from apportion.workloads.catalog import builtin_throughputs

    table = builtin_throughputs()
    view = Table(title="built-in job kinds: steps/s on one GPU", header_style="bold")
    view.add_column("kind")
    for gpu in table.gpu_types:
        view.add_column(gpu, justify="right")
    for k, kind in enumerate(table.kinds):
        view.add_row(kind, *(f"{v:.2f}" if v == v else "—" for v in table.steps_per_s[k, :, 0]))
    console.print(view)
    console.print("k80/p100/v100: Gavel's measurements; t4/a100/h100: roofline prediction (docs/throughputs.md).")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
