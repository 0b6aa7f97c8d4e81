"""Print the preemption round trip of the example training scripts, as JSON.

For each example, each repeat: attempt 1 trains under a fake lease server until its lease is
refused at step K; attempt 2 restores that checkpoint and is refused again after one step.

- refusal_to_exit_s: from the server's refusal to the process's exit (snapshot, write,
  fsync, rename, interpreter shutdown), as the parent sees it;
- checkpoint_s: the part of it the runtime spent on the checkpoint (its own log line);
- start_to_restored_s: from starting attempt 2 to its first lease call, made right after
  the restore (interpreter, torch import, data set and model built, checkpoint loaded);
- start_to_first_step_s: from starting attempt 2 to the end of its first step after restore;
- cold_start_to_first_step_s: the same for attempt 1, which has no checkpoint to load;
- restore_load_s: the time the runtime spent loading the checkpoint (its own log line).

Medians over the repeats (all samples under "samples"). CPU unless CUDA is visible.

    python benchmarks/speed/preemption_roundtrip.py                  # both examples, 5 repeats
    python benchmarks/speed/preemption_roundtrip.py --example cnn --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apportion.runtime.testing import FakeLeaseServer

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "cnn": (REPO / "examples" / "train_cnn.py", 60),  # script, refusal step K
    "lm": (REPO / "examples" / "train_lm.py", 30),
}


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_attempt(server: FakeLeaseServer, script: Path, attempt: int, directory: str, total: int) -> dict:
    env = {**base_env(), **server.job_env(job_id="bench", attempt=attempt, total_steps=total, checkpoint_dir=directory)}
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate()
    exited = time.time()
    if process.returncode != 75:
        raise RuntimeError(f"attempt {attempt} exited {process.returncode}:\n{err}")
    calls = [c for c in server.lease_calls() if c["attempt"] == attempt]
    refusal = next(c for c in calls if c["answer"] == {"renew": False})
    return {"started": started, "exited": exited, "calls": calls, "refusal": refusal, "stderr": err}


def one_round_trip(script: Path, refuse_at: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="apportion-bench-") as directory:
        with FakeLeaseServer(refuse_at=[refuse_at, refuse_at + 1]) as server:
            first = run_attempt(server, script, 1, directory, refuse_at + 100)
            size = sum(p.stat().st_size for p in Path(directory).glob("step-*.pt"))
            second = run_attempt(server, script, 2, directory, refuse_at + 100)
    checkpoint = re.search(r"total (\d+\.\d+)s; exit 75", first["stderr"])
    load = re.search(r"loaded in (\d+\.\d+)s", second["stderr"])
    after_restore = next(c for c in second["calls"] if c["steps_done"] == refuse_at)
    first_step = next(c for c in second["calls"] if c["steps_done"] == refuse_at + 1)
    cold_first_step = next(c for c in first["calls"] if c["steps_done"] == 1)
    return {
        "refusal_to_exit_s": first["exited"] - first["refusal"]["answered"],
        "checkpoint_s": float(checkpoint.group(1)),
        "checkpoint_bytes": size,
        "start_to_restored_s": after_restore["time"] - second["started"],
        "start_to_first_step_s": first_step["time"] - second["started"],
        "cold_start_to_first_step_s": cold_first_step["time"] - first["started"],
        "restore_load_s": float(load.group(1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", choices=sorted(EXAMPLES), action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="a torch-free job (benchmarks/jobs/timed_job.py) once, refused at step 3: "
                        "seconds, what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        EXAMPLES["timed"] = (REPO / "benchmarks" / "jobs" / "timed_job.py", 3)
        args.example, args.repeats = ["timed"], 1

    import torch

    results = {}
    for name in args.example or sorted(EXAMPLES):
        script, refuse_at = EXAMPLES[name]
        samples = [one_round_trip(script, refuse_at) for _ in range(args.repeats)]
        keys = samples[0].keys()
        results[name] = {
            "refused_at_step": refuse_at,
            **{k: round(statistics.median(s[k] for s in samples), 4) for k in keys},
            "samples": {k: [round(s[k], 4) for s in samples] for k in keys if k != "checkpoint_bytes"},
        }
    print(
        json.dumps(
            {
                "benchmark": "preemption_roundtrip",
                "device": "cuda" if torch.cuda.is_available() else "cpu",
                "cpu": platform.processor() or platform.machine(),
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
                "repeats": args.repeats,
                "statistic": "median",
                "examples": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
