"""Regenerate apportion/workloads/data/catalog.json: Gavel's measurements plus a per-layer transfer.

k80, p100 and v100 come straight from apportion/workloads/data/gavel_measured.json (Gavel's
published measurements, with provenance). t4, a100 and h100 were never measured by Gavel; each
kind's number on them is its measured v100 number scaled by the per-layer roofline of
apportion.perf (Habitat's idea):

    steps/s(target, 1) = steps/s(v100, 1) × time(v100) / time(target)
    steps/s(target, n) = steps/s(target, 1) × steps/s(v100, n) / steps/s(v100, 1)

time() is apportion.perf.kinds.predict_step_time (the kind's layers, FP32 datasheet peaks and
bandwidths, SM counts, a kernel's launch and floor); the multi-GPU scaling is the measured v100 one. See
docs/perf_kinds.md for the model and its validation. Run from the repository root:

    python scripts/build_catalog.py            # rewrites the shipped catalog.json
    python scripts/build_catalog.py --check    # exits 1 if the shipped file is stale
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
from pathlib import Path

import numpy as np

from apportion.perf.accelerators import get_accelerator
from apportion.perf.kinds import (ARCHITECTURES, REFERENCE_GPU, REFERENCE_REASON, predict_step_time,
                                  transfer_steps_per_s)
from apportion.perf.roofline import KERNEL_FLOOR_CYCLES, KERNEL_LAUNCH_S
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.gavel_throughputs import gavel_kind_name, parse_gavel_throughputs
from apportion.workloads.pair_model import predicted_pairs

DATA = Path(__file__).resolve().parents[1] / "apportion" / "workloads" / "data"
MEASURED_FILE = DATA / "gavel_measured.json"
CATALOG_FILE = DATA / "catalog.json"


CATALOG_NAMES = {  # the catalog's GPU type -> what apportion.perf.accelerators models it as
    "k80": "one GK210 die of a Tesla K80 (a K80 board shows up as two GPUs)",
    "p100": "Tesla P100 PCIe 16 GB (assumed: the Gavel sources read here do not name the variant)",
    "v100": "Tesla V100 SXM2 16 GB",
    "t4": "T4 16 GB (70 W, PCIe)",
    "a100": "A100 SXM4 40 GB",
    "h100": "H100 SXM5 80 GB",
}
MEASURED_TYPES = ("k80", "p100", "v100")
PREDICTED_TYPES = ("t4", "a100", "h100")
SCALES = (1, 2, 4, 8)
PREDICTION_DIGITS = 6  # significant digits kept for predicted figures

WORKLOADS = {  # kind-name prefix -> what Gavel trained (scheduler/job_table.py in its repository)
    "resnet18": "ResNet-18 on CIFAR-10 (image classification)",
    "resnet50": "ResNet-50 on ImageNet (image classification)",
    "transformer": "Transformer on Multi30k (translation)",
    "lm": "LSTM language model on WikiText-2 (language modelling)",
    "recommendation": "recommendation model on MovieLens ML-20M (recommendation)",
    "a3c": "A3C on Pong, PongDeterministic-v4 (reinforcement learning)",
    "cyclegan": "CycleGAN on monet2photo (image-to-image translation)",
}
WORKLOADS_SOURCE = (
    "stanford-futuredata/gavel scheduler/job_table.py @ 1a57defe04986b47e06b9a51a035239cb56e7030"
)


def accelerator_entry(gpu: str) -> dict:
    """The figures the transfer uses for ``gpu``, with their sources (from apportion.perf)."""
    acc = get_accelerator(gpu)
    return {
        "name": CATALOG_NAMES[gpu],
        "perf_accelerator": acc.name,
        "peak_fp32_tflops": acc.peak("fp32") / 1e12,
        "mem_bandwidth_gb_s": acc.memory_bandwidth / 1e9,
        "sms": acc.sms,
        "max_threads_per_sm": acc.threads_per_sm,
        "source": "; ".join(acc.sources[:1] + (acc.sm_source,)),
    }


def transfer(kind: str, v100_rates: list[float], gpu: str) -> list[float | None]:
    """Steps/s of ``kind`` on ``gpu`` at every scale: the v100 measurement moved by the model at
    one GPU, the v100's measured scaling beyond it. None where v100 has no number."""
    one = v100_rates[0]
    if not (math.isfinite(one) and one > 0):
        return [None] * len(SCALES)
    at_one = transfer_steps_per_s(kind, one, REFERENCE_GPU, gpu)
    return [_round(at_one * rate / one) if math.isfinite(rate) and rate > 0 else None
            for rate in v100_rates]


