"""Print how well the per-layer roofline transfers Gavel's measurements between GPU types.

Run from the repository root: ``python benchmarks/accuracy/perf_kinds.py [--json]``. For every job kind
of the built-in catalog it prints the model's ratio of one-GPU step rates k80/v100 and p100/v100
against Gavel's measured ratio: the v100 measurement moved to the other GPU by the model, as the
catalog moves it to t4, a100 and h100. This is a leave-one-GPU-out check: the model
(apportion.perf.kinds) is built from architectures, datasheets and published GPU properties,
and its one fitted constant, a kernel's fixed cost in clock cycles (``fit_kernel_floor``), is
fitted per fold on the GPU not held out: the k80 ratios are predicted with the floor fitted to
the p100 ratios, and the p100 ratios with the floor fitted to the k80 ratios. Every predicted
ratio is thus of a GPU whose numbers the model never saw, and the error here is an honest
figure of what moving a v100 measurement to an unmeasured GPU is worth.

Errors: ``mean_abs_error`` and ``median_abs_error`` are relative, |predicted − measured| /
measured, over every predicted ratio (51: k80 and p100 for each kind Gavel measured there);
``mean_abs_log_error`` is the mean |log(predicted / measured)|; the table prints factors,
max(predicted/measured, measured/predicted). ``datasheet`` is the same model with every GPU at
its datasheet peak (no Kepler issue limit, the K80 at its boost clock): the model before
``apportion.perf.roofline.sustained_peak``. For comparison the table also prints the two-parameter
fit the catalog once used (step_time = a / peak_fp32 + b / bandwidth, a, b >= 0, NNLS on relative
error), fitted on the other two GPUs (leave one out).

``--json`` prints one JSON object: ``mean_abs_error``, ``median_abs_error``,
``mean_abs_log_error``, ``worst_abs_error``, ``by_gpu``, ``ratios`` (kind, gpu, predicted,
measured, abs_error), ``kernel_floor_cycles`` (the floor fitted in each fold, by held-out GPU),
``no_floor`` (the same figures with no kernel floor, nothing fitted) and ``datasheet`` (the
datasheet-peak model, floors fitted the same way).
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.perf.accelerators import get_accelerator  # noqa: E402
from apportion.perf.kinds import REFERENCE_GPU, fit_kernel_floor, predict_step_time  # noqa: E402
from apportion.workloads.catalog import builtin_throughputs  # noqa: E402

MEASURED = ("k80", "p100", "v100")
TARGETS = ("k80", "p100")


def factor(predicted: float, measured: float) -> float:
    return math.exp(abs(math.log(predicted / measured)))


def old_fit_rates(rates: dict[str, float], fit_on: tuple[str, ...]) -> dict[str, float] | None:
    """Steps/s on every measured GPU from the old two-term fit to the ``fit_on`` GPUs."""
    known = [g for g in fit_on if math.isfinite(rates[g]) and rates[g] > 0]
    if len(known) < 2:
        return None

    def terms(gpu):
        acc = get_accelerator(gpu)
        return 1.0 / (acc.peak("fp32") / 1e12), 1.0 / (acc.memory_bandwidth / 1e12)

    design = np.array([terms(g) for g in known]) * np.array([[rates[g]] for g in known])
    coef, _ = nnls(design, np.ones(len(known)))
    return {g: 1.0 / float(np.dot(coef, terms(g))) for g in MEASURED}


def measured_rates() -> dict[str, dict[str, float]]:
    """Gavel's one-GPU steps/s of every catalog kind on k80, p100 and v100."""
    table = builtin_throughputs()
    cols = [table.gpu_types.index(g) for g in MEASURED]
    return {kind: dict(zip(MEASURED, map(float, table.steps_per_s[i, cols, 0]))) for i, kind in enumerate(table.kinds)}


def fold_floors(sustained: bool = True) -> dict[str, float]:
    """The kernel floor for each held-out GPU, fitted on the other measured target only."""
    rates = measured_rates()
    return {gpu: fit_kernel_floor(rates, [g for g in TARGETS if g != gpu], REFERENCE_GPU, sustained)
            for gpu in TARGETS}


def transfer_ratios(sustained: bool = True, floors: dict[str, float] | None = None) -> list[dict]:
    """Every predicted ratio (target / v100 one-GPU steps/s) next to Gavel's measured one; the
    target's ratio uses ``floors[target]`` (fitted without it), or no floor where not given."""
    out = []
    for kind, rates in measured_rates().items():
        for gpu in TARGETS:
            floor = (floors or {}).get(gpu, 0.0)
            measured = rates[gpu] / rates[REFERENCE_GPU]
            predicted = (predict_step_time(kind, REFERENCE_GPU, sustained, floor)
                         / predict_step_time(kind, gpu, sustained, floor))
            out.append({"kind": kind, "gpu": gpu, "reference": REFERENCE_GPU, "predicted": predicted,
                        "measured": measured if math.isfinite(measured) else None,
                        "abs_error": abs(predicted - measured) / measured if math.isfinite(measured) else None})
    return out


