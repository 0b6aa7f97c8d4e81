"""A job of two processes (DDP over gloo) stops as one: SIGTERM to one rank stops both at the
same step, rank 0 alone writes the checkpoint, and both ranks resume from it.

(That a pair of ranks ends with the same weights wherever it runs is tests/serve/test_serve_on_ray.py's.)"""

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

DDP_JOB = Path(__file__).resolve().parents[1] / "serve" / "ddp_job.py"
STEPS = 80


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_pair(directory: Path, name: str, checkpoints: Path) -> list[tuple[subprocess.Popen, Path]]:
    """Two ranks of ddp_job.py, as the Ray executor starts them (torchrun's variables), output in files."""
    port = free_port()
    pair = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), APPORTION_CHECKPOINT_DIR=str(checkpoints),
                   APPORTION_CHECKPOINT_EVERY="off", STEP_S="0.02", OMP_NUM_THREADS="1")
        out = directory / f"{name}-rank{rank}.out"
        with open(out, "wb") as handle:
            process = subprocess.Popen([sys.executable, str(DDP_JOB), str(STEPS)], env=env, stdout=handle,
                                       stderr=subprocess.STDOUT)
        pair.append((process, out))
    return pair


def wait(pair, timeout: float = 120) -> list[int]:
    return [process.wait(timeout=timeout) for process, _ in pair]


def test_sigterm_to_one_rank_stops_both_at_one_step_and_both_resume_from_rank_0s_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    stopped = start_pair(tmp_path, "stopped", checkpoints)
    deadline = time.time() + 60
    while "follows rank 0" not in stopped[1][1].read_text() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # a few steps in
    stopped[1][0].send_signal(signal.SIGTERM)  # rank 1 only

    assert wait(stopped) == [75, 75]
    at = [re.search(r"preempted at step (\d+)/", out.read_text()) for _, out in stopped]
    assert at[0] and at[1] and at[0].group(1) == at[1].group(1), [out.read_text() for _, out in stopped]
    step = int(at[0].group(1))
    assert 0 < step < STEPS
    assert sorted(p.name for p in checkpoints.glob("*.pt")) == [f"step-{step:08d}.pt"]  # rank 0's, once
    assert "rank 0 writes the checkpoint" in stopped[1][1].read_text()

    resumed = start_pair(tmp_path, "resumed", checkpoints)
    assert wait(resumed) == [0, 0]
    for _, out in resumed:
        assert f"resumed from step-{step:08d}.pt at step {step}/{STEPS}" in out.read_text()
    assert f"steps={STEPS} world=2" in resumed[0][1].read_text()
