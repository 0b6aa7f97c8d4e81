"""The example scripts under a fake lease server: preempted, killed, stale, and resumed.

Each script runs as a real subprocess, as `apportion serve` would start it; the test plays
the executor: it restarts the script with the next attempt number after each exit 75. A run
that was stopped several times must end with the same weights as one that never was.
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from apportion.runtime import PREEMPTED_EXIT_CODE, STALE_EXIT_CODE
from apportion.runtime.testing import FakeLeaseServer

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
CNN = REPO / "examples" / "train_cnn.py"
LM = REPO / "examples" / "train_lm.py"
CNN_STEPS = 120
LM_STEPS = 40


def checkpoint_files(directory) -> list[str]:
    """The checkpoints in ``directory``, their SHA-256 files left out."""
    return sorted(name for name in os.listdir(directory) if name.endswith(".pt"))


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return env


def start(script: Path, args: list[str] = (), env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env={**base_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def checksum(out: str) -> str:
    found = re.search(r"final_checksum=(\S+) .*steps=(\d+)", out)
    assert found, out
    return found.group(1), int(found.group(2))


class Baselines:
    """Uninterrupted standalone runs, started at once so they overlap the tests' runs."""

    def __init__(self) -> None:
        self.processes = {
            "cnn": start(CNN, ["--steps", str(CNN_STEPS)]),
            "lm": start(LM, ["--steps", str(LM_STEPS)]),
        }
        self.results: dict[str, tuple[str, int]] = {}

    def __getitem__(self, name: str) -> tuple[str, int]:
        if name not in self.results:
            code, out, err = finish(self.processes[name])
            assert code == 0, err
            self.results[name] = checksum(out)
        return self.results[name]


@pytest.fixture(scope="module")
def baseline():
    baselines = Baselines()
    yield baselines
    for process in baselines.processes.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


def run_until_done(server: FakeLeaseServer, script: Path, steps: int, directory: Path, job_id: str,
                   running: dict[str, subprocess.Popen] | None = None):
    """Start attempts 1, 2, ... until one does not exit 75; each attempt's (code, out, err); ``running``,
    if given, holds the attempt running now (under "p")."""
    attempts = []
    while len(attempts) < 10:
        env = server.job_env(job_id=job_id, attempt=len(attempts) + 1, total_steps=steps, checkpoint_dir=str(directory))
        # periodic checkpoints come by the clock (apportion.runtime.cadence): off, so that the files
        # left are the preemptions' whatever the machine's speed
        env["APPORTION_CHECKPOINT_EVERY"] = "off"
        process = start(script, env=env)
        if running is not None:
            running["p"] = process
        attempts.append(finish(process))
        if attempts[-1][0] != PREEMPTED_EXIT_CODE:
            break
    return attempts


def refusals(server: FakeLeaseServer) -> list[tuple[int, int]]:
    return [(c["attempt"], c["steps_done"]) for c in server.lease_calls() if c["answer"] == {"renew": False}]


def test_cnn_stopped_by_sigterm_then_refused_twice_ends_with_the_weights_of_an_uninterrupted_run(tmp_path, baseline):
    """Three stops: SIGTERM mid-run (the executor's stop signal: it checkpoints at the next step boundary and exits
    75), then the lease refused mid-run and once more right after a resume."""
    running: dict[str, subprocess.Popen] = {}

    def sigterm_at_30(body):  # sent while attempt 1 is mid-run; its lease is renewed: the signal alone stops it
        if body["attempt"] == 1 and body["steps_done"] == 30:
            os.kill(running["p"].pid, signal.SIGTERM)
        return None

    with FakeLeaseServer(refuse_at=[60, 61], on_lease=sigterm_at_30) as server:
        attempts = run_until_done(server, CNN, CNN_STEPS, tmp_path, "cnn", running)
        progress = server.progress_calls()
    codes = [code for code, _, _ in attempts]
    assert codes == [75, 75, 75, 0], attempts[-1][2]
    assert "(signal SIGTERM)" in attempts[0][2]
    stopped = re.search(r"attempt 2: resumed from step-(\d+)\.pt", attempts[1][2])
    assert stopped and int(stopped.group(1)) in (30, 31), attempts[1][2]  # the next step boundary
    assert refusals(server) == [(2, 60), (3, 61)]
    for attempt, step in [(2, int(stopped.group(1))), (3, 60), (4, 61)]:
        resumed = f"attempt {attempt}: resumed from step-{step:08d}.pt at step {step}/{CNN_STEPS} (loaded in"
        assert resumed in attempts[attempt - 1][2]
    assert checksum(attempts[-1][1]) == baseline["cnn"]
    assert checkpoint_files(tmp_path) == ["step-00000060.pt", "step-00000061.pt"]  # the newest 2
    assert (progress[-1]["attempt"], progress[-1]["steps_done"]) == (4, CNN_STEPS)
    assert progress[-1]["steps_per_s"] > 0


def test_lm_with_dropout_resumes_exactly(tmp_path, baseline):
    with FakeLeaseServer(refuse_at=[17]) as server:
        attempts = run_until_done(server, LM, LM_STEPS, tmp_path, "lm")
    assert [code for code, _, _ in attempts] == [75, 0], attempts[-1][2]
    assert checksum(attempts[-1][1]) == baseline["lm"]


def test_a_stale_attempt_exits_at_once_without_writing(tmp_path):
    def move_on(body):  # after 30 steps the server has started attempt 2 elsewhere
        if body["steps_done"] >= 30:
            server.current_attempt = 2

    with FakeLeaseServer(current_attempt=1, on_lease=move_on) as server:
        env = server.job_env(job_id="cnn", attempt=1, total_steps=CNN_STEPS, checkpoint_dir=str(tmp_path))
        code, out, err = finish(start(CNN, env=env))
        calls = server.lease_calls()
    assert code == STALE_EXIT_CODE, err
    assert "is stale" in err and "final_checksum" not in out
    assert calls[-1]["status"] == 409 and calls[-1]["steps_done"] == 31
    assert os.listdir(tmp_path) == []
