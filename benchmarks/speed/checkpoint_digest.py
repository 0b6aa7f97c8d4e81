"""What a checkpoint's SHA-256 costs: the background write (hashed while writing), the restore
(one more read before loading) and the server's check at an attempt's end.

Writes a state of SIZE_MIB of float32 tensors REPEATS times with the digest (``Checkpointer``)
and without it (``torch.save`` to a temporary file and ``os.replace``, what the write did
before), no fsync, in a temporary directory, and prints one JSON object with the medians in
seconds and the digest's rate in GB/s.

    python benchmarks/speed/checkpoint_digest.py [--size-mib 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from apportion.runtime import Checkpointer
from apportion.runtime.checkpoint import newest_intact


def plain_write(directory: Path, state: dict, step: int) -> float:
    start = time.perf_counter()
    temp = directory / f".plain-{step}"
    with open(temp, "wb") as f:
        torch.save({"step": step, "state": state}, f)
    os.replace(temp, directory / f"plain-{step:08d}.bin")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="a small state, twice: seconds, what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.size_mib, args.repeats = 4, 2
    state = {"w": torch.randn(args.size_mib * 1024 * 1024 // 4)}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        checkpointer = Checkpointer(directory, keep=1, fsync=False)
        hashed, plain, check, restore = [], [], [], []
        for step in range(1, args.repeats + 1):
            checkpointer.save(state, step)
            hashed.append(checkpointer.last_write_s)
            plain.append(plain_write(directory, state, step))
            (directory / f"plain-{step:08d}.bin").unlink()
            start = time.perf_counter()
            assert newest_intact(directory).step == step
            check.append(time.perf_counter() - start)
            start = time.perf_counter()
            Checkpointer(directory, keep=1).load_latest()
            restore.append(time.perf_counter() - start)
    size_gb = args.size_mib * 2**20 / 1e9
    print(json.dumps({
        "size_mib": args.size_mib, "repeats": args.repeats,
        "write_s_with_digest": statistics.median(hashed), "write_s_without": statistics.median(plain),
        "server_check_s": statistics.median(check), "server_check_gb_per_s": size_gb / statistics.median(check),
        "restore_s_with_digest_check": statistics.median(restore),
    }, indent=1))


if __name__ == "__main__":
    main()
