"""How long `apportion trace info` takes on a trace, beside what reading it for a simulation costs.

Times, in this process, the summary `trace info` prints (reading the file into the common schema and
summarising it) and, as the baseline in the same run, `read_workload_csv` on the same file (what
`simulate --workload` pays before its first round); then the whole `apportion trace info` command
as a process, next to a bare `python -c pass`. Medians of REPEATS, in seconds, as one JSON object.

    python benchmarks/speed/trace_info.py [FILE] [--repeats 5]   # FILE: ../shared/traces/philly_pollux_jobs.csv.gz
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "philly_pollux_jobs.csv.gz"


def median_s(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_rows(path: str, rows: int) -> str:
    """A temporary copy of the trace's header and first ``rows`` jobs (for ``--quick``)."""
    import gzip
    import tempfile

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as trace:
        lines = [trace.readline() for _ in range(rows + 1)]
    copy = Path(tempfile.mkdtemp(prefix="apportion-trace-")) / "first.csv"
    copy.write_text("".join(lines))
    return str(copy)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="the trace's first 300 jobs, each timing once: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
        args.file = first_rows(args.file, 300)

    from apportion.core.cluster import parse_cluster_shorthand
    from apportion.workloads.catalog import builtin_throughputs
    from apportion.workloads.trace_csv import read_trace_rows, read_workload_csv
    from apportion.workloads.trace_summary import summarize

    cluster = parse_cluster_shorthand("v100:160,p100:160,k80:160")
    table = builtin_throughputs()
    summary = median_s(lambda: summarize(read_trace_rows(args.file), args.file, cluster), args.repeats)
    reading = median_s(lambda: read_workload_csv(args.file, throughputs=table), args.repeats)
    command = [sys.executable, "-m", "apportion.cli", "trace", "info", args.file, "--cluster",
               "v100:160,p100:160,k80:160", "--json"]
    process = median_s(lambda: subprocess.run(command, check=True, capture_output=True), args.repeats)
    bare = median_s(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeats)
    jobs = summarize(read_trace_rows(args.file), args.file)["jobs"]
    print(json.dumps({"file": args.file, "jobs": jobs, "summary_s": round(summary, 3),
                      "read_for_simulate_s": round(reading, 3), "ratio": round(summary / reading, 2),
                      "command_s": round(process, 3), "bare_python_s": round(bare, 3)}, indent=2))


if __name__ == "__main__":
    main()
