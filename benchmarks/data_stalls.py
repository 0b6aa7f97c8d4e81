"""Synergy's comparison on the Philly trace: node cores divided in proportion to GPUs, or where they speed jobs up.

Synergy (Mohan et al., OSDI'22) keeps the GPU policy and changes only how each server's CPU cores
are divided among the jobs placed on it. Its simulator's workload gives every Philly job a model
from a zoo of image, language and speech models (by default 20% image, 70% language, 10% speech),
each with a speed profiled at 1 to 9 cores per GPU, normalised to 1 at the GPU-proportional share
(3 cores a GPU on its servers of 8 GPUs, 24 cores and 500 GB). The profiles below are read from
those (at the proportional share of memory): image and speech models keep speeding up to 5-7 cores
a GPU, language models do not depend on cores at all. Each job here keeps the trace's duration at
the proportional share (its steps are those of that duration at the speed 3 cores a GPU give), so
the proportional replay is the GPU-only baseline. The trace's arrivals are stretched or squeezed so
that the jobs ask ``--load`` times the cluster's GPU-hours over the span of their arrivals.

Prints one JSON line per (GPU policy, CPU split: proportional, aware, greedy): average JCT (of all
jobs, of the CPU-sensitive ones, of the others), makespan, the GPU-weighted data stall, and the
wall time of the replay.

    python benchmarks/data_stalls.py [--jobs 2000] [--policies fifo,srtf,las] [--split 20,70,10]
                                     [--servers 16] [--cores 24] [--load 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.cpu_speed import CoreCurves, relative_speed
from apportion.core.jobs import JobTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.cpu_cores import CPU_SPLITS
from apportion.sim.simulator import job_throughputs
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.trace_csv import read_workload_csv

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
CORES_PER_GPU = np.arange(1.0, 10.0)  # the profiles' points: 1 to 9 cores a GPU
# speed at each point, 1 at the proportional share (3 cores a GPU); grouped image, language, speech
PROFILES = {
    "image": {
        "alexnet": [0.3, 0.66, 1, 1.25, 1.53, 1.75, 2, 2, 2],
        "res18": [0.37, 0.72, 1, 1.3, 1.53, 1.75, 2.4, 2.4, 2.4],
        "res50": [0.4, 0.74, 1, 1.15, 1.15, 1.15, 1.15, 1.15, 1.15],
        "mobilenet": [0.37, 0.72, 1, 1.3, 1.49, 1.55, 1.55, 1.55, 1.55],
        "shufflenet": [0.3, 0.66, 1, 1.25, 1.53, 1.75, 2, 2, 2],
    },
    "language": {"gnmt": [1] * 9, "transformer": [1] * 9, "lstm": [1] * 9},
    "speech": {
        "m5": [0.3, 0.66, 1, 1.2, 1.4, 1.5, 1.5, 1.5, 1.5],
        "deepspeech": [0.3, 0.66, 1, 1, 1, 1, 1, 1, 1],
    },
}
GPUS_PER_SERVER, MEMORY_GIB_PER_SERVER = 8, 500


def synergy_jobs(jobs: int, split: tuple[float, float, float], cluster: Cluster, load: float,
                 seed: int) -> tuple[JobTable, np.ndarray]:
    """The trace's first ``jobs`` with a model each (drawn by task ``split``, then uniformly), their
    curves, their steps at the proportional share and their arrivals at ``load``; and each job's model."""
    table = read_workload_csv(TRACE, throughputs=builtin_throughputs(), max_jobs=jobs, seed=seed)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--policies", default="fifo,srtf,las")
    parser.add_argument("--split", default="20,70,10", help="percent image,language,speech models (Synergy's default)")
    parser.add_argument("--servers", type=int, default=16, help="servers of 8 V100s (Synergy's default: 16)")
    parser.add_argument("--cores", type=int, default=24, help="CPU cores per server (Synergy: 24 or 32)")
    parser.add_argument("--load", type=float, default=1.0, help="GPU-hours asked over the cluster's, over the arrivals")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    split = tuple(float(x) for x in args.split.split(","))
    cluster = Cluster((NodeGroup("v100", args.servers * GPUS_PER_SERVER, GPUS_PER_SERVER, cpus_per_node=args.cores,
                                 memory_gib_per_node=MEMORY_GIB_PER_SERVER),))
    jobs, model = synergy_jobs(args.jobs, split, cluster, args.load, args.seed)
    sensitive = jobs.cpu_curves.saturation > args.cores / GPUS_PER_SERVER
    for policy in args.policies.split(","):
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


if __name__ == "__main__":
    main()
