"""A job of two processes (DDP over gloo, CPU) stops as one and resumes bit for bit.

SIGTERM to one rank stops both at the same step, rank 0 alone writes the checkpoint, and both
ranks resume from it. Preempted twice, the job ends with the weights of an uninterrupted run,
though each rank draws its data from random state of its own: rank 0's checkpoint holds every
rank's random generators and data order, and each rank resumes with its own.

(One scenario checks both, so that its torch processes start once; that a pair of ranks ends
with the same weights wherever it runs is tests/serve/test_serve_on_ray.py's.)"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="a torch.distributed job")

JOB = Path(__file__).resolve().parent / "ddp_random_job.py"
STEPS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_pair(directory: Path, name: str, checkpoints: Path,
               every: str = "0.1") -> list[tuple[subprocess.Popen, Path]]:
    """Both ranks of ddp_random_job.py, as the Ray executor starts them (torchrun's variables), output in
    files; ``every``: APPORTION_CHECKPOINT_EVERY ("off": only the checkpoint of a stop)."""
    port = free_port()
    pair = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), APPORTION_CHECKPOINT_DIR=str(checkpoints), APPORTION_CHECKPOINT_EVERY=every,
                   STEP_S="0.02", OMP_NUM_THREADS="1")
        out = directory / f"{name}-rank{rank}.out"
        with open(out, "wb") as handle:
            pair.append((subprocess.Popen([sys.executable, str(JOB), str(STEPS)], env=env, stdout=handle,
                                          stderr=subprocess.STDOUT), out))
    return pair


def finish(pair, stop_after_s: float | None = None, ranks=(0, 1)) -> tuple[list[int], str]:
    """SIGTERM to ``ranks`` ``stop_after_s`` after they start stepping (None: let them end); (exit codes, output)."""
    if stop_after_s is not None:
        deadline = time.time() + 60
        while "rank 1 of 2: follows rank 0" not in pair[1][1].read_text() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(stop_after_s)
        for rank in ranks:
            pair[rank][0].send_signal(signal.SIGTERM)
    codes = [process.wait(timeout=120) for process, _ in pair]
    return codes, pair[0][1].read_text() + pair[1][1].read_text()


def test_sigterm_to_one_rank_stops_both_and_a_job_preempted_twice_ends_with_the_weights_of_an_uninterrupted_run(
        tmp_path):
    whole_run = start_pair(tmp_path, "whole", tmp_path / "whole")  # beside the first attempt
    checkpoints = tmp_path / "stopped"

    # attempt 1: SIGTERM to rank 1 only, no periodic checkpoints: both stop at one step, rank 0 writes it once
    first = start_pair(tmp_path, "attempt1", checkpoints, every="off")
    codes, said = finish(first, stop_after_s=0.4, ranks=(1,))
    assert codes == [75, 75], said
    at = [re.search(r"preempted at step (\d+)/", out.read_text()) for _, out in first]
    assert at[0] and at[1] and at[0].group(1) == at[1].group(1), said
    stops = [int(at[0].group(1))]
    assert sorted(p.name for p in checkpoints.glob("*.pt")) == [f"step-{stops[0]:08d}.pt"]  # rank 0's, once
    assert "rank 0 writes the checkpoint" in first[1][1].read_text()

    # attempt 2: both ranks resume from rank 0's checkpoint, each with its own random state; SIGTERM to both
    second = start_pair(tmp_path, "attempt2", checkpoints)
    codes, said = finish(second, stop_after_s=0.4)
    assert codes == [75, 75], said
    for _, out in second:
        assert f"resumed from step-{stops[0]:08d}.pt at step {stops[0]}/{STEPS}" in out.read_text()
    assert "rank 1: its own random generators restored" in said
    stops.append(int(re.search(r"preempted at step (\d+)", said).group(1)))

    codes, said = finish(start_pair(tmp_path, "attempt3", checkpoints))
    assert codes == [0, 0], said
    whole_codes, whole = finish(whole_run)
    assert whole_codes == [0, 0], whole
    expected = re.findall(r"final_weights=.*", whole)
    assert len(expected) == 1 and f"steps={STEPS}" in expected[0], whole
    assert 0 < stops[0] < stops[1] < STEPS, stops
    assert re.findall(r"final_weights=.*", said) == expected
