"""Fit the six Pollux job profiles into apportion's built-in elastic job kinds.

Reads ../shared/profiles/pollux/ (the Pollux authors' measurements, Apache-2.0; see its
README) and writes apportion/workloads/data/elastic_kinds.json, which the product reads
instead, so that it never needs ../shared:

- step-time parameters (apportion.core.goodput) fitted by least squares to every measured
  step of placements.csv and scalability.csv, with the fit's error;
- batch limits: M0 and the largest batch are the smallest and largest batch of the
  validation runs, micro-batches the range the placements measured (YOLOv3's capped at 8,
  as the Pollux simulator does);
- the target: the statistical progress the shortest validation run reached by its last
  epoch (the Pollux simulator's completion point), in M0-equivalent examples;
- the gradient noise scale through training: at the start of each epoch, the geometric mean
  over the validation runs of M0 · grad_var / grad_sqr (rows with a zero norm left out).

    python scripts/fit_elastic_kinds.py [--profiles DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apportion.core.goodput_fit import StepObservations, fit_step_params  # noqa: E402

MODELS = {  # name: (what it trains, largest micro-batch if the measurements' is too large to fit)
    "bert": ("BERT fine-tuning on SQuAD (question answering)", None),
    "cifar10": ("ResNet-18 on CIFAR-10 (image classification)", None),
    "deepspeech2": ("DeepSpeech2 on CMU-ARCTIC (speech recognition)", None),
    "imagenet": ("ResNet-50 on ImageNet (image classification)", None),
    "ncf": ("NCF on MovieLens (recommendation)", None),
    "yolov3": ("YOLOv3 on PASCAL VOC (object detection)", 8),
}
MEASURED_ON = "t4"
SOURCE = ("Pollux (Qiao et al., OSDI 2021) job profiles: petuum/adaptdl, branch osdi21-artifact, "
          "simulator/traces/, measured on 16 nodes x 4 NVIDIA T4")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def observations(model_dir: Path) -> StepObservations:
    nodes, gpus, local, step, sync = [], [], [], [], []
    for row in read_csv(model_dir / "placements.csv"):
        placement = row["placement"].strip()
        nodes.append(len(placement))
        gpus.append(sum(int(c) for c in placement))
        local.append(float(row["local_bsz"]))
        step.append(float(row["step_time"]))
        sync.append(float(row["sync_time"]))
    for row in read_csv(model_dir / "scalability.csv"):
        nodes.append(int(row["num_nodes"]))
        gpus.append(int(row["num_replicas"]))
        local.append(float(row["local_bsz"]))
        step.append(float(row["step_time"]))
        sync.append(float(row["sync_time"]))
    return StepObservations.of(nodes=nodes, gpus=gpus, local_batch=local, step_time_s=step, sync_time_s=sync)


def validation_runs(model_dir: Path) -> dict[int, list[dict[str, str]]]:
    runs = {int(p.stem.split("-")[-1]): read_csv(p) for p in model_dir.glob("validation-*.csv")}
    return dict(sorted(runs.items()))


def progress_and_noise(runs: dict[int, list[dict[str, str]]]) -> tuple[float, int, list[float], list[float]]:
    """(target progress in M0 steps, epochs, fraction of the target at each epoch's start, noise scale then)."""
    init_batch = min(runs)
    epochs = min(len(rows) for rows in runs.values())
    target = min(float(rows[epochs - 1]["progress"]) for rows in runs.values())
    fractions, noise = [], []
    for epoch in range(epochs):
        start = 0.0 if epoch == 0 else float(np.mean([float(rows[epoch - 1]["progress"]) for rows in runs.values()]))
        logs = []
        for rows in runs.values():
            sqr, var = float(rows[epoch]["grad_sqr"]), float(rows[epoch]["grad_var"])
            if sqr > 0 and var > 0:
                logs.append(math.log(init_batch * var / sqr))
        if logs:
            fractions.append(min(start / target, 1.0))
            noise.append(math.exp(float(np.mean(logs))))
    return target, epochs, fractions, noise


def fit_model(name: str, model_dir: Path) -> dict:
    description, local_cap = MODELS[name]
    obs = observations(model_dir)
    fit = fit_step_params(obs)
    runs = validation_runs(model_dir)
    init_batch, max_batch = min(runs), max(runs)
    target, epochs, fractions, noise = progress_and_noise(runs)
    max_local = float(np.max(obs.local_batch)) if local_cap is None else float(local_cap)
    return {
        "description": description,
        "init_batch": init_batch,
        "max_batch": max_batch,
        "min_local_batch": float(np.min(obs.local_batch)),
        "max_local_batch": max_local,
        "epochs": epochs,
        "target_examples": round(target * init_batch, 1),
        "step_time": {MEASURED_ON: {k: float(f"{v:.6g}") for k, v in fit.as_dict().items()}},
        "fit": {
            "observations": len(obs),
            "rmsle": round(fit.rmsle, 4),
            "median_abs_pct_error": round(fit.median_abs_pct_error, 2),
            "held_at_prior": list(fit.fixed),
        },
        "noise_scale": {
            "progress_fraction": [round(f, 5) for f in fractions],
            "examples": [float(f"{v:.5g}") for v in noise],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=ROOT / ".." / "shared" / "profiles" / "pollux")
    parser.add_argument("--out", type=Path, default=ROOT / "apportion" / "workloads" / "data" / "elastic_kinds.json")
    args = parser.parse_args(argv)
    if not args.profiles.is_dir():
        print(f"{args.profiles}: no such directory (the Pollux profiles, see ../shared/profiles/pollux)",
              file=sys.stderr)
        return 2
    kinds = {name: fit_model(name, args.profiles / name) for name in MODELS}
    data = {
        "source": SOURCE,
        "licence": "Apache-2.0",
        "measured_on": MEASURED_ON,
        "derived_by": "scripts/fit_elastic_kinds.py (least squares on log step and compute times)",
        "kinds": kinds,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for name, kind in kinds.items():
        print(f"{name:12s} {kind['fit']['observations']:5d} steps  rmsle {kind['fit']['rmsle']:.3f}  "
              f"median |error| {kind['fit']['median_abs_pct_error']:.1f}%  target {kind['target_examples']:.3g} examples")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
