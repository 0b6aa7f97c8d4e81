"""Commands that solve LPs and MILPs print nothing of HiGHS's, on stdout or stderr; with
``APPORTION_SOLVER_LOG=1`` its banner and log come on stderr, stdout still the results alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

COMMANDS = {
    "simulate": ("simulate", "-p", "max-min-fairness", "--jobs", "12", "--json"),
    "compare": ("compare", "--policies", "max-min-fairness,finish-time-fairness", "--jobs", "12", "--workers", "2",
                "--json"),
    "goodput-exact": ("simulate", "-p", "goodput", "--goodput-exact", "--shape", "pollux", "--jobs", "6",
                      "--cluster", "t4:4,v100:4", "--json"),
}


def apportion(*args: str, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "apportion", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_highs_output_reaches_the_terminal(command):
    done = apportion(*COMMANDS[command])

    assert json.loads(done.stdout)
    assert "HiGHS" not in done.stdout
    assert "HiGHS" not in done.stderr


def test_the_solver_log_asked_for_goes_to_stderr():
    done = apportion(*COMMANDS["simulate"], APPORTION_SOLVER_LOG="1")

    assert json.loads(done.stdout)["policy"] == "max-min-fairness"
    assert "Running HiGHS" in done.stderr
