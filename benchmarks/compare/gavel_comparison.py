"""Set apportion beside Gavel's simulator: on Gavel's own generated jobs, then on apportion's Gavel-shaped ones.

The first table replays the two 1,000-job workloads Gavel's own generator drew
(``../shared/traces/gavel/``: one-GPU and 1/2/4/8-GPU jobs, seed 0, 5 jobs an hour), with the
speeds their steps are measured in (Gavel's ``simulation_throughputs.json``, gunzipped to a
temporary directory and passed with ``--throughputs``), under the policies Gavel's results on
those files report, beside those results (quoted from the files' README, never measured here).
It is skipped, saying so, when ../shared is absent. The second table replays 1,000 jobs of
apportion's own Gavel-shaped generator (``--shape gavel`` or ``gavel-1gpu``, seed 0, 5 jobs an
hour, the built-in catalog's speeds) beside Gavel's figures as quoted in the issue "Better than
Gavel on its own ground": the same distributions, other samples.

Both run on 36 each of v100, p100 and k80 (one GPU a node, as Gavel's simulator's default),
360 s rounds, no restart cost, exactly as a user runs it: ``python -m apportion simulate ...
--json --out TMPDIR`` in a fresh process. Each row prints apportion's average JCT and makespan,
the simulation's own time (``sim_wall_s``) and the end-to-end time of that process (start-up,
workload, simulation and output files).

    python benchmarks/compare/gavel_comparison.py            # both tables
    python benchmarks/compare/gavel_comparison.py --json     # one JSON document
    python benchmarks/compare/gavel_comparison.py --rows own-mmf-1gpu,fifo --seed 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GAVEL_FILES = ROOT.parent / "shared" / "traces" / "gavel"
THROUGHPUTS = "simulation_throughputs.json"
CLUSTER = "v100:36:1,p100:36:1,k80:36:1"
JOBS, RATE, ROUND_S, RESTART_COST_S = 1000, 5.0, 360.0, 0.0
OWN = "Gavel's own results on these files (../shared/traces/gavel/README.md)"
QUOTED = "Gavel's simulator, as measured for the issue"
QUICK_JOBS: int | None = None  # --quick: Gavel's files' first jobs only


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    policy: str
    shape: str | None = None  # synthetic rows: apportion's generator
    workload: str | None = None  # Gavel's own rows: a file of ../shared/traces/gavel
    options: tuple[str, ...] = ()
    gavel_jct_h: float | None = None  # quoted
    gavel_makespan_h: float | None = None  # quoted
    gavel_time_s: tuple[float, float] | None = None  # quoted range; None: no Gavel time was quoted


# Gavel's own jobs: the rows of its README; Gavel's times are the (on these same files)
OWN_ROWS = (
    Row("own-mmf-1gpu", "max-min fairness, one-GPU jobs", "max-min-fairness", workload="gavel_1gpu_seed0.csv.gz",
        gavel_jct_h=15.09, gavel_makespan_h=356.27, gavel_time_s=(22.0, 25.0)),
    Row("own-mmf-1gpu-arrival", "  the same, --received-since arrival", "max-min-fairness",
        workload="gavel_1gpu_seed0.csv.gz", options=("--received-since", "arrival"),
        gavel_jct_h=15.09, gavel_makespan_h=356.27, gavel_time_s=(22.0, 25.0)),
    Row("own-space-1gpu", "space sharing, one-GPU jobs", "max-min-fairness:space-sharing",
        workload="gavel_1gpu_seed0.csv.gz", gavel_jct_h=15.18, gavel_makespan_h=358.67),
    Row("own-fifo", "fifo, one-GPU jobs", "fifo", workload="gavel_1gpu_seed0.csv.gz",
        gavel_jct_h=15.23, gavel_makespan_h=358.59),
    Row("own-mmf-mixed", "max-min fairness, 1/2/4/8-GPU jobs", "max-min-fairness", workload="gavel_multi_seed0.csv.gz",
        gavel_jct_h=26.57, gavel_makespan_h=438.04, gavel_time_s=(22.0, 25.0)),
    Row("own-mmf-mixed-arrival", "  the same, --received-since arrival", "max-min-fairness",
        workload="gavel_multi_seed0.csv.gz", options=("--received-since", "arrival"),
        gavel_jct_h=26.57, gavel_makespan_h=438.04, gavel_time_s=(22.0, 25.0)),
    Row("own-ftf-mixed", "finish-time fairness, 1/2/4/8-GPU jobs", "finish-time-fairness",
        workload="gavel_multi_seed0.csv.gz", gavel_jct_h=28.12, gavel_makespan_h=423.91, gavel_time_s=(70.0, 95.0)),
)

SYNTHETIC_ROWS = (
    Row("mmf-1gpu", "max-min fairness, one-GPU jobs", "max-min-fairness", "gavel-1gpu",
        gavel_jct_h=15.09, gavel_time_s=(22.0, 25.0)),
    Row("mmf-mixed", "max-min fairness, 1/2/4/8-GPU jobs", "max-min-fairness", "gavel",
        gavel_jct_h=26.57, gavel_time_s=(22.0, 25.0)),
    Row("mmf-mixed-rate", "  the same, --share-by rate", "max-min-fairness", "gavel", options=("--share-by", "rate"),
        gavel_jct_h=26.57, gavel_time_s=(22.0, 25.0)),
    Row("ftf-mixed", "finish-time fairness, 1/2/4/8-GPU jobs", "finish-time-fairness", "gavel",
        gavel_jct_h=28.12, gavel_time_s=(70.0, 95.0)),
    Row("space-1gpu", "space sharing, one-GPU jobs", "max-min-fairness:space-sharing", "gavel-1gpu",
        gavel_jct_h=15.18),
    Row("fifo", "fifo, one-GPU jobs", "fifo", "gavel-1gpu", gavel_makespan_h=14.9 * 24),
)
ROWS = OWN_ROWS + SYNTHETIC_ROWS


def missing_gavel_files() -> str | None:
    """Why Gavel's own rows cannot run here, or None when every file they read is there."""
    needed = [GAVEL_FILES / f"{THROUGHPUTS}.gz", *{GAVEL_FILES / row.workload for row in OWN_ROWS}]
    absent = [path for path in needed if not path.is_file()]
    return f"{absent[0]} not found" if absent else None


