"""Check that this checkout predicts job durations exactly as another revision does (main by default).

A faster predictor must not change what it predicts. This replays qssf on predicted durations
(``qssf:lognormal``, ranked by the lognormal predictions alone: a revision without that variant
replays its plain qssf, which is that form) twice per case, once with this checkout's code and once with the revision's (checked out in a
temporary git worktree and put first on PYTHONPATH in a subprocess), and compares, bit for bit,
each job's first prediction (GPU-seconds and log standard deviation) and each job's finish time.
The cases: 30,000 synthetic jobs with 200 users and 2,000 job names at random (every level of
the ladder has groups), and the Philly trace's first 20,000 jobs (skipped when ../shared is absent).

    python benchmarks/checks/check_durations_identical.py                  # against main; exit 1 if different
    python benchmarks/checks/check_durations_identical.py --against HEAD~3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
CLUSTER = "v100:160,p100:160,k80:160"  # as benchmarks/accuracy/durations.py
CASES = ("synthetic", "philly")
QUICK_JOBS = 300  # --quick: the synthetic case's first few jobs, against HEAD


def fingerprint(case: str) -> dict:
    """The qssf replay of ``case`` with whatever ``apportion`` imports: a hash of each compared column."""
    from dataclasses import replace

    import numpy as np

    from apportion.experiment import WorkloadSettings, load_inputs, policy_from_spec
    from apportion.sim import SimConfig
    from apportion.sim.simulator import Simulator

    if case in ("synthetic", "quick"):
        jobs = 30_000 if case == "synthetic" else QUICK_JOBS
        inputs = load_inputs(WorkloadSettings(jobs=jobs, rate_per_hour=120.0, cluster=CLUSTER))
        rng = np.random.default_rng(0)
        users = np.array([f"user-{u}" for u in rng.integers(0, 200, jobs)], dtype=object)
        names = np.array([f"job-{k}" for k in rng.integers(0, 2000, jobs)], dtype=object)
        inputs = replace(inputs, jobs=replace(inputs.jobs, user=users, name=names))
    else:
        inputs = load_inputs(WorkloadSettings(path=str(PHILLY), cluster=CLUSTER, jobs=20_000))
    config = SimConfig()
    try:  # qssf ranked by its lognormal predictions alone (a revision before the variant: its qssf is that)
        policy = policy_from_spec("qssf:lognormal", restart_cost_s=config.restart_cost_s)
    except ValueError:
        policy = policy_from_spec("qssf", restart_cost_s=config.restart_cost_s)
    simulator = Simulator(inputs.jobs, inputs.cluster, inputs.throughputs, policy, config)
    result = simulator.run()
    columns = {"first_gpu_s": simulator.history.first_gpu_s, "first_log_sd": simulator.history.first_log_sd,
               "finish_s": result.finish_s}
    return {"jobs": len(inputs.jobs), "predicted": int(np.isfinite(simulator.history.first_gpu_s).sum()),
            **{name: hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
               for name, value in columns.items()}}


def fingerprint_with(code: Path, case: str) -> dict:
    """``fingerprint(case)`` in a fresh process importing ``apportion`` from ``code``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, __file__, "--fingerprint", case], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{case} with the code at {code} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--fingerprint", choices=(*CASES, "quick"), help=argparse.SUPPRESS)  # the subprocess's part
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_JOBS} synthetic jobs against HEAD: seconds, what the test suite runs")
    args = parser.parse_args()
    if args.fingerprint:
        print(json.dumps(fingerprint(args.fingerprint)))
        return
    cases = [case for case in CASES if case != "philly" or PHILLY.exists()]
    if args.quick:
        cases, args.against = ["quick"], "HEAD"
    different = False
    with tempfile.TemporaryDirectory() as scratch:
        other = Path(scratch) / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(other), args.against],
                       check=True)
        try:
            for case in cases:
                theirs, ours = fingerprint_with(other, case), fingerprint_with(ROOT, case)
                changed = sorted(key for key in theirs if theirs[key] != ours.get(key))
                different |= bool(changed)
                print(f"{case} ({ours['jobs']} jobs, {ours['predicted']} predicted): "
                      + (f"DIFFERENT: {', '.join(changed)}" if changed else f"identical to {args.against}"), flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)
    if "philly" not in cases and not args.quick:
        print(f"philly: skipped (no trace at {PHILLY})")
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
