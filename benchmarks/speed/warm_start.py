"""Print how long a job takes to start, cold (exec'd) vs warm (forked from a spare wrapper), as JSON.

Each repeat starts the same example training script twice through ``LocalExecutor``, once
cold (no spares) and once warm (a spare that has finished its imports and waits), in
alternating order, under a fake lease server that refuses the lease at step 5 (the job then
checkpoints and exits 75):

- start_to_first_lease_s: from ``executor.start`` to the job's first lease call, which the
  runtime makes before its first step: interpreter, imports, data set and model built
  (the moment the server learns the attempt is up, its first progress report);
- start_to_first_step_s: from ``executor.start`` to the lease call after its first step.

Medians over the repeats, the warm/cold ratio of each, and all samples. Both kinds run in the
same process, minutes apart at most, so their ratio holds even on a loaded machine.

    python benchmarks/speed/warm_start.py                      # both examples, 5 repeats
    python benchmarks/speed/warm_start.py --example cnn --repeats 3
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apportion.executors.local import LocalExecutor  # noqa: E402
from apportion.runtime.testing import FakeLeaseServer  # noqa: E402

EXAMPLES = {
    "cnn": ["examples/train_cnn.py", "--batch-size", "32", "--images", "512"],
    "lm": ["examples/train_lm.py", "--batch-size", "16", "--sequences", "256"],
}
REFUSE_AT = 5


def spare_waiting(executor: LocalExecutor, timeout_s: float = 120.0) -> None:
    """Wait until the executor's spare has done its imports."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        executor.poll()  # starts the spare
        pool = executor._pool
        if any(pool.is_ready(spare) for spare in pool.waiting()):
            return
        time.sleep(0.05)
    raise RuntimeError("the spare did not finish its imports in time")


def one_start(executor: LocalExecutor, example: str, job_id: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="apportion-warm-") as checkpoints:
        with FakeLeaseServer(refuse_at=[REFUSE_AT]) as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
            env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                       PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                       **server.job_env(job_id=str(job_id), total_steps=100, checkpoint_dir=checkpoints))
            started = time.time()
            executor.start(job_id, 1, ["python", *EXAMPLES[example]], env, str(REPO), ("cpu:0",))
            while not (ended := executor.poll()):
                time.sleep(0.01)
            if ended[0].code != 75:
                log = executor.log_path(job_id, 1).read_text(errors="replace")
                raise RuntimeError(f"{example} exited {ended[0].code}:\n{log[-2000:]}")
            calls = server.lease_calls()
    first_step = next(c for c in calls if c["steps_done"] >= 1)
    return {"start_to_first_lease_s": calls[0]["time"] - started, "start_to_first_step_s": first_step["time"] - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", choices=sorted(EXAMPLES), action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="a torch-free job (benchmarks/jobs/timed_job.py), cold and warm once: "
                        "seconds, what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        EXAMPLES["timed"] = ["benchmarks/jobs/timed_job.py", "100"]
        args.example, args.repeats = ["timed"], 1

    results, job_id = {}, 0
    with tempfile.TemporaryDirectory(prefix="apportion-warm-state-") as state:
        cold = LocalExecutor(Path(state) / "cold")
        warm = LocalExecutor(Path(state) / "warm", spares=1)
        for example in args.example or sorted(EXAMPLES):
            samples = {"cold": [], "warm": []}
            for repeat in range(args.repeats):
                for kind in (("cold", "warm") if repeat % 2 == 0 else ("warm", "cold")):
                    executor = cold if kind == "cold" else warm
                    if kind == "warm":
                        spare_waiting(warm)
                    job_id += 1
                    samples[kind].append(one_start(executor, example, job_id))
            keys = samples["cold"][0].keys()
            medians = {kind: {k: round(statistics.median(s[k] for s in samples[kind]), 3) for k in keys}
                       for kind in samples}
            results[example] = {
                **medians,
                "warm_over_cold": {k: round(medians["warm"][k] / medians["cold"][k], 3) for k in keys},
                "samples": {kind: {k: [round(s[k], 3) for s in samples[kind]] for k in keys} for kind in samples},
            }
    print(json.dumps({"benchmark": "warm_start", "cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
                      "repeats": args.repeats, "statistic": "median", "examples": results}, indent=2))


if __name__ == "__main__":
    main()
