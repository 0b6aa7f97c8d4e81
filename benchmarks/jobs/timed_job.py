"""A torch-free job for benchmarks/speed/ray_executor.py: apportion.runtime's loop, with wall-clock times.

Each step sleeps ``STEP_S`` (default 0.02 s). It prints ``TIME first_step attempt=N step=S``
after the first step of each attempt, and every line the runtime logs is prefixed with the
Unix time it was written (the lease refusal, the checkpoint, the end). argv[1]: total steps.
"""

import os
import sys
import time

from apportion.runtime import Job

STEP_S = float(os.environ.get("STEP_S", "0.02"))


def log(message: str) -> None:
    print(f"{time.time():.6f} [apportion] {message}", file=sys.stderr, flush=True)


def main() -> None:
    job = Job.from_env(total_steps=int(sys.argv[1]) if len(sys.argv) > 1 else 100, log=log)
    state = job.restore({"value": 0})
    first = True
    for step in job.steps(lambda: dict(state)):
        time.sleep(STEP_S)
        state["value"] += step
        if first:
            print(f"{time.time():.6f} first_step attempt={job.attempt} step={step + 1}", flush=True)
            first = False


if __name__ == "__main__":
    main()
