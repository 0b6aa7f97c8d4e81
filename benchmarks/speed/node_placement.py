"""Print what counting cores and memory costs the server's round: the same jobs and slots, with no
job asking for them and with half the jobs asking, as JSON lines and the ratio of their medians.

The slots are 1,000 over four types on a node of 2,000 cores and 8 TiB (2 cores and 8 GiB a
slot); every other job asks for 2–8 cores and 4–32 GiB, more than the node has for all of them,
so that some wait for room. The round is the real scheduler's (``serve_overhead.run``: fake
executor, fake clock, las as served).

    python benchmarks/speed/node_placement.py                  # 10,000 jobs
    python benchmarks/speed/node_placement.py --jobs 1000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from serve_overhead import run  # noqa: E402

from apportion.serve.base.slots import Node  # noqa: E402

SLOTS = "k80:250,p100:250,v100:250,a100:250"
NODE = Node(tuple(range(2000)), 8192.0)


def asking(i: int) -> dict:
    """Every other job asks for cores and memory (2 to 8 cores, 4 to 32 GiB); the others nothing."""
    if i % 2:
        return {}
    return {"cpus": 2 + (i // 2) % 7, "memory_gb": 4.0 * (1 + (i // 2) % 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="200 jobs on 40 slots, 2 rounds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        global SLOTS, NODE
        args.jobs, args.rounds = 200, 2
        SLOTS, NODE = "k80:10,p100:10,v100:10,a100:10", Node(tuple(range(80)), 320.0)
    plain = run("las", args.jobs, SLOTS, args.rounds, 180.0, as_served=True, node=NODE)
    asked = run("las", args.jobs, SLOTS, args.rounds, 180.0, as_served=True, node=NODE, asks=asking)
    for name, result in (("none ask", plain), ("half ask", asked)):
        print(json.dumps({"jobs": name, **result}), flush=True)
    print(json.dumps({"round median ratio, half ask / none ask":
                      round(asked["round_ms"]["median"] / plain["round_ms"]["median"], 2)}))


if __name__ == "__main__":
    main()
