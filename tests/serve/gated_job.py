"""A torch-free job for the elastic serve tests: it steps (``STEP_S`` each, default 0.05 s)
until the file named by argv[1] exists, then exits 0, so that a test decides when it ends."""

import os
import sys
import time

from apportion.runtime import Job


def main() -> None:
    gate = sys.argv[1]
    job = Job.from_env(total_steps=1_000_000)
    job.restore()
    for _ in job.steps(lambda: {}):
        time.sleep(float(os.environ.get("STEP_S", "0.05")))
        if os.path.exists(gate):
            print(f"gate open at step {job.step}", flush=True)
            return


if __name__ == "__main__":
    main()