def build_catalog() -> dict:
    """The catalog document: measured and predicted steps/s, pairs, sources, the model's times."""
    measured_doc = json.loads(MEASURED_FILE.read_text(encoding="utf-8"))
    provenance = measured_doc["source"]
    table = parse_gavel_throughputs(measured_doc["throughputs"], str(MEASURED_FILE.name))
    assert table.gpu_types == MEASURED_TYPES and table.scales == SCALES, (table.gpu_types, table.scales)
    gavel_types = {gavel_kind_name(ast.literal_eval(key)[0]): ast.literal_eval(key)[0]
                   for key in measured_doc["throughputs"]["v100"]}
    kinds = {}
    for i, kind in enumerate(table.kinds):
        rates = {gpu: [_clean(table.steps_per_s[i, j, s]) for s in range(len(SCALES))]
                 for j, gpu in enumerate(MEASURED_TYPES)}
        v100 = list(table.steps_per_s[i, MEASURED_TYPES.index(REFERENCE_GPU), :])
        for gpu in PREDICTED_TYPES:
            rates[gpu] = transfer(kind, v100, gpu)
        model_ms = {gpu: predict_step_time(kind, gpu) * 1e3 for gpu in MEASURED_TYPES + PREDICTED_TYPES}
        kinds[kind] = {
            "gavel_job_type": gavel_types[kind],
            "workload": WORKLOADS[kind.split("/")[0]],
            "source": _source_text(rates, provenance),
            "predicted_gpu_types": list(PREDICTED_TYPES),
            "steps_per_s": rates,
            "model": {
                "architecture": ARCHITECTURES[kind.split("/")[0]],
                "step_ms": {gpu: _round(ms) for gpu, ms in model_ms.items()},
                "time_ratio_to_v100": {gpu: _round(model_ms[REFERENCE_GPU] / model_ms[gpu])
                                       for gpu in PREDICTED_TYPES},
            },
        }
    all_types = MEASURED_TYPES + PREDICTED_TYPES
    full = ThroughputTable(
        table.kinds, all_types, SCALES,
        np.array([[[np.nan if r is None else r for r in kinds[k]["steps_per_s"][g]] for g in all_types]
                  for k in table.kinds], dtype=float),
        table.pair_steps_per_s,
    )
    memory_gb = {gpu: get_accelerator(gpu).memory_bytes / 1e9 for gpu in all_types}
    predicted = predicted_pairs(full, MEASURED_TYPES, PREDICTED_TYPES, memory_gb)
    every_pair = {**table.pair_steps_per_s, **{key: (_round(x) or 0.0, _round(y) or 0.0)
                                               for key, (x, y) in predicted.items()}}
    pairs = {gpu: sorted(
        ([a, b, x, y] for (a, b, g), (x, y) in every_pair.items() if g == gpu),
        key=lambda row: (table.kinds.index(row[0]), table.kinds.index(row[1])),
    ) for gpu in all_types}
    return {
        "about": "apportion's built-in throughput catalog. Generated by scripts/build_catalog.py "
                 "from apportion/workloads/data/gavel_measured.json; do not edit by hand. "
                 "See docs/throughputs.md and docs/perf_kinds.md.",
        "units": "steps per second of the whole job (all its GPUs together); null = unknown or "
                 "does not fit",
        "gpu_types": list(MEASURED_TYPES + PREDICTED_TYPES),
        "scales": list(SCALES),
        "measured_source": provenance,
        "workload_descriptions_source": WORKLOADS_SOURCE,
        "prediction_model": (
            "t4, a100, h100: steps/s(target, 1) = steps/s measured(v100, 1) x model_time(v100) / "
            "model_time(target), where model_time is apportion.perf.kinds.predict_step_time: the kind's "
            "layers as published (forward FLOPs and bytes; backward 2x; PyTorch 1.x optimizer sweeps) "
            "priced per layer at max(FLOPs / (FP32 peak x utilisation), bytes / (bandwidth x "
            "utilisation)) plus, per kernel, a " f"{KERNEL_LAUNCH_S * 1e6:g}" " us launch and a floor of "
            f"{KERNEL_FLOOR_CYCLES:g}" " cycles at the GPU's clock (fitted on the k80/p100/v100 ratios), "
            "utilisation from the best GEMM tile (128x128 down to 32x32 and 16-wide) over the GPU's SMs "
            "(wave quantization) or one thread per element. "
            "At 2, 4, 8 GPUs the v100's measured scaling is applied: steps/s(target, n) = "
            "steps/s(target, 1) x steps/s(v100, n) / steps/s(v100, 1). Approximate: FP32 only (no tensor "
            "cores, no TF32, no mixed precision), host-side time (Python, data loading, emulators) not "
            "modelled but carried over from the v100 measurement, no interconnect model, memory capacity "
            "ignored. Validation (leave the GPU out): docs/perf_kinds.md, benchmarks/accuracy/perf_kinds.py. "
            "Pairs on t4, a100, h100 (space sharing): apportion.workloads.pair_model, each job keeping "
            "the smallest fraction of its speed alone that it kept in the pair on k80, p100 or v100, "
            "formed only where the pair fitted on every measured GPU with no more memory; "
            "docs/throughputs.md, benchmarks/accuracy/pair_model.py."
        ),
        "reference_gpu": REFERENCE_GPU,
        "reference_gpu_reason": REFERENCE_REASON,
        "accelerators": {gpu: accelerator_entry(gpu) for gpu in MEASURED_TYPES + PREDICTED_TYPES},
        "kinds": kinds,
        "pairs_at_one_gpu": {"columns": ["kind", "other_kind", "kind_steps_per_s",
                                         "other_steps_per_s"], **pairs},
    }


