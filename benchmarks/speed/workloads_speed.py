"""Print how long the Philly trace takes to load and a million synthetic jobs take to generate.

Run from the repository root: ``python benchmarks/speed/workloads_speed.py``. Uses a small hand-made
throughput table, so it needs nothing but the trace (skipped when ../shared/traces lacks it).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.core.throughputs import ThroughputTable  # noqa: E402
from apportion.workloads.synthetic import generate_workload  # noqa: E402
from apportion.workloads.trace_csv import read_workload_csv  # noqa: E402

PHILLY = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
TABLE = ThroughputTable(
    kinds=("a/bs1", "b/bs2", "c/bs3"),
    gpu_types=("k80", "v100"),
    scales=(1, 2, 4, 8),
    steps_per_s=np.array(
        [
            [[1, 2, 4, 8], [2, 4, 8, 16]],
            [[1, 1.8, 3.4, 6], [3, 5, 9, 15]],
            [[0.5, 1, 2, 4], [np.nan] * 4],
        ],
        dtype=float,
    ),
)


def timings(work, repeats: int = 5) -> str:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    median = sorted(seconds)[repeats // 2]
    return f"first {seconds[0]:.3f} s, best {min(seconds):.3f} s, median {median:.3f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the trace once and 10,000 synthetic jobs once: what the test suite runs")
    args = parser.parse_args()
    repeats, synthetic = (1, 10_000) if args.quick else (5, 1_000_000)
    if PHILLY.exists():
        print("Philly trace, 82,247 jobs:", timings(lambda: read_workload_csv(PHILLY, throughputs=TABLE), repeats))
    else:
        print(f"Philly trace not found at {PHILLY.resolve()}; skipped")
    print(f"synthetic, {synthetic:,} jobs:", timings(
        lambda: generate_workload(jobs=synthetic, rate_per_hour=100, throughputs=TABLE), repeats
    ))


if __name__ == "__main__":
    main()
