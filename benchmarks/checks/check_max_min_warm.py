"""Check the max-min LP's warm models against cold solves, re-solve by re-solve, on a replay.

    python benchmarks/checks/check_max_min_warm.py [--jobs 3000]        # the first N jobs of Philly

Replays the Philly trace (or its first N jobs) under max-min-fairness. At every re-solve the
same classes and counts are also solved on a model built afresh; prints the largest relative
difference in the max-min level z and in the last stage's total Σ m·a·x, and the number of
re-solves. Both stages have one optimal value, though often many optimal shares, so warm and
cold may hand out shares differently while agreeing on both values.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from apportion.experiment import WorkloadSettings, load_inputs, run_policy
from apportion.solve import max_min

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
PHILLY_CLUSTER = "v100:160,p100:160,k80:160"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000, help="the trace's first N jobs (0: all)")
    parser.add_argument("--quick", action="store_true", help="the trace's first 50 jobs: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs = 50

    level_diff: list[float] = []
    total_diff: list[float] = []
    warm_solve = max_min.MaxMinModel.solve

    def checked(model, count, *, level=True):
        x, z = warm_solve(model, count, level=level)
        if level and count.any():
            a = np.zeros((model.num_classes, model.num_types))
            a[model.col_class, model.col_type] = model.col_a
            counted = np.flatnonzero(count > 0)
            cold = max_min.MaxMinModel(model.capacity)
            cold.add_classes(a[counted], model.gpus[counted], count[counted])
            cold_x, cold_z = warm_solve(cold, count[counted])
            total = float(np.sum(count[:, None] * a * x))
            cold_total = float(np.sum(count[counted, None] * a[counted] * cold_x))
            level_diff.append(abs(z - cold_z) / max(abs(cold_z), 1e-12))
            total_diff.append(abs(total - cold_total) / max(abs(cold_total), 1e-12))
        return x, z

    max_min.MaxMinModel.solve = checked
    inputs = load_inputs(WorkloadSettings(path=str(PHILLY), cluster=PHILLY_CLUSTER, jobs=args.jobs or None))
    result = run_policy(inputs, "max-min-fairness")
    print(json.dumps({
        "jobs": len(inputs.jobs),
        "resolves": len(level_diff),
        "max_level_rel_diff": max(level_diff, default=0.0),
        "max_total_rel_diff": max(total_diff, default=0.0),
        "avg_jct_s": round(result.summary["avg_jct_s"], 1),
    }))


if __name__ == "__main__":
    main()
