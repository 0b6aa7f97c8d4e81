"""Print the leave-one-GPU-out error of the variants of the job-kind model that were tried and dropped.

Run from the repository root: ``python benchmarks/accuracy/perf_kinds_variants.py [--json]``. Each variant
changes one thing in the per-layer roofline of ``apportion.perf`` (docs/perf_kinds.md, "Tried and
dropped") and is scored exactly as ``benchmarks/accuracy/perf_kinds.py`` scores the shipped model: Gavel's
measured one-GPU steps/s ratios k80/v100 and p100/v100 (51 of them), each predicted by a model whose
fitted quantities were fitted only on the v100 and the other measured GPU (the k80's ratios with
what the p100 gave, and the other way round). The first row is the shipped model and reproduces
``perf_kinds.py``'s figure.

Variants:

- ``two_term_host``: step(gpu) = host_s(kind) + modelled_gpu_s(kind, gpu) / efficiency(kind), both
  unknowns solved per kind from the fold's two measured GPUs (v100 and the other one), the
  held-out GPU then predicted (Habitat's stance: keep the host part, scale the GPU part). Rule
  for ill-posed fits, stated before looking at the held-out GPU: a fit with host_s < 0 or
  efficiency outside [0.05, 1] (the GPU faster than the roofline says, or 20 times slower) is
  rejected and the kind keeps the one-term transfer. Also printed: the same with the guard off
  (host_s >= 0 and a positive prediction only), efficiency read as a multiplier in [0.05, 1],
  and host and GPU combined as max(host_s, gpu_s) (only the v100 can then be host-bound;
  otherwise the one-term transfer).
- ``achievable_bandwidth``: memory-bound work at a fraction of the datasheet bandwidth
  (``ACHIEVABLE_BANDWIDTH``, assumed), the kernel floor refitted per fold.
- ``host_dispatch_measured``: each kernel costs a host dispatch on top of its 5 us launch, timed
  here on this machine's CPU (a PyTorch element-wise op on a 16-element tensor, median of
  ``DISPATCH_OPS``), the kernel floor refitted per fold.
- ``winograd_off_kepler``: 3 × 3 stride-1 convolutions at 1/2.25 of their multiplies
  (Winograd F(2×2, 3×3); Lavin and Gray, CVPR 2016) on every GPU but the K80 (assumed: that
  cuDNN picks it from Maxwell on and not on Kepler), the kernel floor refitted per fold.

``--json`` prints one object: for each variant its ``mean_abs_error``, ``median_abs_error``,
``worst_abs_error``, ``by_gpu``, the floors it fitted, (for the two-term rows) how many fits were
accepted, and ``ratios`` (kind, gpu, predicted, measured, abs_error; ``fitted`` for two-term rows);
``two_term_host_catalog``: what the two-term model would do to the shipped t4/a100/h100 numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_kinds import TARGETS, measured_rates, summary  # noqa: E402

from apportion.perf import layers  # noqa: E402
from apportion.perf.accelerators import get_accelerator  # noqa: E402
from apportion.perf.kinds import FLOOR_GRID_CYCLES, REFERENCE_GPU, build_step, predict_step_time  # noqa: E402

GPUS = ("k80", "p100", "v100")
EFFICIENCY_RANGE = (0.05, 1.0)
# fraction of the datasheet bandwidth a streaming kernel reaches (assumed: the ordering of published
# STREAM-style GPU measurements, GDDR5 with ECC lowest and the V100's HBM2 highest; not one source)
ACHIEVABLE_BANDWIDTH = {"k80": 0.70, "p100": 0.76, "v100": 0.90}
WINOGRAD_MULTIPLY_SAVING = 2.25  # F(2x2, 3x3): 16 multiplies for 4 outputs instead of 36
DISPATCH_OPS = 20_000

# a kind's time on a GPU as (seconds with no kernel floor, seconds per cycle of floor)
TimeParts = Callable[[str, str], tuple[float, float]]


def _parts(step: layers.TrainingStep, acc) -> tuple[float, float]:
    timed = layers.step_time(step, acc, floor_cycles=0)
    return timed.total, timed.kernels / acc.clock_hz()


def shipped_parts(kind: str, gpu: str) -> tuple[float, float]:
    return _parts(build_step(kind), get_accelerator(gpu))


def bandwidth_parts(kind: str, gpu: str) -> tuple[float, float]:
    acc = get_accelerator(gpu)
    derated = dataclasses.replace(acc, memory_bandwidth=acc.memory_bandwidth * ACHIEVABLE_BANDWIDTH[gpu])
    return _parts(build_step(kind), derated)


def dispatch_parts(dispatch_s: float) -> TimeParts:
    def parts(kind: str, gpu: str) -> tuple[float, float]:
        step, acc = build_step(kind), get_accelerator(gpu)
        base, per_cycle = _parts(step, acc)
        return base + layers.step_time(step, acc, floor_cycles=0).kernels * dispatch_s, per_cycle
    return parts


def winograd_parts(kind: str, gpu: str) -> tuple[float, float]:
    winograd: set[str] = set()
    conv2d = layers.Net.conv2d

    def recording(net, name, shape, cout, k, stride=1, pad=0, *args, **kwargs):
        if k == 3 and stride == 1:
            winograd.add(name)
        return conv2d(net, name, shape, cout, k, stride, pad, *args, **kwargs)

    with mock.patch.object(layers.Net, "conv2d", recording):
        step = build_step(kind)
    if gpu != "k80":
        step = dataclasses.replace(step, layers=tuple(
            dataclasses.replace(layer, flops=layer.flops / WINOGRAD_MULTIPLY_SAVING) if layer.name in winograd
            else layer for layer in step.layers))
    return _parts(step, get_accelerator(gpu))


def measure_dispatch_s() -> float:
    """Median seconds of a small PyTorch element-wise op on this machine's CPU (one thread)."""
    import torch

    torch.set_num_threads(1)
    x, y = torch.ones(16), torch.ones(16)
    samples = []
    for op in (lambda: torch.add(x, y), lambda: torch.relu(x), lambda: x.mul_(1.0)):
        for _ in range(1000):
            op()
        start = time.perf_counter()
        for _ in range(DISPATCH_OPS):
            op()
        samples.append((time.perf_counter() - start) / DISPATCH_OPS)
    return statistics.median(samples)


