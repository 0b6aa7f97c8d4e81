"""A job given as a shell line runs under ``/bin/sh -c``: SIGTERM to its process group kills the
shell at once, while the training process it started is still checkpointing. The attempt must
still end with that checkpoint written and exit 75, and the next attempt resume at that step."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path

from apportion.executors.local import LocalExecutor
from apportion.executors.local.procfs import process_start
from apportion.runtime import Checkpointer

JOB = Path(__file__).resolve().parent / "runtime_job.py"
REPO = Path(__file__).resolve().parents[2]


def env(**extra) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    pythonpath = os.pathsep.join(p for p in (str(REPO), clean.get("PYTHONPATH", "")) if p)
    return {**clean, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath, **extra}


def shell_line(*args: object) -> str:
    return " ".join(shlex.quote(str(a)) for a in (sys.executable, JOB, *args))


def wait_until(predicate, timeout: float = 30.0, what: str = "a condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def steps_logged(executor: LocalExecutor, job: int, attempt: int) -> int:
    found = re.findall(r"^step (\d+)$", executor.log_path(job, attempt).read_text(), re.MULTILINE)
    return int(found[-1]) if found else 0


def run_to_exit(executor: LocalExecutor):
    return wait_until(executor.poll, what="the attempt to end")[0]


def test_a_shell_line_job_sigtermed_mid_run_checkpoints_and_resumes_at_that_exact_step(tmp_path):
    executor = LocalExecutor(tmp_path / "state")
    checkpoints = tmp_path / "ckpt"
    command = shell_line(300, checkpoints)
    assert isinstance(command, str)  # run under /bin/sh -c

    executor.start(1, 1, command, env(), str(tmp_path), ("cpu:0",))
    wait_until(lambda: steps_logged(executor, 1, 1) >= 40, what="40 steps")
    assert executor.terminate(1)  # SIGTERM to the whole group: the shell and the job
    first = run_to_exit(executor)
    log = executor.log_path(1, 1).read_text()
    assert first.code == 75, log  # the job's own exit code, not the shell's death by SIGTERM
    stopped = int(re.search(r"preempted at step (\d+)/300", log).group(1))
    assert stopped >= 40 and Checkpointer(checkpoints).checkpoints()[-1][0] == stopped

    executor.start(1, 2, command, env(), str(tmp_path), ("cpu:0",))
    second = run_to_exit(executor)
    log = executor.log_path(1, 2).read_text()
    assert second.code == 0, log
    assert f"resumed from step-{stopped:08d}.pt at step {stopped}/300" in log
    assert f"step {stopped}\n" not in log and f"step {stopped + 1}\n" in log  # not one step done twice

    whole = LocalExecutor(tmp_path / "uninterrupted")
    whole.start(2, 1, shell_line(300, tmp_path / "ckpt-whole"), env(STEP_S="0"), str(tmp_path), ())
    assert run_to_exit(whole).code == 0
    final = re.compile(r"final_checksum=\S+ steps=300")
    assert final.search(log).group(0) == final.search(whole.log_path(2, 1).read_text()).group(0)


def test_a_killed_wrapper_leaves_its_job_running_under_the_executor_which_still_stops_it(tmp_path):
    executor = LocalExecutor(tmp_path / "state")
    checkpoints = tmp_path / "ckpt"
    attempt = executor.start(1, 1, shell_line(3000, checkpoints), env(), str(tmp_path), ())
    wait_until(lambda: steps_logged(executor, 1, 1) >= 3, what="3 steps")
    os.kill(attempt.pid, 9)
    wait_until(lambda: process_start(attempt.pid) is None, what="the wrapper to die")
    assert executor.poll() == []  # not ended: its job runs on
    reached = steps_logged(executor, 1, 1)
    wait_until(lambda: steps_logged(executor, 1, 1) >= reached + 20, what="20 more steps")
    assert executor.is_alive(1)

    assert executor.terminate(1)  # SIGTERM still reaches the shell and the job
    ended = run_to_exit(executor)
    log = executor.log_path(1, 1).read_text()
    assert ended.code == 75, log  # the training process's own code, after its checkpoint
    stopped = int(re.search(r"preempted at step (\d+)/3000", log).group(1))
    assert Checkpointer(checkpoints).checkpoints()[-1][0] == stopped
    assert executor.exit_record(1, 1) == 75  # recorded for a server started later
    assert _group(attempt.pid) == []


def test_a_killed_wrapper_of_an_adopted_attempt_takes_its_job_with_it(tmp_path):
    """A server started later is no ancestor of the job: it cannot reap it, so it ends it."""
    starter = LocalExecutor(tmp_path / "state")
    attempt = starter.start(1, 1, shell_line(3000, tmp_path / "ckpt"), env(), str(tmp_path), ())
    wait_until(lambda: steps_logged(starter, 1, 1) >= 3, what="3 steps")
    later = LocalExecutor(tmp_path / "state")
    (found,) = later.scan()
    assert later.adopt(found)
    job_processes = [pid for pid in _group(attempt.pid) if pid != attempt.pid]
    assert job_processes  # the shell and the training process
    os.kill(attempt.pid, 9)
    ended = wait_until(later.poll, what="the attempt to end")[0]
    assert ended.code is None  # no exit record: a crash
    wait_until(lambda: all(process_start(pid) is None for pid in job_processes), 10,
               "the shell and the training process to be killed")  # nothing of it runs on
    starter.poll()  # reap


def _group(pgid: int) -> list[int]:
    from apportion.executors.local.procfs import group_members

    return group_members(pgid)
