"""The chaos benchmark in its reduced form: 4 example jobs (half the benchmark's steps) on the real
server, 4 random kill -9s of the server, the training processes and the wrappers (no clean pass;
crashed jobs retried at once, not after the server's back-off). Nothing may be lost: every job
completes, no restart starts below the newest checkpoint, and every job ends with the weights
of an uninterrupted run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the chaos benchmark runs the PyTorch examples")

REPO = Path(__file__).resolve().parents[2]


def test_random_kills_of_server_jobs_and_wrappers_lose_nothing():
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "faults" / "chaos.py"), "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["clean_pass_ok"] is None and result["time_lost_fraction"] is None  # no clean pass: kills only
    assert result["kills"] >= 1, result
    assert result["jobs_lost"] == 0, result
    assert result["steps_redone"] == 0, result
    assert result["weights_identical"], result
