"""A torch-free job for benchmarks/compare/data_stalls_local.py: each step waits for its batch, then trains.

Making a batch costs ``LOADER_CPU_MS`` of CPU time (a decoder-bound data loader: a busy loop until
this thread has used that much CPU, however slowly its cores' share lets it), then the step itself
takes ``STEP_MS`` of wall time on the accelerator (a sleep: no CPU). With ``LOADER_CPU_MS=0`` its
batches cost nothing and its speed does not depend on its cores. argv[1]: total steps.
"""

import os
import sys
import time

from apportion.runtime import Job

LOADER_CPU_S = float(os.environ.get("LOADER_CPU_MS", "20")) / 1000
STEP_S = float(os.environ.get("STEP_MS", "10")) / 1000


def make_batch() -> None:
    until = time.thread_time() + LOADER_CPU_S
    while time.thread_time() < until:
        pass


def main() -> None:
    job = Job.from_env(total_steps=int(sys.argv[1]) if len(sys.argv) > 1 else 10**6, report_every_s=0.5)
    state = job.restore({"steps": 0})
    for _ in job.steps(lambda: dict(state)):
        make_batch()
        time.sleep(STEP_S)
        state["steps"] += 1


if __name__ == "__main__":
    main()
