"""Synergy's comparison: node cores divided in proportion to GPUs, or where they speed jobs up.

Synergy (Mohan et al., OSDI'22) keeps the GPU policy and changes only how each server's CPU cores
(and memory) are divided among the jobs placed on it. Its model zoo's profiles give each model's
speed at 1, 2, 3, 4, 5, 6, 9, 12 and 24 cores per GPU (``PROFILES``: the last memory column, 250 GB
a GPU, where every model reaches its best speed; normalised to 1 at the proportional 3 cores a GPU of
its servers of 8 V100s, 24 cores and 500 GB): image and speech models keep speeding up to 6-12 cores
a GPU (AlexNet 2.94x at 12), language models do not depend on cores at all.

Two workloads:

``--workload synergy`` (the default) is Synergy's own: its generator (Poisson arrivals at
``--jobs-per-hour``, Gavel-like durations, 1-8 GPUs, models by ``--split``), its profiles, its
cluster of 16 servers. ``--synergy PATH`` (its checkout) runs Synergy's simulator
(``benchmarks/compare/synergy_original.py`` under ``--synergy-python``, a Python with numpy, pandas and
matplotlib) for each (policy, mode), records the jobs its generator made, and replays the same jobs
in apportion: FIFO, SRTF and LAS in Synergy's forms (``fifo:preemptive``, ``srtf``,
``las:continuous``) with the split that matches each mode (fair: ``proportional``, tune:
``aware``, greedy: ``greedy``), 300 s rounds and no restart cost as Synergy's simulator has. One
JSON line per (policy, mode): both average JCTs over the jobs Synergy measures (``--measure``), their
ratio, both wall times.

``--workload philly`` replays the shared Philly trace in that shape instead: each job a model drawn
by task, its steps those of its trace duration at the proportional share (so the proportional
replay is the GPU-only baseline), arrivals stretched so the jobs ask ``--load`` times the cluster's
GPU-hours over the span of their arrivals. One JSON line per (GPU policy, CPU split): average JCT (of
all jobs, of the CPU-sensitive ones, of the others), makespan, the GPU-weighted data stall, wall time.

    python benchmarks/compare/data_stalls.py --synergy /tmp/synergy --synergy-python /tmp/synvenv/bin/python
        [--measure 4000,5000] [--jobs-per-hour 9] [--split 20,70,10] [--seed 42] [--policies FIFO,SRTF,LAS]
        [--modes fair,tune,greedy] [--recorded DIR]
    python benchmarks/compare/data_stalls.py --workload philly [--jobs 2000] [--policies fifo,srtf,las]
        [--split 20,70,10] [--servers 16] [--cores 24] [--load 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.cpu_speed import CoreCurves, relative_speed
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.cpu_cores import CPU_SPLITS
from apportion.sim.simulator import job_throughputs
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.trace_csv import read_workload_csv

TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
CORES_PER_GPU = np.array([1.0, 2, 3, 4, 5, 6, 9, 12, 24])  # the rows of Synergy's profiles
# speed at each point at 250 GB a GPU, 1 at the proportional share (3 cores a GPU); by task (Synergy's
# simulator/models/<model>_1.py, its tput matrix's last column)
PROFILES = {
    "image": {
        "alexnet": [0.3, 0.66, 1, 1.25, 1.53, 1.75, 2, 2.94, 2.94],
        "res18": [0.37, 0.72, 1, 1.3, 1.53, 1.75, 2.4, 2.4, 2.4],
        "res50": [0.4, 0.74, 1, 1.15, 1.15, 1.15, 1.15, 1.15, 1.15],
        "mobilenet": [0.37, 0.72, 1, 1.3, 1.49, 1.55, 1.55, 1.55, 1.55],
        "shufflenet": [0.3, 0.66, 1, 1.25, 1.53, 1.75, 2, 2.89, 2.89],
    },
    "language": {"gnmt": [1] * 9, "transformer": [1] * 9, "lstm": [1] * 9},
    "speech": {
        "m5": [0.3, 0.66, 1, 1.2, 1.4, 2.5, 2.5, 2.5, 2.5],
        "deepspeech": [0.3, 0.66, 1, 1, 1, 1, 1, 1, 1],
    },
}
CURVES = {name: curve for task in PROFILES.values() for name, curve in task.items()}
PROPORTIONAL_POINT = 2  # 3 cores a GPU
# Synergy's policies and modes, as apportion offers them
SYNERGY_POLICIES = {"FIFO": "fifo:preemptive", "SRTF": "srtf", "LAS": "las:continuous"}
SYNERGY_MODES = {"fair": "proportional", "tune": "aware", "greedy": "greedy"}
GPUS_PER_SERVER, MEMORY_GIB_PER_SERVER = 8, 500


def philly_jobs(jobs: int, split: tuple[float, float, float], cluster: Cluster, load: float,
                seed: int, trace: Path = TRACE) -> tuple[JobTable, np.ndarray]:
    """The trace's first ``jobs`` with a model each (drawn by task ``split``, then uniformly), their
    curves, their steps at the proportional share and their arrivals at ``load``; and each job's model."""
    table = read_workload_csv(trace, throughputs=builtin_throughputs(), max_jobs=jobs, seed=seed)
    rng = np.random.default_rng(seed)
    tasks = list(PROFILES)
    task = rng.choice(len(tasks), size=len(table), p=np.asarray(split) / sum(split))
    names = [name for t in tasks for name in PROFILES[t]]
    first = np.cumsum([0] + [len(PROFILES[t]) for t in tasks])
    model = first[task] + rng.integers(0, np.diff(first)[task])
    curves = CoreCurves(CORES_PER_GPU, np.array([PROFILES[t][m] for t in tasks for m in PROFILES[t]])[model])
    share = float(cluster.node_cpus[0] / cluster.node_gpus[0])
    at_share = relative_speed(curves, np.arange(len(table)), np.full(len(table), share))
    alone_s = table.total_steps / job_throughputs(table, cluster, builtin_throughputs())[:, 0]  # the trace's durations
    span_s = float(table.submit_time_s[-1] - table.submit_time_s[0])
    stretch = float(np.sum(table.num_gpus * alone_s)) / (load * cluster.num_gpus * span_s)
    return dataclasses.replace(table, total_steps=table.total_steps * at_share, cpu_curves=curves,
                               submit_time_s=table.submit_time_s * stretch), np.asarray(names, dtype=object)[model]


