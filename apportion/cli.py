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
from apportion.core.queues import QueueConfig
from apportion.experiment import (
    DEFAULT_CLUSTER,
    DEFAULT_RATE_PER_HOUR,
    Inputs,
    WorkloadSettings,
    check_policy_specs,
    load_inputs,
    parse_policy_spec,
    run_policy,
)
from apportion.policies import POLICIES
from apportion.report import summary_table, write_comparison, write_run
from apportion.sim import SimConfig
from apportion.workloads.queues import load_queues

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
WaterFillingOpt = typer.Option(False, "--water-filling", help="max-min-fairness: raise jobs level by level, so none can rise without lowering a smaller one (slower).")
OutOpt = typer.Option(None, "--out", "-o", help="Write summary, per-job CSV, timeline and plots to this directory.")
JsonOpt = typer.Option(False, "--json", help="Print the summary as JSON instead of a table.")
SpaceSharingOpt = typer.Option(False, "--space-sharing", help="LP policies: let two one-GPU jobs share a GPU where their pair's speed is known (or NAME:space-sharing).")
QueuesOpt = typer.Option(None, "--queues", help="hierarchical: queues YAML (weight, nominal quota per GPU type, borrowing); see docs/queues.md.")


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


def _load_queues(path: Optional[str]) -> Optional[QueueConfig]:
    if path is None:
        return None
    try:
        return load_queues(path)
    except InputError as exc:
        raise _fail(str(exc)) from None


def _check_queues(queues: Optional[QueueConfig], inputs: Inputs) -> None:
    if queues is not None:
        try:
            queues.check_cluster(inputs.cluster.gpu_types, inputs.cluster.capacity)
        except InputError as exc:
            raise _fail(str(exc)) from None


def _prepare(
    specs: list[str], options: dict, queues_path: Optional[str], settings: WorkloadSettings,
    round_s: float, restart_cost_s: float,
) -> tuple[Inputs, SimConfig, dict]:
    """Check the policies and their options, load the inputs; one-line errors, exit 2."""
    queue_config = _load_queues(queues_path)
    options = {**options, "queues": queue_config}
    try:
        check_policy_specs(specs, **options)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    config = _config(round_s, restart_cost_s)
    inputs = _load(settings)
    _check_queues(queue_config, inputs)
    return inputs, config, options


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
    policy: str = typer.Option("max-min-fairness", "--policy", "-p", help=f"One of: {', '.join(POLICIES)} (NAME:agnostic for the heterogeneity-agnostic variant, NAME:space-sharing to share GPUs)."),
    agnostic: bool = AgnosticOpt,
    partitions: int = PartitionsOpt,
    slo: bool = SloOpt,
    water_filling: bool = WaterFillingOpt,
    space_sharing: bool = SpaceSharingOpt,
    queues: Optional[str] = QueuesOpt,
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
    inputs, config, options = _prepare(
        [policy], dict(agnostic=agnostic, partitions=partitions, slo=slo, water_filling=water_filling,
             space_sharing=space_sharing),
        queues, _settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference_gpu_type),
        round_s, restart_cost_s,
    )
    with _progress() as bar:
        task = bar.add_task(policy, total=len(inputs.jobs), day=0.0)

        def report(ended: int, total: int, now_s: float) -> None:
            bar.update(task, completed=ended, day=now_s / 86400)

        result = _run_or_fail(inputs, policy, config, progress=report, **options)
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
    policies: str = typer.Option("fifo,las,max-min-fairness", "--policies", help="Comma-separated; NAME:agnostic and NAME:space-sharing for the variants."),
    workload: Optional[str] = WorkloadOpt,
    cluster: str = ClusterOpt,
    agnostic: bool = AgnosticOpt,
    partitions: int = PartitionsOpt,
    slo: bool = SloOpt,
    water_filling: bool = WaterFillingOpt,
    space_sharing: bool = SpaceSharingOpt,
    queues: Optional[str] = QueuesOpt,
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
    inputs, config, options = _prepare(
        specs, dict(agnostic=agnostic, partitions=partitions, slo=slo, water_filling=water_filling,
             space_sharing=space_sharing),
        queues, _settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference_gpu_type),
        round_s, restart_cost_s,
    )
    processes = workers if workers > 0 else min(len(specs), os.cpu_count() or 1)

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


