"""A job of two processes (DDP over gloo, CPU) preempted twice ends with the weights of an
uninterrupted run, bit for bit, though each rank draws its data from random state of its own:
rank 0's checkpoint holds every rank's random generators and data order, and each rank resumes
with its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="a torch.distributed job")

from test_group import free_port  # noqa: E402

JOB = Path(__file__).resolve().parent / "ddp_random_job.py"
STEPS = 60


def start_pair(directory: Path, name: str, checkpoints: Path) -> list[tuple[subprocess.Popen, Path]]:
    """Both ranks of ddp_random_job.py, as the Ray executor starts them (torchrun's variables), output in files."""
    port = free_port()
    pair = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), APPORTION_CHECKPOINT_DIR=str(checkpoints), APPORTION_CHECKPOINT_EVERY="0.1",
                   STEP_S="0.02", OMP_NUM_THREADS="1")
        out = directory / f"{name}-rank{rank}.out"
        with open(out, "wb") as handle:
            pair.append((subprocess.Popen([sys.executable, str(JOB), str(STEPS)], env=env, stdout=handle,
                                          stderr=subprocess.STDOUT), out))
    return pair


def finish(pair, stop_after_s: float | None = None) -> tuple[list[int], str]:
    """SIGTERM to both ranks ``stop_after_s`` after they start stepping (None: let them end); (exit codes, output)."""
    if stop_after_s is not None:
        deadline = time.time() + 60
        while "rank 1 of 2" not in pair[1][1].read_text() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(stop_after_s)
        for process, _ in pair:
            process.send_signal(signal.SIGTERM)
    codes = [process.wait(timeout=120) for process, _ in pair]
    return codes, pair[0][1].read_text() + pair[1][1].read_text()


def test_a_ddp_job_preempted_twice_ends_with_the_weights_of_an_uninterrupted_run(tmp_path):
    whole_run = start_pair(tmp_path, "whole", tmp_path / "whole")  # beside the first attempt
    stops = []
    for attempt in (1, 2):
        codes, said = finish(start_pair(tmp_path, f"attempt{attempt}", tmp_path / "stopped"), stop_after_s=0.4)
        assert codes == [75, 75], said
        stops.append(int(re.search(r"preempted at step (\d+)", said).group(1)))
        if attempt == 2:
            assert "rank 1: its own random generators restored" in said
    codes, said = finish(start_pair(tmp_path, "attempt3", tmp_path / "stopped"))
    assert codes == [0, 0], said
    whole_codes, whole = finish(whole_run)
    assert whole_codes == [0, 0], whole
    expected = re.findall(r"final_weights=.*", whole)
    assert len(expected) == 1, whole
    assert 0 < stops[0] < stops[1] < STEPS, stops
    assert re.findall(r"final_weights=.*", said) == expected
