"""Set apportion beside Gavel's simulator on the rows of the issue "Better than Gavel on its own ground".

Each row replays 1,000 Gavel-shaped jobs (``--shape gavel`` or ``gavel-1gpu``, seed 0,
5 jobs/hour) on 36 each of v100, p100 and k80 (one GPU a node, as Gavel's simulator's
default), 360 s rounds, no restart cost, exactly as a user runs it:
``python -m apportion simulate ... --json --out TMPDIR`` in a fresh process. It prints
apportion's average JCT (and makespan for fifo), the simulation's own time
(``sim_wall_s``), and the end-to-end time of that process (start-up, workload, simulation
and output files), beside Gavel's figures as quoted in the issue. Gavel cannot be run here:
its column is quoted, never measured, and the two simulators replay different samples of
the same distributions (Gavel draws with Python's ``random``, apportion with numpy).

    python benchmarks/gavel_comparison.py            # every row, a table
    python benchmarks/gavel_comparison.py --json     # one JSON document
    python benchmarks/gavel_comparison.py --rows fifo --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "v100:36:1,p100:36:1,k80:36:1"
JOBS, RATE, ROUND_S, RESTART_COST_S = 1000, 5.0, 360.0, 0.0
QUOTED = "Gavel's simulator, as measured for the issue"


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    policy: str
    shape: str
    options: tuple[str, ...] = ()
    gavel_jct_h: float | None = None  # quoted
    gavel_makespan_d: float | None = None  # quoted
    gavel_time_s: tuple[float, float] | None = None  # quoted range; None: no Gavel time was quoted


ROWS = (
    Row("mmf-1gpu", "max-min fairness, one-GPU jobs", "max-min-fairness", "gavel-1gpu",
        gavel_jct_h=15.09, gavel_time_s=(22.0, 25.0)),
    Row("mmf-mixed", "max-min fairness, 1/2/4/8-GPU jobs", "max-min-fairness", "gavel",
        gavel_jct_h=26.57, gavel_time_s=(22.0, 25.0)),
    Row("mmf-mixed-rate", "  the same, --share-by rate", "max-min-fairness", "gavel", ("--share-by", "rate"),
        gavel_jct_h=26.57, gavel_time_s=(22.0, 25.0)),
    Row("ftf-mixed", "finish-time fairness, 1/2/4/8-GPU jobs", "finish-time-fairness", "gavel",
        gavel_jct_h=28.12, gavel_time_s=(70.0, 95.0)),
    Row("space-1gpu", "space sharing, one-GPU jobs", "max-min-fairness:space-sharing", "gavel-1gpu",
        gavel_jct_h=15.18),
    Row("fifo", "fifo, one-GPU jobs", "fifo", "gavel-1gpu", gavel_makespan_d=14.9),
)


def run_row(row: Row, seed: int, python: str) -> dict:
    """One row as a user runs it: a fresh ``apportion simulate`` process, timed from start to exit."""
    command = [python, "-m", "apportion", "simulate", "--policy", row.policy, "--shape", row.shape,
               "--jobs", str(JOBS), "--rate", str(RATE), "--seed", str(seed), "--cluster", CLUSTER,
               "--round-s", str(ROUND_S), "--restart-cost-s", str(RESTART_COST_S), *row.options, "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        done = subprocess.run([*command, "--out", out], capture_output=True, text=True, env=env, cwd=ROOT)
        end_to_end_s = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{row.key}: {' '.join(command)} failed:\n{done.stderr}")
    summary = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    result = {
        "row": row.key,
        "label": row.label.strip(),
        "command": " ".join(["python", *command[1:], "--out", "DIR"]),
        "avg_jct_h": summary["avg_jct_s"] / 3600,
        "makespan_d": summary["makespan_s"] / 86400,
        "completed": summary["completed"],
        "sim_s": summary["sim_wall_s"],
        "end_to_end_s": end_to_end_s,
        "gavel_quoted": {"avg_jct_h": row.gavel_jct_h, "makespan_d": row.gavel_makespan_d,
                         "time_s": list(row.gavel_time_s) if row.gavel_time_s else None, "source": QUOTED},
    }
    if row.gavel_time_s:
        low, high = row.gavel_time_s
        result["sim_speedup"] = [low / result["sim_s"], high / result["sim_s"]]
        result["end_to_end_speedup"] = [low / end_to_end_s, high / end_to_end_s]
    return result


def ratio(pair: list[float] | None) -> str:
    if pair is None:
        return "no Gavel time quoted"
    low, high = pair
    return f"{low:.0f}×" if round(low) == round(high) else f"{low:.0f}–{high:.0f}×"


def print_table(results: list[dict], seed: int) -> None:
    print(f"{JOBS} Gavel-shaped jobs (seed {seed}, {RATE:g}/h) on {CLUSTER}, {ROUND_S:g} s rounds, "
          f"restart cost {RESTART_COST_S:g} s; Gavel: {QUOTED}")
    header = ("row", "Gavel (quoted)", "apportion", "sim s", "end-to-end s", "Gavel time (quoted)",
              "sim speed-up", "end-to-end speed-up")
    lines = []
    for r in results:
        g = r["gavel_quoted"]
        if g["makespan_d"] is not None:
            gavel, ours = f"makespan {g['makespan_d']:.1f} d", f"makespan {r['makespan_d']:.1f} d (JCT {r['avg_jct_h']:.2f} h)"
        else:
            gavel, ours = f"{g['avg_jct_h']:.2f} h", f"{r['avg_jct_h']:.2f} h"
        quoted = f"{g['time_s'][0]:g}–{g['time_s'][1]:g} s" if g["time_s"] else "—"
        label = next(row.label for row in ROWS if row.key == r["row"])
        lines.append((label, gavel, ours, f"{r['sim_s']:.2f}", f"{r['end_to_end_s']:.2f}", quoted,
                      ratio(r.get("sim_speedup")), ratio(r.get("end_to_end_speedup"))))
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(r.key for r in ROWS), help="comma-separated row keys")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--python", default=sys.executable, help="the interpreter a user would run")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args()
    wanted = [key.strip() for key in args.rows.split(",") if key.strip()]
    unknown = [key for key in wanted if key not in {r.key for r in ROWS}]
    if unknown:
        raise SystemExit(f"unknown row {unknown[0]} (known: {', '.join(r.key for r in ROWS)})")
    results = [run_row(row, args.seed, args.python) for row in ROWS if row.key in wanted]
    if args.json:
        print(json.dumps({"seed": args.seed, "jobs": JOBS, "cluster": CLUSTER, "rows": results}, indent=2))
    else:
        print_table(results, args.seed)


if __name__ == "__main__":
    main()
