"""Goodput against its baselines on Pollux-shaped elastic workloads: one JSON line per policy.

Each seed is one workload of 160 elastic jobs arriving over 8 hours (``--shape pollux --jobs
160 --rate 20``; apportion.workloads.elastic_workload), replayed with 60 s rounds (Pollux's
scheduling interval) and a 30 s restart (Pollux's simulator's) on:

- ``t4:64``, 16 nodes × 4 T4s, the GPUs the models were measured on: ``las`` (Tiresias, each
  job at its user's GPU count and batch), ``optimus`` (Optimus with an oracle, each job at its
  user's tuned batch) and ``goodput`` (Pollux's policy);
- ``t4:32,v100:16,k80:16``, 16 nodes of three types: ``goodput`` and ``goodput:agnostic``,
  which believes every GPU runs like a T4 (the most common type).

Each line: ``policy``, ``cluster``, ``avg_jct_s`` (the mean over seeds of each replay's
average JCT), ``seeds``, ``sim_wall_s`` (the mean wall time of one replay, the simulation
alone), ``max_sim_wall_s``, ``sim_cpu_s`` (the CPU time of one replay, which other work on
the machine does not inflate), the per-seed figures, and for goodput the largest gap between
a round's choice and the bound HiGHS proved for it. A last line says which targets are met:
goodput ≤ 0.75 × las and below optimus on t4:64, goodput below goodput:agnostic on the mixed
cluster, every replay ≤ 10 s. Replays run one after another in this process, so that their
wall times are not shared with each other.

With ``--learn-models`` the policies that size jobs (optimus, goodput) are given each job's
model learnt from the steps it has made, its GPUs capped at four times the most it has run on
(``SimConfig.learn_models``, as Pollux learns them); las reads no model and is unchanged.

    python benchmarks/compare/goodput.py                 # seeds 0-3
    python benchmarks/compare/goodput.py --seeds 0,1,2,3,4,5,6,7
    python benchmarks/compare/goodput.py --learn-models

``--pollux PATH`` (a checkout of petuum/adaptdl's ``osdi21-artifact`` branch, or its
``simulator/`` directory) replays Pollux's own eight simulator workloads instead
(``simulator/workloads/workload-N.csv``; apportion.workloads.elastic_pollux) on Pollux's cluster,
16 nodes × 4 T4s, 60 s rounds and 30 s restarts, under ``goodput`` with the true models and
with ``--learn-models``, and sets each beside the average JCT Pollux's artifact publishes for it
(``simulator/results-jobload/pollux-1.0/summary.json``, ``avgs``). One line a workload, then
the targets: learnt ≤ 1.00 × Pollux's on each, every replay ≤ 10 s (CPU seconds, which other
work on the machine does not inflate; wall seconds given too).

    python benchmarks/compare/goodput.py --pollux /path/to/adaptdl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.core.cluster import parse_cluster_shorthand  # noqa: E402
from apportion.policies import make_policy  # noqa: E402
from apportion.sim import SimConfig, simulate  # noqa: E402
from apportion.workloads.elastic_workload import generate_elastic_workload  # noqa: E402

JOBS, RATE_PER_HOUR = 160, 20.0
CONFIG = SimConfig(round_s=60.0, restart_cost_s=30.0)
ONE_TYPE = "t4:64"
MIXED = "t4:32,v100:16,k80:16"
RUNS = ((ONE_TYPE, "las"), (ONE_TYPE, "optimus"), (ONE_TYPE, "goodput"),
        (MIXED, "goodput"), (MIXED, "goodput:agnostic"))
TARGET_WALL_S = 10.0


class GapWatch:
    """The largest relative gap between a goodput round's choice and its proven bound."""

    def __init__(self, policy) -> None:
        self.largest = 0.0
        chooser = getattr(policy, "chooser", None)
        if chooser is not None:
            choose = chooser.choose

            def watched(*args, **kwargs):
                choice = choose(*args, **kwargs)
                self.largest = max(self.largest, choice.gap)
                return choice

            chooser.choose = watched


def run(cluster_text: str, spec: str, seeds: list[int], config: SimConfig = CONFIG) -> dict:
    cluster = parse_cluster_shorthand(cluster_text)
    jct, walls, cpus, gaps, fits = [], [], [], [], []
    for seed in seeds:
        jobs = generate_elastic_workload(jobs=JOBS, rate_per_hour=RATE_PER_HOUR, seed=seed)
        policy = make_policy(spec, restart_cost_s=config.restart_cost_s)
        watch = GapWatch(policy)
        started, cpu = time.perf_counter(), time.process_time()
        result = simulate(jobs, cluster, None, policy, config)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
        if result.summary["completed"] != len(jobs):
            raise SystemExit(f"{spec} on {cluster_text}, seed {seed}: {result.summary['completed']} of {len(jobs)} "
                             "jobs completed")
        jct.append(result.summary["avg_jct_s"])
        gaps.append(watch.largest)
        fits.append(result.summary.get("model_fits", 0))
    line = {
        "policy": spec, "cluster": cluster_text, "avg_jct_s": round(float(np.mean(jct)), 1), "seeds": seeds,
        "sim_wall_s": round(float(np.mean(walls)), 2), "max_sim_wall_s": round(float(np.max(walls)), 2),
        "sim_cpu_s": round(float(np.mean(cpus)), 2),
        "avg_jct_s_per_seed": [round(v, 1) for v in jct], "jobs": JOBS, "round_s": config.round_s,
        "restart_cost_s": config.restart_cost_s,
    }
    if config.learn_models:
        line["learn_models"] = True
        line["model_fits"] = round(float(np.mean(fits)))  # per replay: new configurations fitted
    if spec.startswith("goodput"):
        line["max_gap_to_bound"] = float(f"{max(gaps):.2g}")
    return line


