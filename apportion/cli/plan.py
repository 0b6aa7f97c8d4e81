"""`apportion plan`: the predicted step time, TFLOP/s and memory of a transformer's training."""

from __future__ import annotations

from typing import Optional

import typer

from apportion.cli.options import json_option
from apportion.cli.output import console, errors, fail, print_json, print_line, print_table
from apportion.stdio import stdout_to_stderr


def _count(text: str, option: str) -> float:
    """'300e9', '300B', '1.5T', '2M', '1000' -> a number of tokens."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    raw = text.strip().lower().replace("_", "").replace(",", "")
    try:
        value = float(raw[:-1]) * scale[raw[-1]] if raw and raw[-1] in scale else float(raw)
    except ValueError:
        raise fail(f"{option} must be a number such as 300e9, 300B or 1.5T, got '{text}'") from None
    if value <= 0:
        raise fail(f"{option} must be positive, got '{text}'")
    return value


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


def plan(
    model: str = typer.Option("gpt", "--model", help="Model family when no preset is given: gpt, llama or bert.", rich_help_panel="Model"),
    preset: Optional[str] = typer.Option(None, "--preset", help="A named model (gpt3-175b, gpt3-6.7b, gpt3-1.3b, llama-7b-like, llama-70b-like, bert-large, …); --layers etc. override it.", rich_help_panel="Model"),
    layers: Optional[int] = typer.Option(None, "--layers", help="Transformer layers.", rich_help_panel="Model"),
    hidden: Optional[int] = typer.Option(None, "--hidden", help="Hidden size.", rich_help_panel="Model"),
    heads: Optional[int] = typer.Option(None, "--heads", help="Attention heads.", rich_help_panel="Model"),
    seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length (default: the family's, 2048 for GPT).", rich_help_panel="Model"),
    vocab: Optional[int] = typer.Option(None, "--vocab", help="Vocabulary size (default: the family's, 51200 for GPT).", rich_help_panel="Model"),
    ffn_hidden: Optional[int] = typer.Option(None, "--ffn-hidden", help="MLP width (default 4·hidden; Llama: 8/3·hidden rounded to 256).", rich_help_panel="Model"),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", help="Key/value heads for grouped-query attention.", rich_help_panel="Model"),
    experts: Optional[int] = typer.Option(None, "--experts", help="Mixture of experts: MLPs per layer (mixtral-8x7b has 8).", rich_help_panel="Model"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Experts each token is routed to.", rich_help_panel="Model"),
    ep: Optional[int] = typer.Option(None, "--ep", help="Expert-parallel size (divides the experts and the data-parallel size; searched when not given).", rich_help_panel="Layout"),
    capacity_factor: Optional[float] = typer.Option(None, "--capacity-factor", help="Token slots per expert over its balanced share (default: dropless).", rich_help_panel="Layout"),
    gpus: int = typer.Option(8, "--gpus", help="GPUs in all.", rich_help_panel="Hardware"),
    gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="An accelerator of the catalog (default a100-80gb, or the measured one with --measured).", rich_help_panel="Hardware"),
    global_batch: int = typer.Option(512, "--global-batch", help="Sequences per iteration.", rich_help_panel="Layout"),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel size (searched when not given).", rich_help_panel="Layout"),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel size (searched when not given).", rich_help_panel="Layout"),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Micro-batch size (searched when not given).", rich_help_panel="Layout"),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="none, selective or full.", rich_help_panel="Layout"),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism (with tp > 1).", rich_help_panel="Layout"),
    zero: Optional[int] = typer.Option(None, "--zero", help="ZeRO stage 0, 1, 2 or 3.", rich_help_panel="Layout"),
    offload: bool = typer.Option(False, "--offload", help="ZeRO-Offload: optimizer state on the host (needs --zero ≥ 1).", rich_help_panel="Layout"),
    schedule: Optional[str] = typer.Option(None, "--schedule", help="Pipeline schedule: 1f1b, interleaved or gpipe.", rich_help_panel="Layout"),
    virtual_stages: Optional[int] = typer.Option(None, "--virtual-stages", help="Model chunks per GPU for the interleaved schedule.", rich_help_panel="Layout"),
    stage_layers: Optional[str] = typer.Option(None, "--stage-layers", help="Layers per pipeline stage, first to last, e.g. 7,8x14,7 (sets --pp; default: even, or balanced when the stages do not divide the layers).", rich_help_panel="Layout"),
    precision: Optional[str] = typer.Option(None, "--precision", help="bf16, fp16, tf32, fp32, or fp8 on h100/h200 (default: bf16 where the GPU has it).", rich_help_panel="Hardware"),
    no_overlap: bool = typer.Option(False, "--no-overlap-grad-reduce", help="Reduce gradients after the backward pass instead of overlapping it.", rich_help_panel="Layout"),
    framework: Optional[str] = typer.Option(None, "--framework", help="Software profile: megatron-lm (the hardware model, default), deepspeed-pipeline or fsdp.", rich_help_panel="Measured step"),
    measured: Optional[str] = typer.Option(None, "--measured", help="A file with one measured step (or `apportion profile`'s kernel timings): the software terms are fitted to it.", rich_help_panel="Measured step"),
    measured_step_s: Optional[float] = typer.Option(None, "--measured-step-s", help="Instead of --measured FILE: seconds per step you measured of this model on --gpu-type, with --measured-layout (and --measured-memory-gb).", rich_help_panel="Measured step"),
    measured_layout: Optional[str] = typer.Option(None, "--measured-layout", help="The measured step's layout, e.g. tp=2,pp=4,micro_batch=1,recompute=selective,zero=1.", rich_help_panel="Measured step"),
    measured_memory_gb: Optional[float] = typer.Option(None, "--measured-memory-gb", help="Peak GPU memory per GPU of the measured step (optional).", rich_help_panel="Measured step"),
    measured_gpus: Optional[int] = typer.Option(None, "--measured-gpus", help="GPUs of the measured step (default --gpus).", rich_help_panel="Measured step"),
    measured_global_batch: Optional[int] = typer.Option(None, "--measured-global-batch", help="Global batch of the measured step (default --global-batch).", rich_help_panel="Measured step"),
    tokens: str = typer.Option("300e9", "--tokens", help="Training tokens for the time and cost columns (300e9, 1T, …).", rich_help_panel="Output"),
    top: int = typer.Option(5, "--top", help="How many layouts to show.", rich_help_panel="Output"),
    as_json: bool = json_option("the numbers", "Output"),
) -> None:
    """Predict step time, TFLOP/s and memory per GPU of a transformer's training; find the best layouts.

    With --tp, --pp and --micro-batch all given, predicts that one layout (recompute none, no
    ZeRO, 1F1B unless told otherwise); otherwise searches the layouts and prints the fastest
    that fit in memory.
    """
    from rich import box
    from rich.table import Table

    from apportion.perf import fixed_layout, get_accelerator, parameter_count, predict
    from apportion.perf.transformer import active_parameter_count
    from apportion.perf import plan as search
    from apportion.perf.parallel import format_stage_layers
    from apportion.perf.transformer import build_model

    token_count = _count(tokens, "--tokens")
    if top < 1:
        raise fail(f"--top must be at least 1, got {top}")
    flags = _measured_flags(measured, measured_step_s, measured_layout, measured_memory_gb, measured_gpus,
                            measured_global_batch)
    software, calibration, measurement = _software(framework, measured)
    try:
        acc = get_accelerator(gpu_type or (measurement.gpu_type if measurement else "a100-80gb"))
        if measurement is not None and measurement.model is not None and preset is None and layers is None \
                and hidden is None and heads is None:
            shape = measurement.model
        else:
            shape = build_model(model, preset, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab,
                                ffn_hidden=ffn_hidden, kv_heads=kv_heads, experts=experts, top_k=top_k)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if flags:
        software, calibration = _software_from_flags(framework, shape, acc.name, gpus, global_batch, **flags)
        measured = f"the measured step ({flags['layout']})"
    if gpus < 1:
        raise fail(f"--gpus must be positive, got {gpus}")
    split = None
    if stage_layers is not None:
        from apportion.perf.parallel import parse_stage_layers

        try:
            split = parse_stage_layers(stage_layers)
        except ValueError as exc:
            raise fail(f"--stage-layers: {exc}") from None
        if pp is not None and pp != len(split):
            raise fail(f"--stage-layers names {len(split)} stages but --pp is {pp}")
        pp = len(split)
    params = parameter_count(shape)
    experts_text = (f", {active_parameter_count(shape) / 1e9:.1f}B active: {shape.experts} experts, top-{shape.top_k}"
                    if shape.is_moe else "")
    header = (f"{shape.name} ({params / 1e9:.1f}B parameters{experts_text}, {shape.layers} layers, hidden "
              f"{shape.hidden}, {shape.heads} heads, seq {shape.seq}) on {gpus} × {acc.name}, global batch {global_batch}")

    if tp is not None and pp is not None and micro_batch is not None:
        try:
            layout = fixed_layout(gpus, acc, global_batch, tp, pp, micro_batch, recompute=recompute,
                                  sequence_parallel=sequence_parallel, zero=zero, offload=offload, schedule=schedule,
                                  virtual_stages=virtual_stages, precision=precision,
                                  overlap_grad_reduce=not no_overlap, stage_layers=split, ep=ep,
                                  capacity_factor=capacity_factor)
            with stdout_to_stderr():
                one = predict(shape, layout, acc, software)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if as_json:
            print_json({**one.to_dict(token_count), "parameters": params, **_software_json(software, calibration)})
            return
        console.print(header, highlight=False)
        _print_software(software, calibration, measured)
        console.print(f"layout: {one.layout.describe()}", highlight=False)
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
        print_table(view)
        return

    try:
        with stdout_to_stderr():
            result = search(shape, gpus, acc, global_batch, top=top, tp=tp, pp=pp, micro_batch=micro_batch,
                            recompute=recompute, sequence_parallel=sequence_parallel, zero=zero, offload=offload,
                            schedule=schedule, virtual_stages=virtual_stages, precision=precision,
                            overlap_grad_reduce=not no_overlap, stage_layers=split, software=software, ep=ep,
                            capacity_factor=capacity_factor)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not result.best and not result.closest_misses(1):
        reasons = result.rejection_summary(1)
        first = result.rejected[0].reasons[0] if result.rejected else "no layout to consider"
        raise fail(f"no valid layout for {gpus} GPUs: {first}" + (f" ({reasons[0].split(' × ')[0]} layouts)" if reasons else ""))
    if as_json:
        print_json({
            "model": shape.name, "parameters": params, "gpu_type": acc.name, "gpus": gpus,
            "global_batch": global_batch, "tokens": token_count,
            "layouts": [p.to_dict(token_count) for p in result.best],
            "considered": result.considered, "rejected": len(result.rejected),
            "rejection_summary": result.rejection_summary(), **_software_json(software, calibration),
        })
        if not result.best:
            raise typer.Exit(code=1)
        return
    print_line(header)
    _print_software(software, calibration, measured)
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
        if lay.stage_layers is not None:
            sched += f" {format_stage_layers(lay.stage_layers)}"
        view.add_row(f"{lay.tp}·{lay.pp}·{lay.dp}" + (f" ep{lay.ep}" if lay.ep > 1 else ""), str(lay.micro_batch),
                     lay.recompute + ("+sp" if lay.sequence_parallel else ""),
                     str(lay.zero) + ("+off" if lay.offload else ""), sched,
                     f"{p.step_time_s:.2f}", f"{p.tflops_per_gpu:.0f}", f"{p.mfu:.0%}", f"{mem['total']:.1f}",
                     f"{mem['weights']:.0f}+{mem['gradients']:.0f}+{mem['optimizer']:.0f}+{mem['activations']:.0f}",
                     _duration(p.training_time_s(token_count)), f"${cost / 1e6:,.2f}M" if cost is not None else "—")
    print_table(view, at_least=140)
    summary = result.rejection_summary(3)
    if summary:
        print_line(f"rejected {len(result.rejected)}: " + "; ".join(summary) + _more(result.rejection_counts(), 3))


def _more(counts: dict[str, int], shown: int) -> str:
    """What the reasons after the first ``shown`` rejected: "; … and N more (K other reasons)", or nothing."""
    rest = list(counts.values())[shown:]
    if not rest:
        return ""
    return f"; … and {sum(rest)} more ({len(rest)} other reason{'s' if len(rest) > 1 else ''})"


def _software(framework: str | None, measured: str | None):
    """The software profile to predict with: a preset, or one fitted to a measurement file."""
    from dataclasses import replace

    from apportion.core.errors import InputError
    from apportion.perf.calibrate import read_measurement
    from apportion.perf.software import get_framework

    try:
        preset = get_framework(framework) if framework else None
    except ValueError as exc:
        raise fail(f"--framework: {exc}") from None
    if measured is None:
        return preset, None, None
    try:
        measurement = read_measurement(measured)
        if preset is not None:
            measurement = replace(measurement, framework=preset)
        with stdout_to_stderr():
            calibration = measurement.calibrate()
    except InputError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:
        raise fail(f"{measured}: {exc}") from None
    return calibration.profile, calibration, measurement


def _measured_flags(measured, step_s, layout, memory_gb, gpus, global_batch) -> dict:
    """The --measured-* options as keyword arguments, or {} when none is given; errors for a half-given set."""
    given = {"--measured-layout": layout, "--measured-memory-gb": memory_gb, "--measured-gpus": gpus,
             "--measured-global-batch": global_batch}
    if step_s is None:
        extra = [name for name, value in given.items() if value is not None]
        if extra:
            raise fail(f"{extra[0]} describes a measured step: give its time with --measured-step-s")
        return {}
    if measured is not None:
        raise fail("give one measurement: --measured FILE or --measured-step-s, not both")
    if layout is None:
        raise fail("--measured-step-s needs the layout it was measured with: --measured-layout "
                   "tp=…,pp=…,micro_batch=… (recompute, zero, schedule, … as in a measurement file)")
    return {"step_s": step_s, "layout": layout, "memory_gb": memory_gb, "measured_gpus": gpus,
            "measured_batch": global_batch}


def _software_from_flags(framework, shape, gpu_type, gpus, global_batch, *, step_s, layout, memory_gb,
                         measured_gpus, measured_batch):
    """The profile fitted to a step measured with the model and GPU type of the other options."""
    from apportion.core.errors import InputError
    from apportion.perf.calibrate import step_measurement
    from apportion.perf.software import MEGATRON_LM, get_framework

    try:
        base = get_framework(framework) if framework else MEGATRON_LM
        measurement = step_measurement(shape, gpu_type, measured_gpus or gpus, measured_batch or global_batch,
                                       layout, step_s, memory_gb, base)
        with stdout_to_stderr():
            calibration = measurement.calibrate()
    except InputError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:
        raise fail(f"--measured-step-s: {exc}") from None
    return calibration.profile, calibration


def _software_json(software, calibration) -> dict:
    out = {}
    if software is not None:
        out["software_profile"] = software.as_dict()
    if calibration is not None:
        out["calibration"] = calibration.as_dict()
    return out


def _print_software(software, calibration, measured: str | None) -> None:
    if calibration is not None and calibration.measured_step_s is not None:
        print_line(f"calibrated on {measured}: measured {calibration.measured_step_s:.4g} s per step where the "
                   f"{calibration.base.name} profile predicts {calibration.predicted_step_s:.4g} s; GEMM and kernel "
                   f"rates × {calibration.factor:.3f}"
                   + (f", {software.memory_overhead_gb:+.1f} GB per GPU beyond the model"
                      if calibration.measured_memory_gb is not None else ""))
    elif calibration is not None:
        print_line(f"calibrated on {measured}: GEMMs at {software.gemm_efficiency:.3f} × the model's rate, "
                   f"memory-bound kernels at {software.kernel_efficiency:.3f} ×"
                   + (f", collectives at {software.comm_efficiency:.3f} ×" if software.comm_efficiency != 1.0 else ""))
    elif software is not None and not software.is_hardware_model:
        print_line(f"software profile {software.name}: GEMM and kernel rates × {software.gemm_efficiency:.3f}"
                   + (", flash attention" if software.flash_attention else ""))
    if calibration is not None:
        for note in calibration.notes:
            print_line(f"note: {note}")