def workload_arguments(row: Row, seed: int, scratch: Path) -> list[str]:
    """What selects the row's jobs: Gavel's file with the speeds its steps are in, or the synthetic shape."""
    if row.workload is None:
        return ["--shape", row.shape, "--jobs", str(JOBS), "--rate", str(RATE), "--seed", str(seed)]
    throughputs = scratch / THROUGHPUTS
    if not throughputs.exists():
        with gzip.open(GAVEL_FILES / f"{THROUGHPUTS}.gz", "rb") as packed, open(throughputs, "wb") as plain:
            shutil.copyfileobj(packed, plain)
    first = ["--jobs", str(QUICK_JOBS)] if QUICK_JOBS else []
    return ["--workload", str(GAVEL_FILES / row.workload), "--throughputs", str(throughputs), *first]


def run_row(row: Row, seed: int, python: str, scratch: Path) -> dict:
    """One row as a user runs it: a fresh ``apportion simulate`` process, timed from start to exit."""
    command = [python, "-m", "apportion", "simulate", "--policy", row.policy, *workload_arguments(row, seed, scratch),
               "--cluster", CLUSTER, "--round-s", str(ROUND_S), "--restart-cost-s", str(RESTART_COST_S),
               *row.options, "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        done = subprocess.run([*command, "--out", out], capture_output=True, text=True, env=env, cwd=ROOT)
        end_to_end_s = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{row.key}: {' '.join(command)} failed:\n{done.stderr}")
    summary = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    shown = " ".join(["python", *command[1:], "--out", "DIR"]).replace(str(scratch), "TMP")
    result = {
        "row": row.key,
        "label": row.label.strip(),
        "command": shown,
        "avg_jct_h": summary["avg_jct_s"] / 3600,
        "makespan_h": summary["makespan_s"] / 3600,
        "completed": summary["completed"],
        "sim_s": summary["sim_wall_s"],
        "end_to_end_s": end_to_end_s,
        "gavel": {"avg_jct_h": row.gavel_jct_h, "makespan_h": row.gavel_makespan_h,
                  "time_s": list(row.gavel_time_s) if row.gavel_time_s else None,
                  "source": OWN if row.workload else QUOTED},
    }
    if row.gavel_jct_h:
        result["jct_ratio"] = result["avg_jct_h"] / row.gavel_jct_h
    if row.gavel_time_s:
        low, high = row.gavel_time_s
        result["sim_speedup"] = [low / result["sim_s"], high / result["sim_s"]]
        result["end_to_end_speedup"] = [low / end_to_end_s, high / end_to_end_s]
    return result


def ratio(pair: list[float] | None) -> str:
    if pair is None:
        return "—"
    low, high = pair
    return f"{low:.0f}×" if round(low) == round(high) else f"{low:.0f}–{high:.0f}×"


def print_rows(results: list[dict], rows: tuple[Row, ...]) -> None:
    header = ("row", "Gavel JCT", "apportion JCT", "ratio", "Gavel makespan", "apportion makespan", "sim s",
              "end-to-end s", "Gavel time", "sim speed-up", "end-to-end speed-up")
    labels = {row.key: row.label for row in rows}
    lines = []
    for r in (r for r in results if r["row"] in labels):
        g = r["gavel"]
        lines.append((
            labels[r["row"]], f"{g['avg_jct_h']:.2f} h" if g["avg_jct_h"] else "—", f"{r['avg_jct_h']:.2f} h",
            f"{r['jct_ratio']:.2f}" if "jct_ratio" in r else "—",
            f"{g['makespan_h']:.1f} h" if g["makespan_h"] else "—", f"{r['makespan_h']:.1f} h",
            f"{r['sim_s']:.2f}", f"{r['end_to_end_s']:.2f}",
            f"{g['time_s'][0]:g}–{g['time_s'][1]:g} s" if g["time_s"] else "—",
            ratio(r.get("sim_speedup")), ratio(r.get("end_to_end_speedup")),
        ))
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())