def pollux_comparison(checkout: Path) -> None:
    """Pollux's eight workloads under goodput, true and learnt models, beside Pollux's published JCTs."""
    from apportion.workloads.elastic_pollux import read_pollux_workload

    simulator = checkout / "simulator" if (checkout / "simulator").is_dir() else checkout
    files = sorted((simulator / "workloads").glob("workload-*.csv"), key=lambda f: int(f.stem.split("-")[1]))
    summary = simulator / "results-jobload" / "pollux-1.0" / "summary.json"
    if not files or not summary.is_file():
        raise SystemExit(f"{simulator}: no workloads/workload-N.csv or results-jobload/pollux-1.0/summary.json "
                         "(a checkout of petuum/adaptdl's osdi21-artifact branch?)")
    published = json.loads(summary.read_text())["avgs"]
    cluster = parse_cluster_shorthand(ONE_TYPE)
    ratios, within_time = [], True
    for path in files:
        jobs = read_pollux_workload(path)
        line = {"workload": path.stem, "jobs": len(jobs), "pollux_avg_jct_s": round(float(published[path.stem]), 1)}
        for label, config in (("true", CONFIG), ("learnt", replace(CONFIG, learn_models=True))):
            policy = make_policy("goodput", restart_cost_s=config.restart_cost_s)
            started, cpu = time.perf_counter(), time.process_time()
            result = simulate(jobs, cluster, None, policy, config)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            if result.summary["completed"] != len(jobs):
                raise SystemExit(f"{path.stem} ({label}): {result.summary['completed']} of {len(jobs)} jobs completed")
            jct = result.summary["avg_jct_s"]
            line[f"avg_jct_s_{label}"] = round(jct, 1)
            line[f"{label}_over_pollux"] = round(jct / line["pollux_avg_jct_s"], 3)
            line[f"sim_cpu_s_{label}"], line[f"sim_wall_s_{label}"] = round(cpu, 2), round(wall, 2)
            within_time &= cpu <= TARGET_WALL_S
        ratios.append(line["learnt_over_pollux"])
        print(json.dumps(line), flush=True)
    targets = {"learnt_over_pollux_mean": round(float(np.mean(ratios)), 3), "learnt_over_pollux_max": max(ratios),
               "learnt_at_most_pollux_on_each": max(ratios) <= 1.0, "every_replay_within_10_cpu_s": within_time}
    print(json.dumps({"targets": targets}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated workload seeds")
    parser.add_argument("--learn-models", action="store_true",
                        help="policies that size jobs see models learnt from each job's steps (Pollux's way)")
    parser.add_argument("--pollux", type=Path, metavar="PATH",
                        help="a checkout of petuum/adaptdl (osdi21-artifact): replay its eight workloads beside "
                             "Pollux's published average JCTs")
    parser.add_argument("--quick", action="store_true",
                        help="8 jobs, one seed (the targets then mean nothing): what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        global JOBS
        JOBS, args.seeds = 8, "0"
    if args.pollux is not None:
        pollux_comparison(args.pollux)
        return
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    config = replace(CONFIG, learn_models=args.learn_models)
    lines = {}
    for cluster, spec in RUNS:
        line = run(cluster, spec, seeds, config)
        lines[cluster, spec] = line
        print(json.dumps(line), flush=True)
    goodput = lines[ONE_TYPE, "goodput"]["avg_jct_s"]
    las = lines[ONE_TYPE, "las"]["avg_jct_s"]
    targets = {
        "goodput_over_las": round(goodput / las, 3),
        "goodput_at_most_0.75_las": goodput <= 0.75 * las,
        "goodput_below_optimus": goodput < lines[ONE_TYPE, "optimus"]["avg_jct_s"],
        "mixed_goodput_below_agnostic": lines[MIXED, "goodput"]["avg_jct_s"] < lines[MIXED, "goodput:agnostic"]["avg_jct_s"],
        "every_replay_within_10_s": all(line["max_sim_wall_s"] <= TARGET_WALL_S for line in lines.values()),
    }
    print(json.dumps({"targets": targets}), flush=True)


if __name__ == "__main__":
    main()