def _count(text: str, option: str) -> float:
    """'300e9', '300B', '1.5T', '2M', '1000' -> a number of tokens."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    raw = text.strip().lower().replace("_", "").replace(",", "")
    try:
        value = float(raw[:-1]) * scale[raw[-1]] if raw and raw[-1] in scale else float(raw)
    except ValueError:
        raise _fail(f"{option} must be a number such as 300e9, 300B or 1.5T, got '{text}'") from None
    if value <= 0:
        raise _fail(f"{option} must be positive, got '{text}'")
    return value


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


@app.command()
def plan(
    model: str = typer.Option("gpt", "--model", help="Model family when no preset is given: gpt, llama or bert."),
    preset: Optional[str] = typer.Option(None, "--preset", help="A named model (gpt3-175b, gpt3-6.7b, gpt3-1.3b, llama-7b-like, llama-70b-like, bert-large, …); --layers etc. override it."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Transformer layers."),
    hidden: Optional[int] = typer.Option(None, "--hidden", help="Hidden size."),
    heads: Optional[int] = typer.Option(None, "--heads", help="Attention heads."),
    seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length (default: the family's, 2048 for GPT)."),
    vocab: Optional[int] = typer.Option(None, "--vocab", help="Vocabulary size (default: the family's, 51200 for GPT)."),
    ffn_hidden: Optional[int] = typer.Option(None, "--ffn-hidden", help="MLP width (default 4·hidden; Llama: 8/3·hidden rounded to 256)."),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", help="Key/value heads for grouped-query attention."),
    gpus: int = typer.Option(8, "--gpus", help="GPUs in all."),
    gpu_type: str = typer.Option("a100-80gb", "--gpu-type", help="An accelerator of the catalog."),
    global_batch: int = typer.Option(512, "--global-batch", help="Sequences per iteration."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel size (searched when not given)."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel size (searched when not given)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Micro-batch size (searched when not given)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="none, selective or full."),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism (with tp > 1)."),
    zero: Optional[int] = typer.Option(None, "--zero", help="ZeRO stage 0, 1, 2 or 3."),
    offload: bool = typer.Option(False, "--offload", help="ZeRO-Offload: optimizer state on the host (needs --zero ≥ 1)."),
    schedule: Optional[str] = typer.Option(None, "--schedule", help="Pipeline schedule: 1f1b, interleaved or gpipe."),
    virtual_stages: Optional[int] = typer.Option(None, "--virtual-stages", help="Model chunks per GPU for the interleaved schedule."),
    precision: Optional[str] = typer.Option(None, "--precision", help="bf16, fp16, tf32 or fp32 (default: bf16 where the GPU has it)."),
    no_overlap: bool = typer.Option(False, "--no-overlap-grad-reduce", help="Reduce gradients after the backward pass instead of overlapping it."),
    tokens: str = typer.Option("300e9", "--tokens", help="Training tokens for the time and cost columns (300e9, 1T, …)."),
    top: int = typer.Option(5, "--top", help="How many layouts to show."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> None:
    """Predict step time, TFLOP/s and memory per GPU of a transformer's training; find the best layouts.

    With --tp, --pp and --micro-batch all given, predicts that one layout (recompute none, no
    ZeRO, 1F1B unless told otherwise); otherwise searches the layouts and prints the fastest
    that fit in memory.
    """
    from rich import box
    from rich.table import Table

    from apportion.perf import Layout, get_accelerator, parameter_count, predict
    from apportion.perf import plan as search
    from apportion.perf.planner import default_precision
    from apportion.perf.transformer import build_model

    token_count = _count(tokens, "--tokens")
    if top < 1:
        raise _fail(f"--top must be at least 1, got {top}")
    try:
        acc = get_accelerator(gpu_type)
        shape = build_model(model, preset, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab,
                            ffn_hidden=ffn_hidden, kv_heads=kv_heads)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if gpus < 1:
        raise _fail(f"--gpus must be positive, got {gpus}")
    params = parameter_count(shape)
    header = (f"{shape.name} ({params / 1e9:.1f}B parameters, {shape.layers} layers, hidden {shape.hidden}, "
              f"{shape.heads} heads, seq {shape.seq}) on {gpus} × {acc.name}, global batch {global_batch}")

    if tp is not None and pp is not None and micro_batch is not None:
        if gpus % (tp * pp):
            raise _fail(f"{gpus} GPUs are not divisible by tensor × pipeline-parallel size ({tp} × {pp} = {tp * pp})")
        sched = schedule or ("interleaved" if (virtual_stages or 1) > 1 else ("1f1b" if pp > 1 else "none"))
        layout = Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=micro_batch, global_batch=global_batch,
                        recompute=recompute or "none", sequence_parallel=bool(sequence_parallel), zero=zero or 0,
                        offload=offload, schedule=sched, virtual_stages=virtual_stages or 1,
                        overlap_grad_reduce=not no_overlap, precision=precision or default_precision(acc))
        try:
            one = predict(shape, layout, acc)
        except ValueError as exc:
            raise _fail(str(exc)) from None
        if as_json:
            console.print_json(json.dumps({**one.to_dict(token_count), "parameters": params}))
            return
        console.print(header, highlight=False)
        console.print(f"layout: {layout.describe()}", highlight=False)
        mem = one.memory.as_gb()
        cost = one.cost_usd(token_count)
        view = Table(show_header=False, box=None)
        view.add_row("step time", f"{one.step_time_s:.3f} s")
        view.add_row("TFLOP/s per GPU", f"{one.tflops_per_gpu:.1f} ({one.mfu:.1%} model FLOPs utilisation)")
        view.add_row("memory per GPU", f"{mem['total']:.1f} GB of {acc.memory_bytes / 1e9:.0f}: weights {mem['weights']:.1f}, "
                     f"gradients {mem['gradients']:.1f}, optimizer {mem['optimizer']:.1f}, activations {mem['activations']:.1f}")
        view.add_row("fits", "yes" if one.fits else "[bold red]no[/]: " + "; ".join(one.reasons))
        view.add_row("time per step", ", ".join(f"{k.replace('_', ' ')} {v:.3f} s" for k, v in one.breakdown_s.items() if v > 0))
        view.add_row(f"{token_count:.3g} tokens", f"{_duration(one.training_time_s(token_count))}"
                     + (f", ${cost:,.0f}" if cost is not None else ", no list price for this GPU"))
        console.print(view)
        return

    try:
        result = search(shape, gpus, acc, global_batch, top=top, tp=tp, pp=pp, micro_batch=micro_batch,
                        recompute=recompute, sequence_parallel=sequence_parallel, zero=zero, offload=offload,
                        schedule=schedule, virtual_stages=virtual_stages, precision=precision,
                        overlap_grad_reduce=not no_overlap)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if not result.best and not result.closest_misses(1):
        reasons = result.rejection_summary(1)
        first = result.rejected[0].reasons[0] if result.rejected else "no layout to consider"
        raise _fail(f"no valid layout for {gpus} GPUs: {first}" + (f" ({reasons[0].split(' × ')[0]} layouts)" if reasons else ""))
    if as_json:
        console.print_json(json.dumps({
            "model": shape.name, "parameters": params, "gpu_type": acc.name, "gpus": gpus,
            "global_batch": global_batch, "tokens": token_count,
            "layouts": [p.to_dict(token_count) for p in result.best],
            "considered": result.considered, "rejected": len(result.rejected),
            "rejection_summary": result.rejection_summary(),
        }))
        if not result.best:
            raise typer.Exit(code=1)
        return
    console.print(header, highlight=False)
    if not result.best:
        errors.print(f"[bold red]no layout fits[/] in the {acc.name}'s {acc.memory_bytes / 1e9:.0f} GB; closest:", highlight=False)
        for miss in result.closest_misses():
            errors.print(f"  {miss.layout.describe()}: {miss.reasons[0]}", highlight=False)
        raise typer.Exit(code=1)
    view = Table(title=f"best {len(result.best)} of {result.considered} layouts; time and cost for "
                       f"{token_count:.3g} tokens", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("t·p·d", "mb", "recompute", "zero", "pipeline", "step s", "TFLOP/s", "MFU", "GB/GPU",
                   "w+g+o+act", "time", "cost"):
        view.add_column(column, justify="left" if column in ("recompute", "pipeline", "w+g+o+act") else "right",
                        no_wrap=True)
    for p in result.best:
        lay, mem = p.layout, p.memory.as_gb()
        cost = p.cost_usd(token_count)
        sched = "—" if lay.pp == 1 else (f"interl. v={lay.virtual_stages}" if lay.schedule == "interleaved" else lay.schedule)
        view.add_row(f"{lay.tp}·{lay.pp}·{lay.dp}", str(lay.micro_batch),
                     lay.recompute + ("+sp" if lay.sequence_parallel else ""),
                     str(lay.zero) + ("+off" if lay.offload else ""), sched,
                     f"{p.step_time_s:.2f}", f"{p.tflops_per_gpu:.0f}", f"{p.mfu:.0%}", f"{mem['total']:.1f}",
                     f"{mem['weights']:.0f}+{mem['gradients']:.0f}+{mem['optimizer']:.0f}+{mem['activations']:.0f}",
                     _duration(p.training_time_s(token_count)), f"${cost / 1e6:,.2f}M" if cost is not None else "—")
    Console(width=max(console.width, 140)).print(view)
    summary = result.rejection_summary(3)
    if summary:
        console.print(f"rejected {len(result.rejected)}: " + "; ".join(summary), highlight=False)


# the real scheduler: `apportion serve` and its clients ------------------------------------

ServerOpt = typer.Option(None, "--server", help="The server's URL (default: $APPORTION_SERVER, else http://127.0.0.1:8642).")
ClientTokenOpt = typer.Option(None, "--token", help="Bearer token, when the server requires one (default: $APPORTION_TOKEN).")
UserOpt = typer.Option(None, "--user", help="Act as this user (default: the job file's user, else your OS user).")


def _client(server: Optional[str], token: Optional[str]):
    from apportion.serve.client import Client

    return Client(server, token)


def _call(function, *args):
    from apportion.serve.client import ClientError

    try:
        return function(*args)
    except ClientError as exc:
        raise _fail(str(exc)) from None


@app.command()
def serve(
    state_dir: Path = typer.Option(Path("~/.apportion/server"), "--state-dir", help="Where the state file, logs and default checkpoints live."),
    port: int = typer.Option(8642, "--port", help="HTTP port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback requires --token."),
    token: Optional[str] = typer.Option(None, "--token", help="Require 'Authorization: Bearer TOKEN' on every call."),
    slots: Optional[str] = typer.Option(None, "--slots", help="TYPE:COUNT,... e.g. cpu:2 or h100:4 (default: this machine's GPUs, else cpu:1)."),
    policy: str = typer.Option("las", "--policy", "-p", help=f"One of: {', '.join(POLICIES)} (NAME:agnostic as in simulate)."),
    round_s: float = typer.Option(180.0, "--round-s", help="Round length in seconds of wall time."),
    max_retries: int = typer.Option(3, "--max-retries", help="Crashes retried from the last checkpoint before a job is marked failed."),
    grace_s: float = typer.Option(30.0, "--grace-s", help="Seconds a job may overrun its lease before SIGTERM, and then SIGTERM before SIGKILL."),
    las_thresholds: Optional[str] = typer.Option(None, "--las-thresholds", help="las: queue thresholds in GPU-seconds, e.g. 3600,36000 (the default)."),
    queues: Optional[str] = QueuesOpt,
) -> None:
    """Run the scheduler on this machine: start, preempt and resume the jobs submitted to it."""
    import numpy as np

    from apportion.experiment import policy_from_spec
    from apportion.policies.las import Las
    from apportion.serve.scheduler import check_policy
    from apportion.serve.server import ServerError, ServerOptions
    from apportion.serve.server import serve as run_server
    from apportion.serve.slots import describe, detect_gpus, parse_slots

    if round_s <= 0:
        raise _fail(f"--round-s must be positive, got {round_s}")
    if max_retries < 0:
        raise _fail(f"--max-retries must be >= 0, got {max_retries}")
    if grace_s < 0:
        raise _fail(f"--grace-s must be >= 0, got {grace_s}")
    if not 0 <= port <= 65535:
        raise _fail(f"--port must be 0-65535, got {port}")
    gpus = detect_gpus()
    try:
        offered = parse_slots(slots, gpus) if slots else gpus
    except InputError as exc:
        raise _fail(str(exc)) from None
    no_gpus = not offered
    if no_gpus:
        offered = parse_slots("cpu:1")
    queue_config = _load_queues(queues)
    prices = _list_prices({s.gpu_type for s in offered})

    def make_policy():
        if las_thresholds is None:
            return policy_from_spec(policy, queues=queue_config)
        if policy.removesuffix(":agnostic") != "las":
            raise ValueError(f"--las-thresholds applies to las only, not to '{policy}'")
        try:
            values = tuple(float(v) for v in las_thresholds.split(",") if v.strip())
        except ValueError:
            raise ValueError(f"--las-thresholds must be GPU-seconds separated by commas, got '{las_thresholds}'") from None
        if not values or min(values) <= 0:
            raise ValueError(f"--las-thresholds must be positive GPU-seconds, got '{las_thresholds}'")
        chosen = Las(thresholds_gpu_s=values, agnostic=policy.endswith(":agnostic"))
        chosen.name = policy
        return chosen

    try:
        if parse_policy_spec(policy)[1].get("space_sharing"):
            raise ValueError(f"apportion serve does not space-share GPUs; use '{policy.split(':')[0]}' (see docs/space-sharing.md)")
        check_policy_specs([policy], queues=queue_config)
        if queue_config is not None:
            types = list(dict.fromkeys(s.gpu_type for s in offered))
            queue_config.check_cluster(tuple(types), np.array([sum(s.gpu_type == t for s in offered) for t in types]))
        check_policy(make_policy(), offered, prices)
        chosen_policy = make_policy()
    except (ValueError, InputError) as exc:
        raise _fail(str(exc)) from None
    options = ServerOptions(state_dir=state_dir.expanduser(), host=host, port=port, token=token, round_s=round_s,
                            grace_s=grace_s, max_retries=max_retries, prices=prices)

    def log(message: str) -> None:
        console.print(f"[dim]{_clock()}[/] {message}", highlight=False, soft_wrap=True)

    def ready(scheduler) -> None:
        log(f"apportion serve on {scheduler.config.server_url}: slots {describe(scheduler.slots)}, policy "
            f"{chosen_policy.name}, rounds of {round_s:g} s, state in {scheduler.config.state_dir}")

    if no_gpus:
        errors.print("no GPUs found: offering 1 CPU slot (--slots cpu:N for more)", highlight=False)
    try:
        run_server(options, offered, chosen_policy, log, ready)
    except ServerError as exc:
        raise _fail(str(exc)) from None


def _list_prices(gpu_types: set[str]) -> dict[str, float]:
    """The catalog's list price per GPU-hour of each type that has one (min-cost needs them)."""
    from apportion.perf.accelerators import ACCELERATORS, ALIASES

    prices = {}
    for gpu_type in gpu_types:
        accelerator = ACCELERATORS.get(ALIASES.get(gpu_type, gpu_type))
        if accelerator is not None and accelerator.price_per_hour:
            prices[gpu_type] = float(accelerator.price_per_hour)
    return prices