def print_tables(results: list[dict], wanted: list[str], seed: int, skipped: str | None) -> None:
    """Gavel's own files first (or why they were skipped), then the synthetic rows; each only if asked for."""
    setting = f"on {CLUSTER}, {ROUND_S:g} s rounds, restart cost {RESTART_COST_S:g} s"
    if any(row.key in wanted for row in OWN_ROWS):
        print(f"Gavel's own 1,000-job files (seed 0, 5/h) with --throughputs {THROUGHPUTS}, {setting}; "
              f"Gavel: {OWN}; Gavel time: the issue's")
        if skipped:
            print(f"skipped: {skipped} (Gavel's own files live in ../shared/traces/gavel)")
        else:
            print_rows(results, OWN_ROWS)
        print()
    if any(row.key in wanted for row in SYNTHETIC_ROWS):
        print(f"{JOBS} jobs of apportion's Gavel-shaped generator (seed {seed}, {RATE:g}/h), built-in speeds, "
              f"{setting}; Gavel: {QUOTED}")
        print_rows(results, SYNTHETIC_ROWS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(r.key for r in ROWS), help="comma-separated row keys")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows")
    parser.add_argument("--python", default=sys.executable, help="the interpreter a user would run")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--quick", action="store_true",
                        help="the first 40 jobs of Gavel's file under fifo (or of the synthetic fifo row without "
                        "../shared/traces/gavel): what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        global JOBS, QUICK_JOBS
        JOBS = QUICK_JOBS = 40
        args.rows = "fifo" if missing_gavel_files() else "own-fifo"
    wanted = [key.strip() for key in args.rows.split(",") if key.strip()]
    unknown = [key for key in wanted if key not in {r.key for r in ROWS}]
    if unknown:
        raise SystemExit(f"unknown row {unknown[0]} (known: {', '.join(r.key for r in ROWS)})")
    skipped = missing_gavel_files() if any(r.workload and r.key in wanted for r in ROWS) else None
    chosen = [row for row in ROWS if row.key in wanted and not (row.workload and skipped)]
    with tempfile.TemporaryDirectory() as scratch:
        results = [run_row(row, args.seed, args.python, Path(scratch)) for row in chosen]
    if args.json:
        print(json.dumps({"seed": args.seed, "jobs": JOBS, "cluster": CLUSTER, "skipped": skipped, "rows": results},
                         indent=2))
    else:
        print_tables(results, wanted, args.seed, skipped)


if __name__ == "__main__":
    main()
