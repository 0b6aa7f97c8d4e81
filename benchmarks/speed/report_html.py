"""Print what report.html costs: its size for a large replay, the time to write it, and the
simulator's speed with and without the holdings recorder that its Gantt chart needs.

Each replay runs in a fresh process; runs with the recorder off and on alternate, and the
simulate CPU time (steadier than wall time on a shared machine) of each is printed, then the
size of the report written from the last recorded run.

    python benchmarks/speed/report_html.py                      # 10,000 synthetic jobs, max-min fairness
    python benchmarks/speed/report_html.py --jobs 2000 --policy las --repeat 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pickle
import sys
import tempfile
import time
from pathlib import Path


def replay(jobs: int, policy: str, record: bool, keep: str | None, out) -> None:
    from apportion.experiment import WorkloadSettings, load_inputs, run_policy

    inputs = load_inputs(WorkloadSettings(jobs=jobs))
    start = time.process_time()
    result = run_policy(inputs, policy, record_holdings=record)
    cpu_s = time.process_time() - start
    if keep:
        Path(keep).write_bytes(pickle.dumps(result))
    out.put({"record_holdings": record, "simulate_cpu_s": round(cpu_s, 2),
             "simulate_wall_s": round(result.summary["sim_wall_s"], 2), "decisions": result.summary["decisions"],
             "segments": None if result.holdings is None else int(len(result.holdings.job)),
             "preemptions": result.summary["preemptions"], "moves": result.summary["moves"]})


def in_process(*args) -> dict:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=replay, args=(*args, out))
    process.start()
    process.join()
    if process.exitcode != 0:
        sys.exit(f"the replay failed (exit code {process.exitcode}); see the error above")
    return out.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000, help="synthetic jobs (default cluster and rate)")
    parser.add_argument("--policy", default="max-min-fairness")
    parser.add_argument("--repeat", type=int, default=1, help="replays with the recorder off and on, alternating")
    parser.add_argument("--quick", action="store_true", help="a few jobs, seconds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.policy = 100, "las"
    with tempfile.TemporaryDirectory() as scratch:
        kept = Path(scratch) / "result.pickle"
        for _ in range(args.repeat):
            for record in (False, True):
                figures = in_process(args.jobs, args.policy, record, str(kept) if record else None)
                print(json.dumps({"jobs": args.jobs, "policy": args.policy, **figures}), flush=True)
        from apportion.report.html import _pack, _plotly_packed, report_figures, write_report

        result = pickle.loads(kept.read_bytes())
        start = time.perf_counter()
        path = write_report([result], Path(scratch) / "report.html")
        write_s = time.perf_counter() - start
        data = json.dumps({k: v for k, v in report_figures([result]).items() if k != "notes"}, separators=(",", ":"))
        print(json.dumps({
            "report_html_bytes": path.stat().st_size,
            "plotly_js_packed_bytes": len(_plotly_packed()),
            "figures_json_bytes": len(data),
            "figures_packed_bytes": len(_pack(data)),
            "write_s": round(write_s, 2),
        }))


if __name__ == "__main__":
    main()