def _clock(when: Optional[float] = None) -> str:
    import time as _time

    return _time.strftime("%H:%M:%S", _time.localtime(when))


@app.command()
def submit(
    job_file: Path = typer.Argument(..., help="A job YAML (see docs/serve.md)."),
    user: Optional[str] = UserOpt,
    server: Optional[str] = ServerOpt,
    token: Optional[str] = ClientTokenOpt,
    as_json: bool = typer.Option(False, "--json", help="Print {\"id\": ...} as JSON."),
) -> None:
    """Submit a job file to the server; a malformed file is rejected here with the field named."""
    from apportion.serve.client import ClientError
    from apportion.serve.jobspec import default_user, field_line, load_job_file

    try:
        spec = load_job_file(job_file)
    except InputError as exc:
        raise _fail(str(exc)) from None
    owner = user or spec.user or default_user()
    try:
        job_id = _client(server, token).submit(spec, owner)
    except ClientError as exc:
        if exc.field and exc.message:  # the server's own checks (what fits on it): name the file's line
            raise _fail(str(InputError(str(job_file), exc.message, line=field_line(job_file, exc.field),
                                       field=exc.field))) from None
        raise _fail(str(exc)) from None
    if as_json:
        console.print_json(json.dumps({"id": job_id}))
    else:
        console.print(f"submitted job {job_id}: {spec.name} ({owner}, {spec.gpus} slot(s), {spec.total_steps} steps)",
                      highlight=False)


