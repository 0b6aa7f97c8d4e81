"""Submit a job from Python, follow its output, and say how it ended (docs/serve.md, "Python client").

With a server running (`apportion serve --slots cpu:2`, or APPORTION_SERVER pointing at one):

    python examples/submit_and_wait.py --steps 200

It submits the small CNN of examples/train_cnn.py as a dict of job-file fields, prints its
output as it trains (across preemptions), and exits 0 if the job completed, 1 if not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from apportion import Client, ClientError

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps the job trains for")
    parser.add_argument("--server", default=None, help="the server's URL (default: $APPORTION_SERVER, else local)")
    args = parser.parse_args()

    job = {
        "name": "cnn-from-python",
        "command": [sys.executable, str(HERE / "train_cnn.py"), "--seed", "0"],
        "total_steps": args.steps,
        "gpus": 1,
        "env": {"PYTHONUNBUFFERED": "1"},
    }
    try:
        with Client(args.server) as server:
            submitted = server.submit(job)
            print(f"submitted job {submitted['id']} as {submitted['user']}")
            for chunk in server.logs(submitted["id"], follow=True):
                print(chunk, end="")
            ended = server.wait(submitted["id"])
    except ClientError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"job {ended['id']} {ended['status']} after {ended['steps_done']}/{ended['total_steps']} steps")
    return 0 if ended["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