def read_synergy_jobs(path: Path) -> tuple[JobTable, ThroughputTable]:
    """The jobs Synergy's generator made (``synergy_original.py --record``), each a kind per model: at
    the proportional share it trains one iteration per the model's iteration time (Synergy's speed
    when it gets its fair share), faster with more cores along the model's curve."""
    rows = [line.split(",") for line in path.read_text().splitlines() if line.strip()]
    ids = [int(r[0]) for r in rows]
    models = [r[1] for r in rows]
    unknown = sorted(set(models) - set(CURVES))
    if unknown:
        raise SystemExit(f"{path}: models without a profile here: {', '.join(unknown)}")
    kinds = tuple(CURVES)
    iteration_s = {m: float(r[5]) for m, r in zip(models, rows)}
    best = np.array([[[CURVES[k][-1] / CURVES[k][PROPORTIONAL_POINT] / iteration_s.get(k, 1.0)] * 4] for k in kinds])
    rates = ThroughputTable(kinds, ("v100",), (1, 2, 4, 8), best)
    curves = CoreCurves(CORES_PER_GPU, np.array([CURVES[m] for m in models]))
    table = JobTable.build(job_id=[str(i) for i in ids], submit_time_s=[float(r[2]) for r in rows], kind_names=models,
                           num_gpus=[int(r[4]) for r in rows], total_steps=[float(r[3]) for r in rows], kinds=kinds,
                           cpu_curves=curves)
    return table, rates