def summary(ratios: list[dict]) -> dict:
    known = [r for r in ratios if r["measured"] is not None]
    errors = [r["abs_error"] for r in known]
    logs = [abs(math.log(r["predicted"] / r["measured"])) for r in known]
    worst = max(known, key=lambda r: r["abs_error"])
    return {
        "mean_abs_error": statistics.fmean(errors),
        "median_abs_error": statistics.median(errors),
        "mean_abs_log_error": statistics.fmean(logs),
        "median_error_factor": math.exp(statistics.median(logs)),
        "worst_abs_error": worst["abs_error"],
        "worst": f"{worst['kind']} on {worst['gpu']}",
        "ratios_compared": len(known),
        "by_gpu": {g: {"mean_abs_error": statistics.fmean(r["abs_error"] for r in known if r["gpu"] == g),
                       "median_abs_error": statistics.median(r["abs_error"] for r in known if r["gpu"] == g)}
                   for g in TARGETS},
    }


def old_fit_summary() -> dict:
    table = builtin_throughputs()
    cols = [table.gpu_types.index(g) for g in MEASURED]
    errors = []
    for i, _ in enumerate(table.kinds):
        rates = dict(zip(MEASURED, table.steps_per_s[i, cols, 0]))
        for gpu in TARGETS:
            measured = rates[gpu] / rates[REFERENCE_GPU]
            fit = old_fit_rates(rates, tuple(g for g in MEASURED if g != gpu))
            if fit and math.isfinite(measured):
                errors.append(abs(fit[gpu] / fit[REFERENCE_GPU] - measured) / measured)
    return {"mean_abs_error": statistics.fmean(errors), "median_abs_error": statistics.median(errors),
            "ratios_compared": len(errors)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="the same figures (they take seconds): the test suite runs it")
    args = parser.parse_args()
    floors = fold_floors()
    ratios = transfer_ratios(floors=floors)
    datasheet = transfer_ratios(sustained=False, floors=fold_floors(sustained=False))
    result = {**summary(ratios), "kernel_floor_cycles": floors, "ratios": ratios,
              "no_floor": summary(transfer_ratios()), "datasheet": summary(datasheet),
              "old_fit_leave_one_out": old_fit_summary()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    before = {(r["kind"], r["gpu"]): r for r in transfer_ratios()}
    print("ratio of one-GPU steps/s to v100's: model (never sees the target's numbers) vs Gavel's measurement")
    print(f"kernel floor fitted per fold: {floors['k80']:.0f} cycles for k80 (fitted on p100), "
          f"{floors['p100']:.0f} for p100 (fitted on k80)")
    print(f"{'kind':22s} {'gpu':>5s} {'model':>7s} {'Gavel':>7s} {'error':>7s}   {'no floor':>9s} {'error':>7s}")
    for r in ratios:
        if r["measured"] is None:
            print(f"{r['kind']:22s} {r['gpu']:>5s} {r['predicted']:7.3f} {'—':>7s}")
            continue
        b = before[(r["kind"], r["gpu"])]
        print(f"{r['kind']:22s} {r['gpu']:>5s} {r['predicted']:7.3f} {r['measured']:7.3f} {r['abs_error']:7.1%}   "
              f"{b['predicted']:9.3f} {b['abs_error']:7.1%}")
    print()
    print(f"{'relative error of the ratio':34s} {'mean':>7s} {'median':>7s} {'worst':>7s}   mean k80 / p100")
    for name, s in (("model (floor fitted per fold)", result), ("model, no kernel floor", result["no_floor"]),
                    ("model at datasheet peaks", result["datasheet"])):
        print(f"{name:34s} {s['mean_abs_error']:7.1%} {s['median_abs_error']:7.1%} {s['worst_abs_error']:7.1%}   "
              f"{s['by_gpu']['k80']['mean_abs_error']:.1%} / {s['by_gpu']['p100']['mean_abs_error']:.1%}")
    old = result["old_fit_leave_one_out"]
    print(f"{'old two-term fit, leave one out':34s} {old['mean_abs_error']:7.1%} {old['median_abs_error']:7.1%}")
    print(f"{result['ratios_compared']} ratios; mean |log(predicted/measured)| {result['mean_abs_log_error']:.3f} "
          f"(no floor {result['no_floor']['mean_abs_log_error']:.3f}); median error factor "
          f"{result['median_error_factor']:.2f}; worst: {result['worst']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
