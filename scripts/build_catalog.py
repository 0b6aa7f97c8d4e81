"""Regenerate apportion/workloads/data/catalog.json: Gavel's measurements plus a roofline transfer.

k80, p100 and v100 come straight from apportion/workloads/data/gavel_measured.json (Gavel's
published measurements, with provenance). t4, a100 and h100 were never measured by Gavel; for
each job kind and scale this script fits

    step_time(gpu) = a / peak_fp32(gpu) + b / memory_bandwidth(gpu),   a, b >= 0

to the measured GPUs by non-negative least squares on relative error, and predicts the new GPUs
from their datasheet figures (ACCELERATORS below). A stand-in until apportion.perf exists; see
docs/throughputs.md for the model's limits. Run from the repository root:

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
from typing import NamedTuple

import numpy as np
from scipy.optimize import nnls

from apportion.workloads.gavel_throughputs import gavel_kind_name, parse_gavel_throughputs

DATA = Path(__file__).resolve().parents[1] / "apportion" / "workloads" / "data"
MEASURED_FILE = DATA / "gavel_measured.json"
CATALOG_FILE = DATA / "catalog.json"


class Accelerator(NamedTuple):
    name: str
    peak_fp32_tflops: float  # dense FP32 on the CUDA cores, no tensor cores, at boost clock
    mem_bandwidth_gb_s: float
    source: str


ACCELERATORS = {
    "k80": Accelerator(
        "Tesla K80, one of its two GK210 dies (a K80 board shows up as two GPUs)", 4.37, 240.0,
        "NVIDIA Tesla K80 datasheet (2014): 8.73 TFLOPS FP32 with GPU Boost and 480 GB/s for "
        "the two-die board; halved per die",
    ),
    "p100": Accelerator(
        "Tesla P100 PCIe 16 GB (assumed: the Gavel sources read here do not name the variant)",
        9.3, 732.0,
        "NVIDIA Tesla P100 PCIe datasheet: 9.3 TFLOPS FP32, 732 GB/s (16 GB HBM2); the SXM2 "
        "part is 10.6 TFLOPS / 732 GB/s",
    ),
    "v100": Accelerator(
        "Tesla V100 SXM2 16 GB", 15.7, 900.0,
        "NVIDIA Tesla V100 datasheet: SXM2 15.7 TFLOPS FP32, 900 GB/s HBM2",
    ),
    "t4": Accelerator(
        "T4 16 GB (70 W, PCIe)", 8.1, 320.0,
        "NVIDIA T4 datasheet: 8.1 TFLOPS FP32, 320 GB/s GDDR6",
    ),
    "a100": Accelerator(
        "A100 SXM4 40 GB", 19.5, 1555.0,
        "NVIDIA A100 datasheet: 19.5 TFLOPS FP32 (non-tensor), 1,555 GB/s for the 40 GB part",
    ),
    "h100": Accelerator(
        "H100 SXM5 80 GB", 67.0, 3350.0,
        "NVIDIA H100 datasheet: SXM 67 TFLOPS FP32 (non-tensor), 3.35 TB/s HBM3",
    ),
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


def fit_roofline(steps_per_s: np.ndarray, gpus: tuple[str, ...]) -> tuple[float, float] | None:
    """(a, b) >= 0 of step_time = a/TFLOPS + b/(TB/s) fit to the finite rates, or None if < 2."""
    known = [(g, r) for g, r in zip(gpus, steps_per_s) if math.isfinite(r) and r > 0]
    if len(known) < 2:
        return None
    step_time = np.array([1.0 / r for _, r in known])
    design = np.array([_roofline_terms(g) for g, _ in known])
    coef, _ = nnls(design / step_time[:, None], np.ones(len(known)))  # relative error
    return float(coef[0]), float(coef[1])


def predict(coef: tuple[float, float], gpu: str) -> float:
    """Steps/s the fitted roofline gives on ``gpu``."""
    seconds = float(np.dot(coef, _roofline_terms(gpu)))
    return 1.0 / seconds if seconds > 0 else math.nan


def _roofline_terms(gpu: str) -> tuple[float, float]:
    spec = ACCELERATORS[gpu]
    return 1.0 / spec.peak_fp32_tflops, 1000.0 / spec.mem_bandwidth_gb_s


def build_catalog() -> dict:
    """The catalog document: measured and predicted steps/s, pairs, sources, fits."""
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
        fits = {}
        for s, scale in enumerate(SCALES):
            coef = fit_roofline(table.steps_per_s[i, :, s], MEASURED_TYPES)
            for gpu in PREDICTED_TYPES:
                rates.setdefault(gpu, []).append(_round(predict(coef, gpu)) if coef else None)
            if coef:
                errors = [abs(predict(coef, g) / r - 1.0)
                          for g, r in zip(MEASURED_TYPES, table.steps_per_s[i, :, s]) if math.isfinite(r)]
                fits[str(scale)] = {"a_tflop": _round(coef[0]), "b_tb": _round(coef[1]),
                                    "max_rel_error_on_measured": _round(max(errors), 3)}
        kinds[kind] = {
            "gavel_job_type": gavel_types[kind],
            "workload": WORKLOADS[kind.split("/")[0]],
            "source": _source_text(rates, provenance),
            "predicted_gpu_types": list(PREDICTED_TYPES),
            "steps_per_s": rates,
            "roofline_fit": fits,
        }
    pairs = {gpu: sorted(
        ([a, b, x, y] for (a, b, g), (x, y) in table.pair_steps_per_s.items() if g == gpu),
        key=lambda row: (table.kinds.index(row[0]), table.kinds.index(row[1])),
    ) for gpu in MEASURED_TYPES}
    return {
        "about": "apportion's built-in throughput catalog. Generated by scripts/build_catalog.py "
                 "from apportion/workloads/data/gavel_measured.json; do not edit by hand. "
                 "See docs/throughputs.md.",
        "units": "steps per second of the whole job (all its GPUs together); null = unknown or "
                 "does not fit",
        "gpu_types": list(MEASURED_TYPES + PREDICTED_TYPES),
        "scales": list(SCALES),
        "measured_source": provenance,
        "workload_descriptions_source": WORKLOADS_SOURCE,
        "prediction_model": (
            "t4, a100, h100: for each kind and scale, step_time = a / peak_fp32_TFLOPS + "
            "b / memory_TB_per_s with a, b >= 0, fit by scipy.optimize.nnls on relative error "
            "to the measured k80/p100/v100 step times (at least two needed), then evaluated with "
            "the datasheet figures in 'accelerators'. Approximate: FP32 peaks only (no tensor "
            "cores, no mixed precision), no fixed per-step overhead, multi-GPU communication "
            "folded into the fitted terms. A stand-in until apportion.perf exists."
        ),
        "accelerators": {gpu: spec._asdict() for gpu, spec in ACCELERATORS.items()},
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
    return (f"{measured}{gaps}; t4, a100, h100 predicted by the roofline transfer in "
            f"scripts/build_catalog.py from those measurements and datasheet peak FP32 / memory "
            f"bandwidth (a stand-in until apportion.perf)")


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
            for gpu in MEASURED_TYPES:
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
