"""Profile one Philly replay under cProfile and print where the time goes.

    python benchmarks/speed/profile_simulate.py --policy max-min-fairness [--top 30] [--jobs N]

The profiler inflates Python-heavy code (roughly 20%); compare profiles with profiles.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
PHILLY_CLUSTER = "v100:160,p100:160,k80:160"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="max-min-fairness")
    parser.add_argument("--jobs", type=int, default=None, help="only the trace's first N jobs")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    parser.add_argument("--save", type=Path, default=None, help="also write the raw profile here")
    parser.add_argument("--quick", action="store_true", help="a few jobs, seconds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.policy, args.jobs, args.top = "las", 200, 5

    from apportion.experiment import WorkloadSettings, load_inputs, run_policy

    inputs = load_inputs(WorkloadSettings(path=str(PHILLY), cluster=PHILLY_CLUSTER, jobs=args.jobs))
    profile = cProfile.Profile()
    profile.enable()
    run_policy(inputs, args.policy)
    profile.disable()
    if args.save:
        profile.dump_stats(args.save)
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats(args.sort).print_stats(args.top)
    if args.sort != "cumulative":
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
