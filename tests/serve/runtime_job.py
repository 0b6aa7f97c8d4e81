"""A torch-free training job built on apportion.runtime, for the executor and server tests.

Its state is a step count and a running checksum of the steps; each step sleeps ``STEP_S``
(environment, default 0.02 s). It restores the newest checkpoint unless ``NO_RESTORE=1``
(a script that forgot to), and prints ``final_checksum=...`` at the end. Standalone it takes
its total steps from argv[1] and checkpoints to argv[2].
"""

import os
import sys
import time

from apportion.runtime import Job

STEP_S = float(os.environ.get("STEP_S", "0.02"))


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    directory = sys.argv[2] if len(sys.argv) > 2 else None
    job = Job.from_env(total_steps=total, checkpoint_dir=directory)
    state = {"value": 1}
    if os.environ.get("NO_RESTORE") != "1":
        state = job.restore(state)
    for step in job.steps(lambda: dict(state)):
        time.sleep(STEP_S)
        state["value"] = (state["value"] * 31 + step + 1) % 1_000_003
        print(f"step {step + 1}", flush=True)
    print(f"final_checksum={state['value']} steps={job.step}", flush=True)


if __name__ == "__main__":
    main()
