"""Runs Synergy's own simulator (msr-fiddle/synergy, its ``simulator/``) on its own synthetic workload,
for ``benchmarks/compare/data_stalls.py`` to set apportion beside it. Run with a Python that has Synergy's
simulation dependencies (numpy, pandas, matplotlib); nothing of apportion is imported.

Only Synergy's simulation path is used: its deployment RPC, NUMA and optimiser modules (grpc, numa,
cvxpy) are replaced by empty stand-ins, and ``collections.Mapping`` is restored for Pythons after 3.9.
Each job Synergy's generator makes is written to ``--record`` as ``id,model,arrival_s,iterations,
gpus,iteration_s``; the average JCT of the jobs Synergy measures (ids ``first`` to ``last - 1``; it
stops once they have all finished) is printed as one JSON line.

    python synergy_original.py SYNERGY_DIR FIFO|SRTF|LAS fair|tune|greedy [--jobs-per-hour 9]
        [--split 20,70,10] [--seed 42] [--measure 4000,5000] [--record FILE]
"""

import argparse
import collections
import collections.abc
import json
import logging
import os
import random
import sys
import time
import types


def stand_ins() -> None:
    """Empty modules where Synergy imports what only its deployment and optimiser use."""
    collections.Mapping = collections.abc.Mapping  # Synergy was written for Python 3.6-3.8
    for name in ("numa", "cvxpy", "psutil", "deployment.runtime", "deployment.runtime.rpc",
                 "deployment.runtime.rpc.scheduler_server", "deployment.runtime.rpc.scheduler_client",
                 "deployment.helper", "opt_algo", "opt_algo.synergy_opt"):
        sys.modules[name] = types.ModuleType(name)
    rpc = sys.modules["deployment.runtime.rpc"]
    rpc.scheduler_server = sys.modules["deployment.runtime.rpc.scheduler_server"]
    rpc.scheduler_client = sys.modules["deployment.runtime.rpc.scheduler_client"]
    sys.modules["deployment.helper"].get_self_ip = lambda: "127.0.0.1"
    sys.modules["opt_algo.synergy_opt"].Solver = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("synergy", help="Synergy's checkout (the folder holding simulator/) or its simulator/")
    parser.add_argument("policy", choices=("FIFO", "SRTF", "LAS"))
    parser.add_argument("mode", choices=("fair", "tune", "greedy"))
    parser.add_argument("--jobs-per-hour", type=float, default=9.0)
    parser.add_argument("--split", default="20,70,10")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--measure", default="4000,5000")
    parser.add_argument("--record")
    args = parser.parse_args()
    sim_dir = os.path.abspath(args.synergy)
    if os.path.isdir(os.path.join(sim_dir, "simulator")):
        sim_dir = os.path.join(sim_dir, "simulator")
    os.chdir(sim_dir)
    sys.path.insert(0, sim_dir)
    stand_ins()
    logging.basicConfig(level=logging.WARNING)
    import runner  # noqa: E402  (Synergy's)
    from jobs.workload import Workload  # noqa: E402  (Synergy's)

    record = open(args.record, "w") if args.record else None
    if record:
        generate = Workload.generate_next_job

        def generate_and_record(self, last_arrival, arrival=-1):
            job = generate(self, last_arrival, arrival=arrival)
            record.write(f"{job.job_id},{job.job_model.model_name},{job.job_arrival_time},"
                         f"{job.job_total_iteration},{job.job_gpu_demand},{job.job_iteration_time}\n")
            return job
        Workload.generate_next_job = generate_and_record

    first, last = (int(x) for x in args.measure.split(","))
    random.seed(args.seed)  # as Synergy's own benchmark() does before each run
    start = time.perf_counter()
    run = runner.Runner(cluster_job_log=None, scheduler=args.policy, jobs_per_hour=args.jobs_per_hour,
                        series_id_filter=(first, last), model_class_split=tuple(int(x) for x in args.split.split(",")),
                        exponential=True, placement=True, fair=args.mode == "fair", tune=args.mode == "tune",
                        opt=False, simulate=True, config_file="configs/default_cluster.ini", num_jobs_default=0)
    _, completion = run.run_simulation()
    wall_s = time.perf_counter() - start
    if record:
        record.close()
    jct = [y for _, y in completion.data_series]
    print(json.dumps({"policy": args.policy, "mode": args.mode, "measured": len(jct), "generated": run.num_jobs_so_far,
                      "avg_jct_s": sum(jct) / len(jct), "wall_s": round(wall_s, 2)}))


if __name__ == "__main__":
    main()
