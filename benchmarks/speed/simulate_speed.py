"""Print how fast the simulator replays the Philly trace and a large synthetic workload.

Each case runs in a fresh process so its peak memory (max RSS) is its own. A calibration
figure (time to sort 5M floats with numpy, in the same run) lets figures from different
machines be compared as ratios.

    python benchmarks/speed/simulate_speed.py                      # the issue's three cases
    python benchmarks/speed/simulate_speed.py --case philly --policy las
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import resource
import sys
import time
from pathlib import Path

import numpy as np

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
PHILLY_CLUSTER = "v100:160,p100:160,k80:160"


def calibration_s() -> float:
    values = np.random.default_rng(0).random(5_000_000)
    start = time.perf_counter()
    np.sort(values)
    return time.perf_counter() - start


def run_case(case: str, policy: str, jobs: int, rate: float, cluster: str, philly_jobs: int | None, out) -> None:
    from apportion.experiment import WorkloadSettings, load_inputs, run_policy

    start = time.perf_counter()
    if case == "philly":
        settings = WorkloadSettings(path=str(PHILLY), cluster=cluster or PHILLY_CLUSTER, jobs=philly_jobs)
    else:
        settings = WorkloadSettings(jobs=jobs, rate_per_hour=rate, cluster=cluster or PHILLY_CLUSTER)
    inputs = load_inputs(settings)
    load_s = time.perf_counter() - start
    cpu_start = time.process_time()
    result = run_policy(inputs, policy)
    simulate_cpu_s = time.process_time() - cpu_start
    total_s = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put(
        {
            "case": case,
            "policy": policy,
            "jobs": len(inputs.jobs),
            "cluster": inputs.cluster.describe(),
            "load_s": round(load_s, 2),
            "simulate_s": round(result.summary["sim_wall_s"], 2),
            "simulate_cpu_s": round(simulate_cpu_s, 2),  # steadier than wall time on a shared machine
            "total_s": round(total_s, 2),
            "peak_rss_mib": round(peak_mib),
            "decisions": result.summary["decisions"],
            "completed": result.summary["completed"],
            "avg_jct_h": round((result.summary["avg_jct_s"] or 0) / 3600, 2),
            "utilization": round(result.summary["utilization"], 3),
        }
    )


def measure(case: str, policy: str, jobs: int, rate: float, cluster: str, philly_jobs: int | None = None) -> dict:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=run_case, args=(case, policy, jobs, rate, cluster, philly_jobs, out))
    process.start()
    while True:  # wait for the figures, but not for ever if the case failed in its process
        try:
            figures = out.get(timeout=1.0)
            break
        except queue.Empty:
            if not process.is_alive():
                sys.exit(f"{case} under {policy} failed (exit code {process.exitcode}); see the error above")
    process.join()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["philly", "synthetic"], help="one case only")
    parser.add_argument("--policy", default=None)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="synthetic jobs")
    parser.add_argument("--rate", type=float, default=None, help="synthetic jobs/hour (default 120: about 80%% load)")
    parser.add_argument("--cluster", default="")
    parser.add_argument("--quick", action="store_true",
                        help="the first 300 jobs of Philly and 300 synthetic ones, under las: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        cases = [("philly", "las"), ("synthetic", "las")]
        args.jobs = 300
    elif args.case is None:
        cases = [("philly", "las"), ("philly", "max-min-fairness"), ("synthetic", "las")]
    else:
        cases = [(args.case, args.policy or "las")]
    if any(c == "philly" for c, _ in cases) and not PHILLY.exists():
        sys.exit(f"the Philly trace is not at {PHILLY}")
    # about 80% load: the generator's mean job is ~1.9 GPU-hours at v100 speed (lognormal mean
    # 5,630 s × 1.23 GPUs), and v100:160,p100:160,k80:160 does ~300 v100-GPUs' worth of work
    rate = args.rate if args.rate is not None else 120.0
    print(json.dumps({"calibration_sort_5m_s": round(calibration_s(), 3)}))
    for case, policy in cases:
        print(json.dumps(measure(case, policy, args.jobs, rate, args.cluster, args.jobs if args.quick else None)),
              flush=True)


if __name__ == "__main__":
    main()
