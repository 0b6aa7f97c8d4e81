"""Print how well the per-layer roofline transfers Gavel's measurements between GPU types.

Run from the repository root: ``python benchmarks/perf_kinds.py``. For every job kind of the
built-in catalog it prints the model's ratio of one-GPU step rates k80/v100 and p100/v100
against Gavel's measured ratio. This is a leave-the-target-out check: the model
(apportion.perf.kinds) is built from architectures and datasheets and never sees a measured
k80 or p100 number, so its error here is an honest figure of how good the transfer of a v100
measurement to an unmeasured GPU (t4, a100, h100 in the catalog) can be expected to be.

For comparison it also prints the two-parameter fit the catalog used before
(step_time = a / peak_fp32 + b / bandwidth, a, b >= 0, NNLS on relative error): fitted on all
three GPUs (in sample, as the catalog used it) and fitted on the other two only (leave one
out: with two points for two parameters the fit passes through both).

Errors are factors, max(predicted/measured, measured/predicted): 1.25 means off by 25%.
"""

import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apportion.perf.accelerators import get_accelerator  # noqa: E402
from apportion.perf.kinds import predict_step_time  # noqa: E402
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


def main() -> int:
    table = builtin_throughputs()
    cols = [table.gpu_types.index(g) for g in MEASURED]
    errors = {"model": {g: [] for g in TARGETS}, "old fit, leave one out": {g: [] for g in TARGETS},
              "old fit, in sample": {g: [] for g in TARGETS}}
    print("ratio of one-GPU steps/s to v100's: model (never sees k80/p100) vs Gavel's measurement")
    print(f"{'kind':22s} {'k80/v100':>9s} {'Gavel':>7s} {'error':>6s}   {'p100/v100':>9s} {'Gavel':>7s} "
          f"{'error':>6s}   {'old fit LOO err k80':>19s} {'p100':>5s}")
    for i, kind in enumerate(table.kinds):
        rates = dict(zip(MEASURED, table.steps_per_s[i, cols, 0]))
        t_v100 = predict_step_time(kind, "v100")
        cells = []
        loo = []
        for gpu in TARGETS:
            measured = rates[gpu] / rates["v100"]
            predicted = t_v100 / predict_step_time(kind, gpu)
            if math.isfinite(measured):
                err = factor(predicted, measured)
                errors["model"][gpu].append(err)
                cells.append(f"{predicted:9.3f} {measured:7.3f} {err:6.2f}")
            else:
                cells.append(f"{predicted:9.3f} {'—':>7s} {'':6s}")
            fit = old_fit_rates(rates, tuple(g for g in MEASURED if g != gpu))
            if fit and math.isfinite(measured):
                err = factor(fit[gpu] / fit["v100"], measured)
                errors["old fit, leave one out"][gpu].append(err)
                loo.append(f"{err:5.2f}")
            else:
                loo.append(f"{'—':>5s}")
            full = old_fit_rates(rates, MEASURED)
            if full and math.isfinite(measured):
                errors["old fit, in sample"][gpu].append(factor(full[gpu] / full["v100"], measured))
        print(f"{kind:22s} {cells[0]}   {cells[1]}   {loo[0]:>19s} {loo[1]:>5s}")
    print()
    print(f"{'error of the ratio (factor)':40s} {'median':>7s} {'worst':>7s}   median k80 / p100")
    for name, per_gpu in errors.items():
        every = per_gpu["k80"] + per_gpu["p100"]
        print(f"{name:40s} {np.median(every):7.2f} {max(every):7.2f}   "
              f"{np.median(per_gpu['k80']):.2f} / {np.median(per_gpu['p100']):.2f}  ({len(every)} ratios)")
    worst = max(((e, k, g) for g in TARGETS for e, k in zip(errors["model"][g], [
        kind for j, kind in enumerate(table.kinds)
        if math.isfinite(table.steps_per_s[j, cols[MEASURED.index(g)], 0])])), default=None)
    if worst:
        print(f"model's worst ratio: {worst[1]} on {worst[2]} (off by a factor of {worst[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
