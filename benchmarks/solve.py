"""Print how long each LP policy takes to solve one allocation, and how good POP's answer is.

    python benchmarks/solve.py                                   # the table: every policy, sizes, types
    python benchmarks/solve.py --policy max-min-fairness --jobs 10000 --types 3 [--partitions 8]

One case prints one JSON line: ``solve_s`` is the median over ``--repeats`` solves in one warm
process (a fresh policy each time, so the model build is included), ``objective`` the
policy's own objective evaluated on the allocation (higher is better for max-min-fairness and
max-throughput and min-cost, lower for finish-time-fairness and min-makespan), and with
``--partitions`` > 1 also ``objective_vs_exact``: the same objective over the unpartitioned optimum.
The instance is seeded: random steps/s per job and type (each job its own row), 1/2/4/8 GPUs
in Philly's proportions, and a cluster with one GPU for every two jobs' GPUs split evenly by type.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy

POLICIES = ("max-min-fairness", "finish-time-fairness", "min-makespan", "max-throughput", "min-cost")
LOWER_IS_BETTER = {"finish-time-fairness", "min-makespan"}
GPU_COUNTS, GPU_WEIGHTS = np.array([1, 2, 4, 8]), np.array([76_627, 1_818, 1_870, 1_643])


def instance(jobs: int, types: int, seed: int = 0) -> tuple[JobView, ClusterView, ThroughputView]:
    rng = np.random.default_rng(seed)
    gpus = rng.choice(GPU_COUNTS, size=jobs, p=GPU_WEIGHTS / GPU_WEIGHTS.sum())
    speed = rng.uniform(0.2, 1.0, size=(1, types)) * rng.lognormal(0.0, 0.5, size=(jobs, types))
    steps_per_s = speed * rng.uniform(1, 20, size=(jobs, 1))
    capacity = np.full(types, max(1.0, np.ceil(gpus.sum() / 2 / types)))
    view = JobView(
        index=np.arange(jobs), submit_time_s=rng.uniform(0, 3600, jobs), kind=np.zeros(jobs, np.int64),
        num_gpus=gpus, priority=np.ones(jobs), total_steps=rng.uniform(1e3, 1e5, jobs),
        steps_done=np.zeros(jobs), attained_service_s=np.zeros(jobs), first_start_s=np.full(jobs, np.nan),
        running_type=np.full(jobs, -1), queue=np.full(jobs, "", object), user=np.full(jobs, "", object),
        now_s=3600.0,
    )
    prices = np.linspace(3.0, 0.9, types)
    return view, ClusterView(tuple(f"t{i}" for i in range(types)), capacity, prices), ThroughputView(steps_per_s)


def objective(name: str, share: np.ndarray, jobs: JobView, cluster: ClusterView, tput: ThroughputView) -> float:
    rate = (share * tput.steps_per_s).sum(axis=1)
    normalised = (share * tput.normalised(cluster.capacity)).sum(axis=1)
    if name == "max-min-fairness":
        return float(normalised.min())
    if name == "max-throughput":
        return float(normalised.sum())
    if name == "min-cost":
        return float((share * tput.normalised(cluster.capacity) / cluster.price_per_gpu_hour).sum())
    with np.errstate(divide="ignore"):
        finish = jobs.remaining_steps / rate
    if name == "min-makespan":
        return float(finish.max())
    policy = make_policy("finish-time-fairness")
    isolated = jobs.elapsed_s + jobs.remaining_steps / policy.isolated_rate(jobs, cluster, tput)
    return float(((jobs.elapsed_s + finish) / isolated).max())


def measure(name: str, jobs: int, types: int, partitions: int, repeats: int) -> dict:
    view, cluster, tput = instance(jobs, types)
    times, share = [], None
    for _ in range(repeats):
        policy = make_policy(name, partitions=partitions)
        start = time.perf_counter()
        share = policy.allocate(view, cluster, tput).share
        times.append(time.perf_counter() - start)
    figures = {"policy": name, "jobs": jobs, "types": types, "partitions": partitions,
               "solve_s": round(statistics.median(times), 4),
               "objective": objective(name, share, view, cluster, tput)}
    if partitions > 1:
        exact = objective(name, make_policy(name).allocate(view, cluster, tput).share, view, cluster, tput)
        figures["objective_vs_exact"] = round(figures["objective"] / exact, 4) if exact else None
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", choices=POLICIES)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--types", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--space-sharing", action="store_true", help="not built yet: exits with a message")
    parser.add_argument("--max-jobs", type=int, default=10_000, help="table mode: largest size to run")
    args = parser.parse_args()
    if args.space_sharing:
        sys.exit("space sharing is not implemented yet")
    if args.policy and args.jobs:
        print(json.dumps(measure(args.policy, args.jobs, args.types, args.partitions, args.repeats)))
        return
    for name in [args.policy] if args.policy else POLICIES:
        for types in (3, 6):
            for jobs in (100, 1_000, 10_000, 100_000):
                if jobs > args.max_jobs:
                    continue
                for partitions in (1, 8) if jobs >= 1_000 else (1,):
                    print(json.dumps(measure(name, jobs, types, partitions, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
