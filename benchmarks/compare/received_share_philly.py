"""The received share from arrival against Gavel's rule (from the last re-solve), on the Philly trace.

Replays the trace's first 3,000 jobs (the replay of ``benchmarks/checks/check_identical.py --jobs 3000``)
on 160 GPUs each of v100, p100 and k80 under each rule (``SimConfig.received_since``) for each
policy, and prints the average JCT, the makespan and the preemptions beside each other.

    python benchmarks/compare/received_share_philly.py
    python benchmarks/compare/received_share_philly.py --policies max-min-fairness --jobs 1000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.experiment import WorkloadSettings, load_inputs, run_policy  # noqa: E402
from apportion.sim import SimConfig  # noqa: E402

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
POLICIES = ("fifo", "srtf", "las", "qssf", "max-min-fairness", "finish-time-fairness", "min-makespan",
            "max-throughput", "min-cost", "max-min-fairness:space-sharing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE), help="a Philly-style trace (default: ../shared's)")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--cluster", default="v100:160,p100:160,k80:160")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--quick", action="store_true",
                        help="the first 100 jobs under las: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.policies = 100, "las"
    if not Path(args.trace).is_file():
        sys.exit(f"no trace at {args.trace} (see docs/workloads.md for where to get the Philly trace)")
    inputs = load_inputs(WorkloadSettings(path=args.trace, cluster=args.cluster, jobs=args.jobs))
    print(f"first {args.jobs} jobs of {Path(args.trace).name} on {args.cluster}: average JCT in hours "
          "(preemptions), received share counted from arrival and from the last re-solve (allocation)")
    header = f"{'policy':32s}  {'arrival':>16s}  {'allocation':>16s}  {'JCT change':>10s}"
    print(header)
    print("-" * len(header))
    for policy in args.policies.split(","):
        runs = [run_policy(inputs, policy, SimConfig(received_since=rule)).summary for rule in ("arrival", "allocation")]
        cells = [f"{s['avg_jct_s'] / 3600:7.3f} ({s['preemptions']:6d})" for s in runs]
        change = runs[1]["avg_jct_s"] / runs[0]["avg_jct_s"] - 1
        print(f"{policy:32s}  {cells[0]:>16s}  {cells[1]:>16s}  {change:+10.1%}", flush=True)


if __name__ == "__main__":
    main()
