"""Print how long each LP policy takes to solve one allocation, and how good POP's answer is.

    python benchmarks/speed/solve.py                                   # the table: every policy, sizes, types
    python benchmarks/speed/solve.py --policy max-min-fairness --jobs 10000 --types 3 [--partitions 8]
    python benchmarks/speed/solve.py --policy max-min-fairness --jobs 2048 --space-sharing [--partitions 8]

One case prints one JSON line: ``solve_s`` is the median over ``--repeats`` solves in one warm
process (a fresh policy each time, so the model build is included), ``objective`` the
policy's own objective evaluated on the allocation (higher is better for max-min-fairness and
max-throughput and min-cost, lower for finish-time-fairness and min-makespan), and with
``--partitions`` > 1 also ``objective_vs_exact``: the same objective over the unpartitioned optimum.
The instance is seeded: random steps/s per job and type (each job its own row), 1/2/4/8 GPUs
in Philly's proportions, and a cluster with one GPU for every two jobs' GPUs split evenly by type.

``--space-sharing`` needs pair speeds, so its instance draws each job's kind from the built-in
catalog (Gavel's 26 kinds on k80, p100 and v100, measured alone and in pairs; ``--types`` is
ignored) with a priority weight of 1, 2, 4 or 8, in the same GPU counts and cluster sizing. It
adds ``classes`` (jobs with equal rows, what the LP is written over), ``pair_columns`` and
``objective_vs_all_pairs``: the objective over the same problem with every pair that beats
time-slicing instead of each class's bounded list of partners. Jobs of one class are
interchangeable, so that class-level problem is the exact problem over all pairs of jobs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy, pairs
from apportion.workloads.catalog import builtin_throughputs

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


def sharing_instance(jobs: int, seed: int = 0) -> tuple[JobView, ClusterView, ThroughputView]:
    """Catalog kinds on k80/p100/v100 with their measured pairs; see the module docstring."""
    table = builtin_throughputs()
    types = ("k80", "p100", "v100")
    rng = np.random.default_rng(seed)
    gpus = rng.choice(GPU_COUNTS, size=jobs, p=GPU_WEIGHTS / GPU_WEIGHTS.sum())
    kind = rng.integers(0, len(table.kinds), size=jobs)
    type_index = [table.gpu_types.index(t) for t in types]
    scale_index = np.searchsorted(np.asarray(table.scales), gpus)
    steps = np.nan_to_num(table.steps_per_s[kind[:, None], np.array(type_index)[None, :], scale_index[:, None]])
    capacity = np.full(len(types), max(1.0, np.ceil(gpus.sum() / 2 / len(types))))
    view = JobView(
        index=np.arange(jobs), submit_time_s=rng.uniform(0, 3600, jobs), kind=kind,
        num_gpus=gpus, priority=rng.choice([1.0, 2.0, 4.0, 8.0], size=jobs), total_steps=rng.uniform(1e3, 1e5, jobs),
        steps_done=np.zeros(jobs), attained_service_s=np.zeros(jobs), first_start_s=np.full(jobs, np.nan),
        running_type=np.full(jobs, -1), queue=np.full(jobs, "", object), user=np.full(jobs, "", object),
        now_s=3600.0,
    )
    prices = np.array([0.9, 1.46, 2.48])
    return view, ClusterView(types, capacity, prices), ThroughputView(steps, table.pair_matrix(types))


def objective(name: str, allocation: Allocation, jobs: JobView, cluster: ClusterView, tput: ThroughputView) -> float:
    share = allocation.share
    pair_rates = None
    if allocation.has_pairs:
        first, second = jobs.kind[allocation.pair_jobs[:, 0]], jobs.kind[allocation.pair_jobs[:, 1]]
        pair_rates = np.stack([tput.pair_steps_per_s[first, second], tput.pair_steps_per_s[second, first]], axis=2)
    rate = allocation.effective_throughput(tput.steps_per_s, pair_rates)
    reference = tput.reference(cluster.capacity)
    normalised = np.divide(rate, reference, out=np.zeros_like(rate), where=reference > 0)
    if name == "max-min-fairness" and allocation.has_pairs:
        return float((normalised / jobs.priority)[tput.steps_per_s.max(axis=1) > 0].min())
    if name == "max-min-fairness":
        return float(normalised.min())
    if name == "max-throughput":
        return float(normalised.sum())
    if name == "max-throughput" and allocation.has_pairs:
        return float((normalised * jobs.priority).sum())
    if name == "min-cost":
        if allocation.has_pairs:
            raise SystemExit("objective of min-cost with pairs is not measured here")
        return float((share * tput.normalised(cluster.capacity) / cluster.price_per_gpu_hour).sum())
    with np.errstate(divide="ignore"):
        finish = jobs.remaining_steps / rate
    if name == "min-makespan":
        return float(finish.max())
    policy = make_policy("finish-time-fairness")
    isolated = jobs.elapsed_s + jobs.remaining_steps / policy.isolated_rate(jobs, cluster, tput)
    return float(((jobs.elapsed_s + finish) / isolated).max())


def measure(name: str, jobs: int, types: int, partitions: int, repeats: int, space_sharing: bool = False) -> dict:
    view, cluster, tput = sharing_instance(jobs) if space_sharing else instance(jobs, types)
    options = {"space_sharing": True} if space_sharing else {}
    times, allocation = [], None
    for _ in range(repeats):
        policy = make_policy(name, partitions=partitions, **options)
        start = time.perf_counter()
        allocation = policy.allocate(view, cluster, tput)
        times.append(time.perf_counter() - start)
    figures = {"policy": name, "jobs": jobs, "types": len(cluster.gpu_types), "partitions": partitions,
               "solve_s": round(statistics.median(times), 4),
               "objective": objective(name, allocation, view, cluster, tput)}
    if partitions > 1:
        exact = objective(name, make_policy(name, **options).allocate(view, cluster, tput), view, cluster, tput)
        figures["objective_vs_exact"] = round(figures["objective"] / exact, 4) if exact else None
    if space_sharing:
        fair = name == "max-min-fairness"  # the policies' own worth of a unit of time alone
        weight = 1 / view.priority if fair else view.priority
        value = tput.normalised(cluster.capacity) * weight[:, None]
        bounded = pairs.sharing_problem(view, tput, value)
        every = pairs.sharing_problem(view, tput, value, all_pairs=True)
        start = time.perf_counter()
        solve = (lambda **kw: pairs.solve_max_min(**kw)[0]) if fair else pairs.solve_max_total
        all_pairs = solve(jobs=view, cluster=cluster, throughputs=tput, value=value, all_pairs=True)
        exact = objective(name, all_pairs, view, cluster, tput)
        figures.update({
            "classes": len(bounded.count), "candidate_class_pairs": len(bounded.pair_class),
            "all_class_pairs": len(every.pair_class), "pairs_formed": len(allocation.pair_jobs),
            "objective_vs_all_pairs": round(figures["objective"] / exact, 5) if exact else None,
            "all_pairs_solve_s": round(time.perf_counter() - start, 4),
        })
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", choices=POLICIES)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--types", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--space-sharing", action="store_true",
                        help="pairs of one-GPU jobs may share a GPU (catalog kinds; max-min-fairness, max-throughput)")
    parser.add_argument("--max-jobs", type=int, default=10_000, help="table mode: largest size to run")
    parser.add_argument("--quick", action="store_true",
                        help="every policy at 100 jobs, once: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.max_jobs, args.repeats = 100, 1
    if args.space_sharing:
        if args.policy not in (None, "max-min-fairness", "max-throughput"):
            sys.exit("--space-sharing is measured for max-min-fairness and max-throughput")
        for name in [args.policy] if args.policy else ("max-min-fairness", "max-throughput"):
            for jobs in [args.jobs] if args.jobs else (256, 2048, 16_384):
                for partitions in [args.partitions] if args.jobs else (1, 8):
                    print(json.dumps(measure(name, jobs, 3, partitions, args.repeats, space_sharing=True)), flush=True)
        return
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
