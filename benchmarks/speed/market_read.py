"""Time reading AWS's spot price history (docs/cloud.md): files of --sizes records in the CLI's own
format (``aws ec2 describe-spot-price-history --output json``: 4-space indent, newest first), over the
catalogue's AWS instance types in 12 zones. Prints one JSON line per size: records, MB, seconds to
``read_market`` and to ``json.loads`` alone. With ``--baseline TREE`` (another checkout of apportion,
e.g. /work/main) also the time that tree's reader takes on the first size, in a subprocess with
PYTHONPATH=TREE, as a baseline in the same run.

    python benchmarks/speed/market_read.py [--sizes 17000,1000000] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apportion.workloads.instance_catalog import INSTANCES

ZONES = [f"{region}{z}" for region in ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1") for z in "abc"]
TYPES = tuple(i.name for i in INSTANCES if i.cloud == "aws")


def write_history(path: Path, records: int) -> None:
    """``records`` spot prices over a month, spread evenly over the (type, zone) pairs, newest first."""
    pairs = [(t, z) for t in TYPES for z in ZONES]
    start, month = 1_704_067_200, 30 * 86400  # from 2024-01-01T00:00:00Z
    with path.open("w") as out:
        out.write('{\n    "SpotPriceHistory": [\n')
        for i in range(records):
            name, zone = pairs[i % len(pairs)]
            when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start + (records - i) * month // records))
            out.write(('' if i == 0 else ',\n') + '        {\n'
                      f'            "AvailabilityZone": "{zone}",\n'
                      f'            "InstanceType": "{name}",\n'
                      '            "ProductDescription": "Linux/UNIX",\n'
                      f'            "SpotPrice": "{0.3 + (i % 97) / 100:.6f}",\n'
                      f'            "Timestamp": "{when}"\n'
                      '        }')
        out.write('\n    ]\n}\n')


TIMED = ("import sys, time; from apportion.workloads.market_files import read_market; t = time.perf_counter(); "
         "m = read_market(sys.argv[1]); print(time.perf_counter() - t, len(m))")


def timed_read(path: Path, tree: str | None = None) -> tuple[float, int]:
    """Seconds ``read_market`` takes on ``path`` (and the market's types), in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ)
    done = subprocess.run([sys.executable, "-c", TIMED, str(path)], env=env, capture_output=True, text=True,
                          check=True, cwd=path.parent)  # not this tree's cwd, which -c would put first
    seconds, types = done.stdout.split()
    return float(seconds), int(types)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="17000,1000000")
    parser.add_argument("--baseline", default=None, help="another apportion tree to time on the first size")
    parser.add_argument("--quick", action="store_true", help="one small file: seconds, what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.sizes = "2000"
    sizes = [int(s) for s in args.sizes.split(",")]
    here = str(Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory() as tmp:
        for i, size in enumerate(sizes):
            path = Path(tmp) / f"spot-{size}.json"
            write_history(path, size)
            started = time.perf_counter()
            json.loads(path.read_text())
            loads_s = time.perf_counter() - started
            seconds, types = timed_read(path, here)
            row = {"records": size, "mb": round(path.stat().st_size / 1e6, 1), "read_s": round(seconds, 3),
                   "json_loads_s": round(loads_s, 3), "types": types}
            if args.baseline and i == 0:
                row["baseline_read_s"] = round(timed_read(path, args.baseline)[0], 3)
                row["baseline"] = args.baseline
            print(json.dumps(row), flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