def _span(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _submitted(when: float, now: float) -> str:
    import time as _time

    return _time.strftime("%H:%M:%S" if now - when < 86400 else "%Y-%m-%d %H:%M", _time.localtime(when))


@app.command("queue")
def queue_(
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as a JSON list."),
    show_all: bool = typer.Option(False, "--all", help="Every job ever submitted (default: active jobs, and jobs that ended in the last hour)."),
    server: Optional[str] = ServerOpt,
    token: Optional[str] = ClientTokenOpt,
) -> None:
    """List jobs: ID NAME USER QUEUE PRIO STATUS(REASON) GPUS ALLOC SUBMITTED RUNTIME PROGRESS."""
    import time as _time

    from rich import box
    from rich.table import Table

    jobs = _call(_client(server, token).jobs)
    now = _time.time()
    if not show_all:
        jobs = [j for j in jobs if j["finished"] is None or now - j["finished"] < 3600
                or j["status"] not in ("completed", "failed", "cancelled")]
    if as_json:
        console.print_json(json.dumps(jobs))
        return
    if not jobs:
        console.print("no jobs" + ("" if show_all else " (--all shows jobs that ended more than an hour ago)"))
        return
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for column in ("ID", "NAME", "USER", "QUEUE", "PRIO", "STATUS(REASON)", "GPUS", "ALLOC", "SUBMITTED", "RUNTIME", "PROGRESS"):
        table.add_column(column, justify="right" if column in ("ID", "PRIO", "GPUS", "RUNTIME", "PROGRESS") else "left",
                         no_wrap=True, overflow="ellipsis")
    colours = {"running": "green", "completed": "blue", "failed": "red", "preempted": "yellow", "cancelled": "dim"}
    for j in jobs:
        reason = j["reason"].splitlines()[0] if j["reason"] else ""
        if len(reason) > 60:
            reason = reason[:57] + "..."
        status = f"[{colours.get(j['status'], 'default')}]{j['status']}[/]" + (f"({_escape(reason)})" if reason else "")
        progress = f"{j['steps_done']}/{j['total_steps']} ({100 * j['steps_done'] / max(1, j['total_steps']):.0f}%)"
        table.add_row(j["id"], _escape(j["name"]), _escape(j["user"]), _escape(j["queue"] or "-"), f"{j['priority']:g}",
                      status, str(j["gpus"]), j["alloc"] or "-", _submitted(j["submitted"], now),
                      _span(j["runtime_s"]), progress)
    (console if console.is_terminal else Console(width=250)).print(table)
    for j in jobs:
        if j["status"] == "failed" and j["last_lines"]:
            console.print(f"[red]job {j['id']} ({_escape(j['name'])}) failed[/]; its last lines:", highlight=False)
            for line in j["last_lines"].splitlines()[-10:]:
                console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="The job's id (see `apportion queue`)."),
    user: Optional[str] = UserOpt,
    server: Optional[str] = ServerOpt,
    token: Optional[str] = ClientTokenOpt,
) -> None:
    """Cancel a job: a running attempt gets SIGTERM (then SIGKILL after the grace period)."""
    from apportion.serve.jobspec import default_user

    _call(_client(server, token).cancel, job_id, user or default_user())
    console.print(f"cancelled job {job_id}", highlight=False)


