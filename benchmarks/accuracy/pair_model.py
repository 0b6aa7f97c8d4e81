"""Check the conservative space-sharing pair model against Gavel's measured pairs.

    python benchmarks/accuracy/pair_model.py

For each measured GPU type, the model predicts its pairs from the other measured types alone
(leave one GPU out) and prints, per held-out type: how many pairs it compared, in what
fraction both jobs' predicted speeds are at or below the measured ones, how many pairs it
predicts to beat time-slicing (combined normalised throughput > 1), and what was measured for
those (the fraction at or above 1 and the median).
"""

from __future__ import annotations

import argparse
import json

from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.pair_model import leave_one_out

MEASURED = ("k80", "p100", "v100")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the same figures (they take a second): the test suite runs it")
    parser.parse_args()
    for row in leave_one_out(builtin_throughputs(), MEASURED):
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))


if __name__ == "__main__":
    main()
