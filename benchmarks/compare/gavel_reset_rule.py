"""The received share from arrival against Gavel's, from the last change of allocation, with arrivals that continue.

Gavel's generated-jobs driver keeps drawing jobs until the first 1,000 have finished, so those
1,000 share the cluster with later arrivals to the end. This replays a longer Gavel-shaped
stream (``--shape gavel`` or ``gavel-1gpu``, 5 jobs an hour, 3,000 jobs by default) on 36 each
of v100, p100 and k80, 360 s rounds, no restart cost, once with each rule
(``SimConfig.received_since``), and prints the average JCT over the first 1,000 jobs by arrival
(and over the last 100 of them, the late arrivals), beside the whole stream's.

    python benchmarks/compare/gavel_reset_rule.py
    python benchmarks/compare/gavel_reset_rule.py --rows mmf-mixed --jobs 2000 --seeds 0,1
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.experiment import WorkloadSettings, load_inputs, run_policy  # noqa: E402
from apportion.mechanism.received import RECEIVED_SINCE  # noqa: E402
from apportion.sim import SimConfig  # noqa: E402

CLUSTER = "v100:36:1,p100:36:1,k80:36:1"
RATE, ROUND_S, RESTART_COST_S, COUNTED = 5.0, 360.0, 0.0, 1000


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    policy: str
    shape: str


ROWS = (
    Row("mmf-1gpu", "max-min fairness, one-GPU jobs", "max-min-fairness", "gavel-1gpu"),
    Row("mmf-mixed", "max-min fairness, 1/2/4/8-GPU jobs", "max-min-fairness", "gavel"),
    Row("ftf-mixed", "finish-time fairness, 1/2/4/8-GPU jobs", "finish-time-fairness", "gavel"),
)


def run(row: Row, jobs: int, seed: int, received_since: str) -> dict:
    """One replay: JCTs (hours) over the first ``COUNTED`` jobs by arrival, their last 100, and all."""
    inputs = load_inputs(WorkloadSettings(jobs=jobs, rate_per_hour=RATE, seed=seed, cluster=CLUSTER, shape=row.shape))
    config = SimConfig(round_s=ROUND_S, restart_cost_s=RESTART_COST_S, received_since=received_since)
    result = run_policy(inputs, row.policy, config)
    first = np.argsort(inputs.jobs.submit_time_s, kind="stable")[:COUNTED]
    jct_h = result.jct_s / 3600
    if np.isnan(jct_h[first]).any():
        raise SystemExit(f"{row.key}: some of the first {COUNTED} jobs did not finish")
    return {"avg_jct_h": float(jct_h[first].mean()), "late_jct_h": float(jct_h[first[-100:]].mean()),
            "all_jct_h": float(np.nanmean(jct_h)), "sim_s": result.summary["sim_wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(r.key for r in ROWS), help="comma-separated row keys")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs in the stream (the first 1,000 are counted)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--quick", action="store_true",
                        help="80 jobs, the first 50 counted, one row: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        global COUNTED
        COUNTED, args.jobs, args.rows = 50, 80, "mmf-1gpu"
    if args.jobs < COUNTED:
        raise SystemExit(f"--jobs must be at least {COUNTED}, got {args.jobs}")
    wanted = [key.strip() for key in args.rows.split(",") if key.strip()]
    unknown = [key for key in wanted if key not in {r.key for r in ROWS}]
    if unknown:
        raise SystemExit(f"unknown row {unknown[0]} (known: {', '.join(r.key for r in ROWS)})")
    seeds = [int(s) for s in args.seeds.split(",")]
    results = []
    for row in (r for r in ROWS if r.key in wanted):
        for seed in seeds:
            by_rule = {rule: run(row, args.jobs, seed, rule) for rule in RECEIVED_SINCE}
            results.append({"row": row.key, "label": row.label, "seed": seed, **by_rule})
    if args.json:
        print(json.dumps({"jobs": args.jobs, "counted": COUNTED, "cluster": CLUSTER, "rows": results}, indent=2))
        return
    print(f"{args.jobs} Gavel-shaped jobs ({RATE:g}/h) on {CLUSTER}, {ROUND_S:g} s rounds, restart cost "
          f"{RESTART_COST_S:g} s; average JCT in hours over the first {COUNTED} by arrival "
          f"(late: their last 100; all: every job)")
    header = ("row", "seed", "from arrival", "from allocation", "change", "late: arrival", "late: allocation",
              "all: arrival", "all: allocation")
    lines = []
    for r in results:
        a, g = r["arrival"], r["allocation"]
        lines.append((r["label"], str(r["seed"]), f"{a['avg_jct_h']:.2f}", f"{g['avg_jct_h']:.2f}",
                      f"{100 * (g['avg_jct_h'] / a['avg_jct_h'] - 1):+.1f}%", f"{a['late_jct_h']:.2f}",
                      f"{g['late_jct_h']:.2f}", f"{a['all_jct_h']:.2f}", f"{g['all_jct_h']:.2f}"))
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


if __name__ == "__main__":
    main()