def per_fold(time_parts: TimeParts) -> tuple[list[dict], dict[str, float]]:
    """Every ratio predicted with the kernel floor fitted on the other measured GPU only."""
    rates = measured_rates()
    parts = {(k, g): time_parts(k, g) for k in rates for g in GPUS}

    def ratio(kind, gpu, floor):
        (bv, cv), (bg, cg) = parts[kind, REFERENCE_GPU], parts[kind, gpu]
        return (bv + cv * floor) / (bg + cg * floor)

    def known(kind, gpu):
        return math.isfinite(rates[kind][gpu]) and rates[kind][gpu] > 0

    floors = {}
    for held_out in TARGETS:
        fit_on = [g for g in TARGETS if g != held_out]
        pairs = [(k, g, rates[k][g] / rates[k][REFERENCE_GPU]) for k in rates for g in fit_on if known(k, g)]
        floors[held_out] = float(min(FLOOR_GRID_CYCLES, key=lambda f: sum(
            abs(ratio(k, g, f) - m) / m for k, g, m in pairs)))
    rows = [_row(kind, gpu, ratio(kind, gpu, floors[gpu]), rates[kind]) for kind in rates for gpu in TARGETS]
    return rows, floors


def _row(kind: str, gpu: str, predicted: float, rates: dict[str, float], **extra) -> dict:
    measured = rates[gpu] / rates[REFERENCE_GPU]
    ok = math.isfinite(measured)
    return {"kind": kind, "gpu": gpu, "predicted": predicted, "measured": measured if ok else None,
            "abs_error": abs(predicted - measured) / measured if ok else None, **extra}


def two_term(floors: dict[str, float], combine: str = "sum", guard: str = "efficiency") -> list[dict]:
    """Host time plus the modelled GPU time over an efficiency, both fitted per kind on the v100
    and the other measured GPU, predicting the held-out one (see the module docstring)."""
    low, high = EFFICIENCY_RANGE
    rows = []
    for kind, rates in measured_rates().items():
        for held_out in TARGETS:
            other = next(g for g in TARGETS if g != held_out)
            modelled = {g: predict_step_time(kind, g, floor_cycles=floors[held_out]) for g in GPUS}
            t_ref = 1.0 / rates[REFERENCE_GPU]
            t_held = t_ref * modelled[held_out] / modelled[REFERENCE_GPU]  # the one-term transfer
            fitted = False
            if math.isfinite(rates[other]):
                t_other = 1.0 / rates[other]
                if combine == "sum":
                    slope = (t_ref - t_other) / (modelled[REFERENCE_GPU] - modelled[other])
                    host = t_ref - slope * modelled[REFERENCE_GPU]
                    if guard == "efficiency":  # time = host + modelled / efficiency
                        fitted = slope > 0 and host >= 0 and low <= 1.0 / slope <= high
                    elif guard == "multiplier":  # time = host + modelled × efficiency
                        fitted = host >= 0 and low <= slope <= high
                    else:  # only what a time must be: host >= 0 and the prediction positive
                        fitted = host >= 0 and host + slope * modelled[held_out] > 0
                    if fitted:
                        t_held = host + slope * modelled[held_out]
                elif t_ref / t_other > modelled[REFERENCE_GPU] / modelled[other]:
                    # max(host, gpu): the v100 host-bound at its own step, the other GPU-bound
                    slope = t_other / modelled[other]
                    fitted = guard != "efficiency" or low <= 1.0 / slope <= high
                    if fitted:
                        t_held = max(t_ref, slope * modelled[held_out])
            rows.append(_row(kind, held_out, t_ref / t_held, rates, fitted=fitted))
    return rows


