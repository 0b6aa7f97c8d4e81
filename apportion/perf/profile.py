"""Time the kernels a transformer's step is made of on the device at hand (``apportion profile``).

The step model prices a layer from the shapes of its matrix products (``transformer.layer_gemms``:
QKV, the attention scores and their product with V, the projection, the MLP; each with its two
backward products) and from the bytes its memory-bound kernels stream. This module runs those
very shapes with PyTorch on one device, CPU or GPU, and writes what they took: a measurement
file that ``apportion plan --measured`` fits the GEMM and kernel rates to
(:func:`apportion.perf.calibrate.fit_kernels`).

It is meant to take seconds: a first product of 256 × 256 × 256 estimates the device's rate,
and any product that would take longer than its share of ``budget_s`` is timed with fewer rows
(or fewer batched heads) and recorded with the shape actually timed, which is what the fit
prices. Every kernel runs once to warm up, then until it has run ``min_repeats`` times and for
``min_time_s``; the median run is kept. Collectives among several devices (or processes standing
for them) are timed by :mod:`apportion.perf.collectives`, at the sizes ``collective_sizes`` gives.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from apportion.perf.accelerators import device_accelerator
from apportion.perf.roofline import BYTES, Gemm
from apportion.perf.transformer import TransformerModel, layer_gemms, logits_gemm


@dataclass(frozen=True)
class Plan:
    """What to time: each GEMM at the shape it will be timed, and each streaming kernel's elements."""

    gemms: tuple[tuple[str, Gemm], ...]
    streams: tuple[tuple[str, int], ...]


def kernels_of(model: TransformerModel, micro_batch: int = 1, tp: int = 1) -> Plan:
    """The distinct GEMMs of one layer (forward and both backward products) and of the output
    layer, and a streaming kernel of one layer's activation size."""
    seen: dict[tuple, tuple[str, Gemm]] = {}
    for gemm in layer_gemms(model, micro_batch, tp) + [logits_gemm(model, micro_batch, tp)]:
        for g in (gemm, *gemm.backward()):
            seen.setdefault((g.m, g.n, g.k, g.batch), (g.name, g))
    activation = model.seq * micro_batch * model.hidden
    return Plan(tuple(seen.values()), (("add", activation),))


def collective_sizes(model: TransformerModel, micro_batch: int = 1, tp: int = 1, precision: str = "fp32",
                     most_bytes: int = 16 << 20) -> list[tuple[str, int]]:
    """What a step reduces, at most ``most_bytes`` each: one layer's output activation (the
    tensor-parallel all-reduce, and the tokens an expert-parallel all-to-all moves) and one
    layer's gradients (a data-parallel bucket)."""
    e = BYTES[precision]
    activation = e * model.seq * micro_batch * model.hidden
    gradients = e * 12 * model.hidden ** 2 // tp
    return [("activation", min(activation, most_bytes)), ("layer gradients", min(gradients, most_bytes))]


def within_budget(gemm: Gemm, flops_per_s: float, seconds: float) -> Gemm:
    """``gemm`` with fewer batched products, then fewer rows, so that it takes about ``seconds``."""
    limit = max(seconds * flops_per_s, 2 * 16 * gemm.n * gemm.k)
    batch, m = gemm.batch, gemm.m
    while batch > 1 and 2 * batch * m * gemm.n * gemm.k > limit:
        batch = max(1, batch // 2)
    while m > 16 and 2 * batch * m * gemm.n * gemm.k > limit:
        m = max(16, m // 2)
    return Gemm(m, gemm.n, gemm.k, batch, gemm.name)


def device_gpu_type(device: str) -> str:
    """The catalog's name for ``device`` ('cpu', or the GPU torch reports on 'cuda')."""
    import torch

    if device == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name(torch.device(device)).lower()
    catalog_name = device_accelerator(name)
    if catalog_name is None:
        raise ValueError(f"no catalog GPU type for '{name}': give --gpu-type")
    return catalog_name


def _timer(device: str):
    import torch

    def run(fn, min_repeats: int, min_time_s: float) -> float:
        fn()  # warm up
        if device != "cpu":
            torch.cuda.synchronize()
        runs: list[float] = []
        start = time.perf_counter()
        while len(runs) < min_repeats or time.perf_counter() - start < min_time_s:
            t0 = time.perf_counter()
            fn()
            if device != "cpu":
                torch.cuda.synchronize()
            runs.append(time.perf_counter() - t0)
            if len(runs) >= 50:
                break
        return statistics.median(runs)

    return run


def profile(model: TransformerModel, *, micro_batch: int = 1, tp: int = 1, precision: str = "fp32",
            device: str = "cpu", budget_s: float = 5.0, min_repeats: int = 3, min_time_s: float = 0.02) -> dict:
    """Time ``model``'s kernels on ``device``; returns the kernel part of a measurement file."""
    import torch

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    run = _timer(device)
    plan = kernels_of(model, micro_batch, tp)

    probe = torch.randn(256, 256, dtype=dtype, device=device)
    rate = 2 * 256 ** 3 / run(lambda: probe @ probe, 3, 0.0)
    per_kernel = budget_s / (len(plan.gemms) + len(plan.streams)) / (min_repeats + 1)

    kernels = []
    for name, full in plan.gemms:
        g = within_budget(full, rate, per_kernel)
        a = torch.randn(g.batch, g.m, g.k, dtype=dtype, device=device)
        b = torch.randn(g.batch, g.k, g.n, dtype=dtype, device=device)
        fn = (lambda a=a, b=b: torch.bmm(a, b)) if g.batch > 1 else (lambda a=a[0], b=b[0]: a @ b)
        seconds = run(fn, min_repeats, min_time_s)
        kernels.append({"kind": "gemm", "name": name, "m": g.m, "n": g.n, "k": g.k, "batch": g.batch,
                        "precision": precision, "seconds": seconds,
                        **({"shrunk_from": [full.m, full.n, full.k, full.batch]} if g != full else {})})
    e = BYTES[precision]
    for name, elements in plan.streams:
        x = torch.randn(elements, dtype=dtype, device=device)
        y, out = torch.empty_like(x), torch.empty_like(x)
        seconds = run(lambda: torch.add(x, y, out=out), min_repeats, min_time_s)
        kernels.append({"kind": "memory", "name": name, "bytes": 3 * e * elements, "seconds": seconds})
    return {
        "device": f"cpu ({torch.get_num_threads()} threads)" if device == "cpu"
        else torch.cuda.get_device_name(torch.device(device)),
        "torch": torch.__version__,
        "note": f"kernels of {model.name} at micro-batch {micro_batch}, tensor-parallel {tp}, {precision}",
        "kernels": kernels,
    }
