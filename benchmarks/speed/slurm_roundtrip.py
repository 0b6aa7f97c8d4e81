"""Print the Slurm executor's submit-to-running and preempt-to-exit beside the local executor's, as JSON.

Both executors run the same job on this machine in the same run: the local executor on a slot of its
own, and a Slurm started here (executors/slurm/local_cluster.py: munged, slurmctld, one slurmd, one
made-up h100) through ``SlurmExecutor``. The job (Python) writes a marker file as its first act, then
sleeps until SIGTERM, on which it exits 75 as a checkpointed job does:

- submit_to_running_s: from calling ``start()`` to the marker file
  appearing (the job's own code running on its node);
- preempt_to_exit_s: from calling ``terminate()`` to ``poll()`` reporting the attempt's exit (75).

Medians over the repeats (every sample under "samples"), and Slurm's over the local executor's.
Needs root and Debian's slurm-wlm and munge.

    python benchmarks/speed/slurm_roundtrip.py               # 5 repeats
    python benchmarks/speed/slurm_roundtrip.py --repeats 10
    python benchmarks/speed/slurm_roundtrip.py --quick      # one repeat; the local executor's alone without Slurm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from apportion.executors.local import LocalExecutor
from apportion.executors.slurm.executor import SlurmExecutor
from apportion.executors.slurm.local_cluster import LocalSlurm, missing

JOB = ("import os, pathlib, signal, sys, time\n"
       "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
       "pathlib.Path(os.environ['MARKER']).write_text('up')\n"
       "time.sleep(600)\n")


def one(executor, job_id: int, slots: tuple[str, ...], marker: Path) -> tuple[float, float]:
    """(submit_to_running_s, preempt_to_exit_s) of one attempt."""
    env = dict(os.environ, MARKER=str(marker))
    began = time.perf_counter()
    executor.start(job_id, 1, [sys.executable, "-c", JOB], env, None, slots)
    while not marker.exists():
        executor.poll()
        time.sleep(0.005)
    running = time.perf_counter() - began
    began = time.perf_counter()
    executor.terminate(job_id)
    while True:
        ended = executor.poll()
        if ended:
            assert ended[0].code == 75, ended
            return running, time.perf_counter() - began
        time.sleep(0.005)


def measure(executor, slots, directory: Path, repeats: int) -> dict:
    samples = [one(executor, job_id, slots, directory / f"marker-{job_id}") for job_id in range(1, repeats + 1)]
    return {"submit_to_running_s": round(statistics.median(s[0] for s in samples), 3),
            "preempt_to_exit_s": round(statistics.median(s[1] for s in samples), 3),
            "samples": [f"{a:.3f}/{b:.3f}" for a, b in samples]}  # submit_to_running/preempt_to_exit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="one repeat, what the test suite runs; without Slurm here, the local executor's alone")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    why = missing()
    if why and not args.quick:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        local = measure(LocalExecutor(tmp / "local"), ("cpu:0",), tmp, args.repeats)
        if why:
            print(json.dumps({"local": local, "slurm": None, "why": why, "repeats": args.repeats}, indent=2))
            return
        with LocalSlurm(tmp / "slurm", {"n1": {"h100": 1}}) as cluster:
            executor = SlurmExecutor(tmp / "state", {"h100": "h100"}, env=cluster.env, poll_every_s=0.05)
            (tmp / "s").mkdir()
            slurm = measure(executor, ("h100:0",), tmp / "s", args.repeats)
    print(json.dumps({
        "local": local, "slurm": slurm,
        "slurm_over_local": {k: round(slurm[k] / local[k], 1) for k in ("submit_to_running_s", "preempt_to_exit_s")},
        "repeats": args.repeats, "slurm_poll_every_s": 0.05,
    }, indent=2))


if __name__ == "__main__":
    main()