def two_term_catalog(fit_on: str = "k80") -> list[dict]:
    """What ``two_term_host`` would ship: fitted on the v100 and ``fit_on`` (the pair whose fits
    predicted the p100 in the benchmark) with the shipped floor, each accepted kind's speed-up over
    the v100 on t4, a100 and h100 next to the one-term transfer's."""
    low, high = EFFICIENCY_RANGE
    out = []
    for kind, rates in measured_rates().items():
        if not math.isfinite(rates[fit_on]):
            continue
        modelled = {g: predict_step_time(kind, g) for g in (*GPUS, "t4", "a100", "h100")}
        t_ref, t_other = 1.0 / rates[REFERENCE_GPU], 1.0 / rates[fit_on]
        slope = (t_ref - t_other) / (modelled[REFERENCE_GPU] - modelled[fit_on])
        host = t_ref - slope * modelled[REFERENCE_GPU]
        if host >= 0 and slope > 0 and low <= 1.0 / slope <= high:
            out.append({"kind": kind, "host_s": host, "efficiency": 1.0 / slope, "speedup": {
                g: {"one_term": modelled[REFERENCE_GPU] / modelled[g], "two_term": t_ref / (host + slope * modelled[g])}
                for g in ("t4", "a100", "h100")}})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="the host dispatch timed over 500 ops instead of 20,000: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        global DISPATCH_OPS
        DISPATCH_OPS = 500

    shipped, floors = per_fold(shipped_parts)
    dispatch_s = measure_dispatch_s()
    variants: dict[str, tuple[list[dict], dict]] = {"shipped (one-term transfer)": (shipped, {"floors": floors})}
    for name, combine, guard in (("two_term_host", "sum", "efficiency"),
                                 ("two_term_host, no efficiency guard", "sum", "none"),
                                 ("two_term_host, efficiency as a multiplier", "sum", "multiplier"),
                                 ("two_term_host, max(host, gpu)", "max", "efficiency")):
        rows = two_term(floors, combine, guard)
        variants[name] = (rows, {"floors": floors, "fits_accepted": sum(r["fitted"] for r in rows),
                                 "fits": len(rows)})
    for name, parts in (("achievable_bandwidth", bandwidth_parts),
                        ("host_dispatch_measured", dispatch_parts(dispatch_s)),
                        ("winograd_off_kepler", winograd_parts)):
        rows, fold = per_fold(parts)
        variants[name] = (rows, {"floors": fold})

    result = {name: {**summary(rows), **extra, "ratios": rows} for name, (rows, extra) in variants.items()}
    result["host_dispatch_measured"]["dispatch_s"] = dispatch_s
    result["two_term_host_catalog"] = two_term_catalog()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    print("variants of the job-kind model, each fitted per fold on the v100 and the other measured GPU only")
    print(f"{'variant':44s} {'mean':>6s} {'median':>7s} {'worst':>7s}   k80 / p100 mean   floors k80, p100 folds")
    for name, (rows, extra) in variants.items():
        s = result[name]
        note = f"   ({extra['fits_accepted']} of {extra['fits']} fits accepted)" if "fits" in extra else ""
        print(f"{name:44s} {s['mean_abs_error']:6.1%} {s['median_abs_error']:7.1%} {s['worst_abs_error']:7.1%}   "
              f"{s['by_gpu']['k80']['mean_abs_error']:5.1%} / {s['by_gpu']['p100']['mean_abs_error']:5.1%}"
              f"     {extra['floors']['k80']:.0f}, {extra['floors']['p100']:.0f}{note}")
    print(f"host dispatch measured here: {dispatch_s * 1e6:.1f} us per op (added to each kernel's 5 us launch)")
    print()
    print("two_term_host where it changes the prediction (else the one-term transfer is kept):")
    print(f"{'kind':22s} {'gpu':>5s} {'shipped':>8s} {'two-term':>9s} {'Gavel':>7s}   {'error':>13s}")
    base = {(r["kind"], r["gpu"]): r for r in shipped}
    for r in variants["two_term_host"][0]:
        b = base[r["kind"], r["gpu"]]
        if r["fitted"] and r["measured"] is not None:
            print(f"{r['kind']:22s} {r['gpu']:>5s} {b['predicted']:8.3f} {r['predicted']:9.3f} {r['measured']:7.3f}   "
                  f"{b['abs_error']:5.1%} -> {r['abs_error']:5.1%}")
    print()
    print("two_term_host fitted on v100 + k80 for the catalog: speed-up over the v100, one-term -> two-term")
    print(f"{'kind':22s} {'host':>8s} {'eff.':>5s}   {'t4':>12s} {'a100':>12s} {'h100':>12s}")
    for c in result["two_term_host_catalog"]:
        cells = " ".join(f"{c['speedup'][g]['one_term']:5.2f}->{c['speedup'][g]['two_term']:5.2f}"
                         for g in ("t4", "a100", "h100"))
        print(f"{c['kind']:22s} {c['host_s'] * 1e3:6.1f}ms {c['efficiency']:5.2f}   {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
