"""Record a replay's exact results, or check that the current code still reproduces them.

An optimisation must not change what a replay produces. This saves, per policy, the summary
(wall-clock figures left out) and a SHA-256 of the per-job columns (status, first start,
finish, preemptions, moves, steps done, time on each type) and of the timeline, then compares
a later run with it field by field.

    python benchmarks/checks/check_identical.py --save results.json            # record
    python benchmarks/checks/check_identical.py --compare results.json         # check (exit 1 if different)
    python benchmarks/checks/check_identical.py --compare results.json --policy las
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
PHILLY_CLUSTER = "v100:160,p100:160,k80:160"
POLICIES = ("max-min-fairness", "las")
WALL_FIELDS = {"sim_wall_s"}  # differ from run to run by nature


def fingerprint(result) -> dict:
    """The summary without wall-clock figures, and a hash of every per-job column and the timeline."""
    columns = {
        "status": result.status,
        "first_start": result.first_start_s,
        "finish": result.finish_s,
        "preemptions": result.preemptions,
        "moves": result.moves,
        "steps_done": result.steps_done,
        "time_on_type": result.time_on_type,
        "timeline": result.timeline,
    }
    hashes = {name: hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest() for name, value in columns.items()}
    summary = {k: v for k, v in result.summary.items() if k not in WALL_FIELDS and not k.endswith("_wall_s")}
    return {"summary": json.loads(json.dumps(summary, default=str)), "hashes": hashes}


def run(policy: str, path: Path, cluster: str, jobs: int | None) -> dict:
    from apportion.experiment import WorkloadSettings, load_inputs, run_policy

    inputs = load_inputs(WorkloadSettings(path=str(path), cluster=cluster, jobs=jobs))
    return fingerprint(run_policy(inputs, policy))


def differences(expected: dict, actual: dict) -> list[str]:
    out = []
    for section in ("summary", "hashes"):
        keys = sorted(set(expected[section]) | set(actual[section]))
        for key in keys:
            if expected[section].get(key) != actual[section].get(key):
                out.append(f"{section}.{key}: {expected[section].get(key)!r} != {actual[section].get(key)!r}")
    return out


def quick(args: argparse.Namespace) -> None:
    """``--quick``: record the trace's first 100 jobs, then check them against that record (both must hold)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "results.json"
        for step in (["--save", str(record)], ["--compare", str(record)]):
            sys.argv = [sys.argv[0], *step, "--jobs", "100", "--trace", str(args.trace), "--cluster", args.cluster,
                        *[f"--policy={policy}" for policy in args.policy or ["las"]]]
            main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--save", type=Path, help="write the results here")
    what.add_argument("--compare", type=Path, help="compare with results saved here")
    parser.add_argument("--policy", action="append", help="one policy (repeatable; default: max-min-fairness and las)")
    parser.add_argument("--trace", type=Path, default=PHILLY)
    parser.add_argument("--cluster", default=PHILLY_CLUSTER)
    parser.add_argument("--jobs", type=int, default=None, help="only the trace's first N jobs")
    parser.add_argument("--quick", action="store_true",
                        help="record, then check, the trace's first 100 jobs under las (unless --policy), "
                        "in a temporary file: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        return quick(args)
    if not (args.save or args.compare):
        parser.error("one of the arguments --save --compare is required")
    policies = args.policy or list(POLICIES)
    key = lambda policy: f"{policy}|{args.cluster}|{args.jobs or 'all'}"  # noqa: E731
    if args.save:
        saved = json.loads(args.save.read_text()) if args.save.exists() else {}
        for policy in policies:
            saved[key(policy)] = run(policy, args.trace, args.cluster, args.jobs)
            print(f"{policy}: recorded", flush=True)
        args.save.write_text(json.dumps(saved, indent=1, sort_keys=True))
        return
    saved = json.loads(args.compare.read_text())
    failed = False
    for policy in policies:
        if key(policy) not in saved:
            sys.exit(f"{policy}: nothing recorded for {key(policy)} in {args.compare}")
        diff = differences(saved[key(policy)], run(policy, args.trace, args.cluster, args.jobs))
        print(f"{policy}: {'identical' if not diff else 'DIFFERENT'}", flush=True)
        for line in diff:
            print("  " + line)
        failed |= bool(diff)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