def run_original(args: argparse.Namespace, policy: str, mode: str, record: Path) -> dict:
    """Synergy's simulator on its own workload, its jobs written to ``record``: its one JSON line."""
    harness = Path(__file__).with_name("synergy_original.py")
    command = [args.synergy_python, str(harness), args.synergy, policy, mode,
               "--jobs-per-hour", str(args.jobs_per_hour), "--split", args.split, "--seed", str(args.seed), "--measure", args.measure, "--record", str(record)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"Synergy's simulator failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def synergy_comparison(args: argparse.Namespace) -> None:
    """Synergy's simulator and apportion on the jobs Synergy's generator made, one line per (policy, mode)."""
    first, last = (int(x) for x in args.measure.split(","))
    cluster = Cluster((NodeGroup("v100", 16 * GPUS_PER_SERVER, GPUS_PER_SERVER, cpus_per_node=24,
                                 memory_gib_per_node=MEMORY_GIB_PER_SERVER),))
    folder = Path(args.recorded or tempfile.mkdtemp(prefix="synergy-"))
    folder.mkdir(parents=True, exist_ok=True)
    for policy in args.policies.split(","):
        for mode in args.modes.split(","):
            record, result = folder / f"jobs_{policy}_{mode}.csv", folder / f"{policy}_{mode}.json"
            if args.recorded and result.exists() and result.read_text().strip():
                original = json.loads(result.read_text().strip().splitlines()[-1])
            else:
                original = run_original(args, policy, mode, record)
                result.write_text(json.dumps(original) + "\n")
            jobs, rates = read_synergy_jobs(record)
            start = time.perf_counter()
            replay = simulate(jobs, cluster, rates, make_policy(SYNERGY_POLICIES[policy]),
                              SimConfig(cpu_split=SYNERGY_MODES[mode], round_s=300.0, restart_cost_s=0.0))
            wall_s = time.perf_counter() - start
            ids = np.array([int(i) for i in jobs.job_id])
            measured = (ids >= first) & (ids < last)
            ours_h = float(np.mean(replay.jct_s[measured])) / 3600
            theirs_h = original["avg_jct_s"] / 3600
            print(json.dumps({
                "policy": policy, "mode": mode,
                "apportion": f"{SYNERGY_POLICIES[policy]} --cpu-split {SYNERGY_MODES[mode]}",
                "jobs": len(jobs), "measured": int(measured.sum()), "synergy_measured": original["measured"],
                "avg_jct_h": round(ours_h, 3), "synergy_avg_jct_h": round(theirs_h, 3),
                "ratio": round(ours_h / theirs_h, 4), "wall_s": round(wall_s, 2), "synergy_wall_s": original["wall_s"],
                "faster": round(original["wall_s"] / wall_s, 1),
            }), flush=True)


def philly_comparison(args: argparse.Namespace) -> None:
    split = tuple(float(x) for x in args.split.split(","))
    cluster = Cluster((NodeGroup("v100", args.servers * GPUS_PER_SERVER, GPUS_PER_SERVER, cpus_per_node=args.cores,
                                 memory_gib_per_node=MEMORY_GIB_PER_SERVER),))
    jobs, model = philly_jobs(args.jobs, split, cluster, args.load, args.seed, Path(args.trace))
    sensitive = jobs.cpu_curves.saturation > args.cores / GPUS_PER_SERVER
    for policy in (args.policies or "fifo,srtf,las").split(","):
        for cpu_split in CPU_SPLITS:
            start = time.perf_counter()
            result = simulate(jobs, cluster, builtin_throughputs(), make_policy(policy),
                              SimConfig(cpu_split=cpu_split))
            wall_s = time.perf_counter() - start
            summary = result.summary
            jct = result.jct_s
            print(json.dumps({
                "policy": policy, "cpu_split": cpu_split, "jobs": len(jobs), "completed": summary["completed"],
                "cluster": f"{args.servers}x8 v100, {args.cores} cores", "split": args.split, "load": args.load,
                "avg_jct_h": round(summary["avg_jct_s"] / 3600, 3),
                "avg_jct_cpu_sensitive_h": round(float(np.nanmean(jct[sensitive])) / 3600, 3),
                "avg_jct_insensitive_h": round(float(np.nanmean(jct[~sensitive])) / 3600, 3),
                "makespan_h": round(summary["makespan_s"] / 3600, 3),
                "data_stall": round(summary["data_stall"], 4),
                "wall_s": round(wall_s, 2),
            }), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("synergy", "philly"), default="synergy")
    parser.add_argument("--policies", help="synergy: FIFO,SRTF,LAS (the default); philly: fifo,srtf,las")
    parser.add_argument("--split", default="20,70,10", help="percent image,language,speech models (Synergy's default)")
    parser.add_argument("--seed", type=int, help="synergy: its generator's (default 42); philly: the draw's (0)")
    synergy = parser.add_argument_group("synergy")
    synergy.add_argument("--synergy", help="Synergy's checkout (msr-fiddle/synergy), to run its simulator")
    synergy.add_argument("--synergy-python", default=sys.executable, help="a Python with numpy, pandas, matplotlib")
    synergy.add_argument("--modes", default="fair,tune,greedy")
    synergy.add_argument("--jobs-per-hour", type=float, default=9.0, help="Synergy's benchmark's default: 9")
    synergy.add_argument("--measure", default="4000,5000", help="the job ids measured, first,last (Synergy's default)")
    synergy.add_argument("--recorded", help="a folder for (or of) Synergy's runs: a run found there is not run again")
    philly = parser.add_argument_group("philly")
    philly.add_argument("--trace", default=str(TRACE), help="the shared Philly trace (shared/traces/)")
    philly.add_argument("--jobs", type=int, default=2000)
    philly.add_argument("--servers", type=int, default=16, help="servers of 8 V100s (Synergy's default: 16)")
    philly.add_argument("--cores", type=int, default=24, help="CPU cores per server (Synergy: 24 or 32)")
    philly.add_argument("--load", type=float, default=1.0, help="GPU-hours asked over the cluster's, over the arrivals")
    parser.add_argument("--quick", action="store_true",
                        help="apportion on 60 Philly jobs, 2 servers (Synergy's side needs its checkout, --synergy): what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.workload, args.jobs, args.servers = "philly", 60, 2
    if args.workload == "synergy":
        if not args.synergy and not args.recorded:
            parser.error("--workload synergy needs --synergy PATH (Synergy's checkout) or --recorded DIR")
        args.seed = 42 if args.seed is None else args.seed
        args.policies = args.policies or "FIFO,SRTF,LAS"
        synergy_comparison(args)
    else:
        args.seed = 0 if args.seed is None else args.seed
        philly_comparison(args)
        if args.quick:
            print("synergy: its side not run (no --synergy checkout given)")


if __name__ == "__main__":
    main()