def _source_text(rates: dict, provenance: dict) -> str:
    measured = (f"k80, p100, v100 measured by Gavel (Narayanan et al., OSDI 2020): "
                f"{provenance['repository']} {provenance['path']} @ {provenance['commit']}")
    missing = [f"{gpu} at {', '.join(str(s) for s, r in zip(SCALES, rates[gpu]) if r is None)} GPU(s)"
               for gpu in MEASURED_TYPES if None in rates[gpu]]
    gaps = f" (null where Gavel has no number or the job did not fit: {'; '.join(missing)})" if missing else ""
    return (f"{measured}{gaps}; t4, a100, h100 predicted from the v100 measurement by the per-layer "
            f"roofline transfer of apportion.perf.kinds (model time on v100 / model time on the target, "
            f"FP32 datasheet peaks and bandwidths; v100's measured multi-GPU scaling beyond one GPU; "
            f"null where v100 has no number): not measured")


def _clean(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _round(value: float, digits: int = PREDICTION_DIGITS) -> float | None:
    return None if not math.isfinite(value) else float(f"{value:.{digits}g}")


def render(catalog: dict) -> str:
    """The catalog as JSON text: one line per GPU type of a kind and per pair, diff-friendly."""
    dump = lambda value: json.dumps(value, ensure_ascii=False)  # noqa: E731
    out = ["{"]
    for key, value in catalog.items():
        if key == "kinds":
            out.append('  "kinds": {')
            for n, (kind, entry) in enumerate(value.items()):
                out.append(f"    {dump(kind)}: {{")
                fields = []
                for field, item in entry.items():
                    if isinstance(item, dict):
                        rows = ",\n".join(f"        {dump(k)}: {dump(v)}" for k, v in item.items())
                        fields.append(f"      {dump(field)}: {{\n{rows}\n      }}")
                    else:
                        fields.append(f"      {dump(field)}: {dump(item)}")
                out.append(",\n".join(fields))
                out.append("    }" + ("," if n < len(value) - 1 else ""))
            out.append("  },")
        elif key == "pairs_at_one_gpu":
            out.append('  "pairs_at_one_gpu": {')
            blocks = [f'    "columns": {dump(value["columns"])}']
            for gpu in [g for g in value if g != "columns"]:
                rows = ",\n".join(f"      {dump(row)}" for row in value[gpu])
                blocks.append(f"    {dump(gpu)}: [\n{rows}\n    ]")
            out.append(",\n".join(blocks))
            out.append("  }")
        else:
            text = json.dumps(value, ensure_ascii=False, indent=2).replace("\n", "\n  ")
            out.append(f"  {dump(key)}: {text},")
    out.append("}")
    return "\n".join(out) + "\n"


def write_catalog(path: Path = CATALOG_FILE) -> Path:
    """Build the catalog and write it to ``path``."""
    text = render(build_catalog())
    json.loads(text)  # the hand-made layout must still be JSON
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=CATALOG_FILE, help="where to write")
    parser.add_argument("--check", action="store_true", help="only check the shipped file is current")
    args = parser.parse_args(argv)
    if args.check:
        current = CATALOG_FILE.read_text(encoding="utf-8") if CATALOG_FILE.exists() else ""
        if current != render(build_catalog()):
            print(f"{CATALOG_FILE} is stale: run python scripts/build_catalog.py", file=sys.stderr)
            return 1
        print(f"{CATALOG_FILE} is current")
        return 0
    print(f"wrote {write_catalog(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
