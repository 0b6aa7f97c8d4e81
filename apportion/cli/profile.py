"""`apportion profile`: time the kernels of a model's step on this machine's device."""

from __future__ import annotations

from typing import Optional

import typer

from apportion.cli.options import json_option
from apportion.cli.output import fail, print_json, print_line, print_table
from apportion.stdio import stdout_to_stderr


def profile(
    model: str = typer.Option("gpt", "--model", help="Model family when no preset is given: gpt, llama or bert.", rich_help_panel="Model"),
    preset: Optional[str] = typer.Option(None, "--preset", help="A named model (as for `apportion plan`); --layers etc. override it.", rich_help_panel="Model"),
    layers: Optional[int] = typer.Option(None, "--layers", help="Transformer layers.", rich_help_panel="Model"),
    hidden: Optional[int] = typer.Option(None, "--hidden", help="Hidden size.", rich_help_panel="Model"),
    heads: Optional[int] = typer.Option(None, "--heads", help="Attention heads.", rich_help_panel="Model"),
    seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length.", rich_help_panel="Model"),
    vocab: Optional[int] = typer.Option(None, "--vocab", help="Vocabulary size.", rich_help_panel="Model"),
    ffn_hidden: Optional[int] = typer.Option(None, "--ffn-hidden", help="MLP width.", rich_help_panel="Model"),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", help="Key/value heads.", rich_help_panel="Model"),
    experts: Optional[int] = typer.Option(None, "--experts", help="Mixture of experts: MLPs per layer (an all-to-all is timed too).", rich_help_panel="Model"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Experts each token is routed to.", rich_help_panel="Model"),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per micro-batch the shapes are taken at.", rich_help_panel="Measurement"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size the shapes are split for.", rich_help_panel="Measurement"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when there is one).", rich_help_panel="Measurement"),
    gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="The catalog type of the device (default: from its name; cpu for the CPU).", rich_help_panel="Measurement"),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32, tf32, fp16 or bf16 (default: fp32 on the CPU, bf16 on a GPU).", rich_help_panel="Measurement"),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's own choice).", rich_help_panel="Measurement"),
    processes: Optional[int] = typer.Option(None, "--processes", help="Time collectives among this many processes as devices: gloo on the CPU, one per GPU with NCCL (default: every GPU when there are several, else none).", rich_help_panel="Measurement"),
    budget_s: float = typer.Option(5.0, "--budget-s", help="About how many seconds to spend timing (larger products are timed smaller).", rich_help_panel="Measurement"),
    out: str = typer.Option("profile.json", "--out", help="Where to write the measurement file for `apportion plan --measured`.", rich_help_panel="Output"),
    as_json: bool = json_option("the measurement file", "Output"),
) -> None:
    """Time the GEMMs and a streaming kernel of a transformer's step on this device (and its
    collectives among several devices or --processes), and write a measurement file from which
    `apportion plan --measured FILE` fits the GEMM, kernel and collective rates."""
    import json
    from pathlib import Path

    from rich import box
    from rich.table import Table

    from apportion.perf.accelerators import get_accelerator
    from apportion.perf.calibrate import fit_kernels
    from apportion.perf.roofline import Gemm, gemm_time, memory_time
    from apportion.perf.parallel import Group, allreduce_time, alltoall_time
    from apportion.perf.transformer import build_model

    if budget_s <= 0:
        raise fail(f"--budget-s must be positive, got {budget_s}")
    if micro_batch < 1 or tp < 1:
        raise fail("--micro-batch and --tp must be positive")
    if precision is not None and precision not in ("fp32", "tf32", "fp16", "bf16"):
        raise fail(f"--precision must be fp32, tf32, fp16 or bf16, got '{precision}'")
    try:
        shape = build_model(model, preset, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab,
                            ffn_hidden=ffn_hidden, kv_heads=kv_heads, experts=experts, top_k=top_k)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if processes is not None and processes < 1:
        raise fail(f"--processes must be positive, got {processes}")
    if shape.heads % tp or shape.ffn % tp:
        raise fail(f"--tp {tp} does not divide the {shape.heads} heads and the MLP width {shape.ffn}")
    target = Path(out)
    if not target.parent.exists():
        raise fail(f"--out: directory '{target.parent}' does not exist")

    with stdout_to_stderr():
        import torch

        from apportion.perf.profile import device_gpu_type
        from apportion.perf.profile import profile as run_profile

        if threads is not None:
            if threads < 1:
                raise fail(f"--threads must be positive, got {threads}")
            torch.set_num_threads(threads)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
            raise fail(f"--device must be cpu or cuda, got '{device}'")
        if device != "cpu" and not torch.cuda.is_available():
            raise fail("--device cuda: this machine has no CUDA device")
        try:
            acc = get_accelerator(gpu_type or device_gpu_type(device))
        except ValueError as exc:
            raise fail(str(exc)) from None
        precision = precision or ("fp32" if device == "cpu" else "bf16")
        devices = torch.cuda.device_count() if device != "cpu" else 0
        ranks = processes if processes is not None else (devices if devices > 1 else 1)
        if device != "cpu" and ranks > max(devices, 1):
            raise fail(f"--processes {ranks}: this machine has {devices} CUDA device(s); "
                       "use --device cpu to time collectives among CPU processes")
        document = {"gpu_type": acc.name, **run_profile(shape, micro_batch=micro_batch, tp=tp, precision=precision,
                                                         device=device, budget_s=budget_s)}
        if ranks > 1:
            from apportion.perf.collectives import time_collectives
            from apportion.perf.profile import collective_sizes

            backend = "gloo" if device == "cpu" else "nccl"
            sizes = collective_sizes(shape, micro_batch, tp, precision, 16 << 20 if device == "cpu" else 256 << 20)
            document["kernels"] += time_collectives(ranks, sizes, backend=backend, alltoall=shape.is_moe)
            document["note"] += f"; collectives among {ranks} {'processes (gloo)' if backend == 'gloo' else 'GPUs (nccl)'}"
        fitted = fit_kernels(document["kernels"], acc)
    target.write_text(json.dumps(document, indent=2) + "\n")
    if as_json:
        print_json(document)
        return
    view = Table(title=f"{shape.name} kernels on {document['device']} ({acc.name}), {precision}",
                 header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("kernel", "shape", "measured ms", "model ms", "model / measured"):
        view.add_column(column, justify="left" if column in ("kernel", "shape") else "right", no_wrap=True)
    for k in document["kernels"]:
        if k["kind"] == "gemm":
            modelled = gemm_time(Gemm(k["m"], k["n"], k["k"], k["batch"]), acc, precision).seconds
            what = f"{k['batch']} × " if k["batch"] > 1 else ""
            what += f"{k['m']}×{k['k']} · {k['k']}×{k['n']}"
        elif k["kind"] in ("allreduce", "alltoall"):
            timed = allreduce_time if k["kind"] == "allreduce" else alltoall_time
            modelled = timed(k["bytes"], Group(k["ranks"], k["ranks"]), acc)
            what = f"{k['kind']} of {k['bytes'] / 1e6:.1f} MB among {k['ranks']}"
        else:
            modelled = memory_time(k["bytes"], acc)
            what = f"{k['bytes'] / 1e6:.1f} MB streamed"
        view.add_row(k["name"], what, f"{k['seconds'] * 1e3:.3f}", f"{modelled * 1e3:.3f}", f"{modelled / k['seconds']:.3f}")
    print_table(view)
    comm = (f", collectives at {fitted.profile.comm_efficiency:.3f} ×"
            if any(k["kind"] in ("allreduce", "alltoall") for k in document["kernels"]) else "")
    print_line(f"GEMMs at {fitted.profile.gemm_efficiency:.3f} × the model's rate, memory-bound kernels at "
               f"{fitted.profile.kernel_efficiency:.3f} ×{comm}; wrote {target} (use: apportion plan --measured {target})")