@app.command()
def logs(
    job_id: str = typer.Argument(..., help="The job's id."),
    attempt: Optional[int] = typer.Option(None, "--attempt", help="Which attempt (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the job writes, across attempts, until it ends."),
    server: Optional[str] = ServerOpt,
    token: Optional[str] = ClientTokenOpt,
) -> None:
    """Print a job's output (stdout and stderr) of one attempt."""
    import sys
    import time as _time

    client = _client(server, token)
    offset, number = 0, attempt
    while True:
        chunk = _call(client.logs, job_id, number, offset)
        if chunk["text"]:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        number, offset = chunk["attempt"] or None, chunk["offset"]
        if chunk["text"] and not chunk["done"]:
            continue
        if not follow:
            break
        if chunk["done"]:
            if attempt is not None:
                break
            if chunk["attempts"] > (chunk["attempt"] or 0):
                number, offset = (chunk["attempt"] or 0) + 1, 0
                errors.print(f"--- attempt {number} ---", highlight=False)
                continue
            if chunk["status"] in ("completed", "failed", "cancelled"):
                break
        _time.sleep(0.5)


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    server: Optional[str] = ServerOpt,
    token: Optional[str] = ClientTokenOpt,
) -> None:
    """The server: policy, round, slots and who holds them, jobs by status."""
    info = _call(_client(server, token).status)
    if as_json:
        console.print_json(json.dumps(info))
        return
    console.print(f"[bold]{info['server']}[/]: policy {info['policy']}, round {info['round']} "
                  f"(every {info['round_s']:g} s, next in {info['next_round_in_s']:.0f} s)", highlight=False)
    console.print(f"state: {info['state_dir']} (server pid {info['pid']})", highlight=False, soft_wrap=True)
    slots = ", ".join(f"{s['id']}({s['gpu_type']})={'job ' + s['job'] if s['job'] else 'idle'}" for s in info["slots"])
    console.print(f"slots: {slots}", highlight=False)
    console.print("jobs: " + ", ".join(f"{n} {k}" for k, n in info["counts"].items()), highlight=False)
    if info["round_ms"]["median"] is not None:
        console.print(f"round overhead: median {info['round_ms']['median']:.1f} ms over {info['round_ms']['rounds_this_run']} rounds",
                      highlight=False)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
