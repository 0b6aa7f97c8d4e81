"""LocalExecutor with real (tiny, torch-free) processes: process groups, logs, exit codes,
SIGTERM/SIGKILL of the whole group, and finding attempts again after a server restart."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from apportion.executors.local import LocalExecutor
from apportion.executors.local import executor as local_executor
from apportion.executors.local.procfs import process_start
from serve_helpers import wait_exits


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def env(**extra):
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def test_an_attempt_runs_in_its_own_group_with_its_env_and_log(tmp_path):
    executor = LocalExecutor(tmp_path)
    code = "import os; print('slots', os.environ['APPORTION_SLOTS'], 'cvd', repr(os.environ['CUDA_VISIBLE_DEVICES'])); raise SystemExit(75)"
    attempt = executor.start(7, 1, py(code), env(APPORTION_SLOTS="cpu:1", CUDA_VISIBLE_DEVICES=""),
                             str(tmp_path), ("cpu:1",))
    assert os.getpgid(attempt.pid) == attempt.pid != os.getpgid(0)  # a new process group, led by the wrapper
    (ended,) = wait_exits(executor)
    assert (ended.job_id, ended.attempt, ended.code) == (7, 1, 75)
    log = executor.log_path(7, 1).read_text()
    assert "slots cpu:1 cvd ''" in log
    assert executor.exit_record(7, 1) == 75


def test_a_shell_command_and_its_workdir(tmp_path):
    executor = LocalExecutor(tmp_path / "state")
    (tmp_path / "work").mkdir()
    executor.start(1, 1, "pwd && echo to-stderr >&2 && exit 3", env(), str(tmp_path / "work"), ("cpu:0",))
    (ended,) = wait_exits(executor)
    assert ended.code == 3
    assert executor.tail(1, 1).splitlines() == [str(tmp_path / "work"), "to-stderr"]


def test_a_command_that_cannot_start_is_a_crash_with_a_message(tmp_path):
    executor = LocalExecutor(tmp_path)
    executor.start(1, 1, ["/no/such/program"], env(), str(tmp_path), ())
    (ended,) = wait_exits(executor)
    assert ended.code == 127
    assert "cannot start /no/such/program" in executor.tail(1, 1)


def test_a_python_script_that_is_not_there_cannot_start_either(tmp_path):
    executor = LocalExecutor(tmp_path / "state")
    (tmp_path / "work").mkdir()
    executor.start(1, 1, f"{sys.executable} trian.py --lr 0.1", env(), str(tmp_path / "work"), ("cpu:0",))
    (ended,) = wait_exits(executor)
    assert ended.code == 127
    assert executor.tail(1, 1).splitlines()[-1] == "apportion: cannot start: no such file trian.py"


def test_sigterm_reaches_the_whole_group_and_sigkill_ends_what_ignores_it(tmp_path):
    executor = LocalExecutor(tmp_path)
    marker = tmp_path / "grandchild.pid"
    code = (
        "import signal, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    attempt = executor.start(3, 1, py(code), env(), str(tmp_path), ())
    deadline = time.time() + 10
    while "ready" not in executor.log_path(3, 1).read_text() and time.time() < deadline:
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    assert executor.terminate(3)
    time.sleep(0.5)
    assert process_start(grandchild) is None  # the sleeping grandchild died of SIGTERM
    assert executor.is_alive(3)  # the job itself ignores it
    assert executor.kill(3)
    (ended,) = wait_exits(executor)
    # killed with its wrapper, which had no time to record it: -9 when the executor reaped the
    # job itself (its wrapper died first), None when the wrapper had reaped it
    assert ended.code in (-9, None)
    assert process_start(attempt.pid) is None


def test_stray_processes_of_a_finished_attempt_are_cleaned_up(tmp_path):
    executor = LocalExecutor(tmp_path)
    marker = tmp_path / "orphan.pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
    )
    executor.start(4, 1, py(code), env(), str(tmp_path), ())
    (ended,) = wait_exits(executor)
    assert ended.code == 0
    time.sleep(0.2)
    assert process_start(int(marker.read_text())) is None


def test_a_new_executor_finds_and_adopts_running_attempts_and_reads_exits_it_missed(tmp_path):
    first = LocalExecutor(tmp_path)
    first.start(5, 2, py("import time; time.sleep(1.5); raise SystemExit(75)"), env(), str(tmp_path), ("cpu:0", "cpu:1"))
    first.start(6, 1, py("import time; time.sleep(60)"), env(), str(tmp_path), ("cpu:2",))

    second = LocalExecutor(tmp_path)  # as a restarted server would
    found = {a.job_id: a for a in second.scan()}
    assert set(found) == {5, 6}
    assert found[5].attempt == 2 and found[5].slots == ("cpu:0", "cpu:1")
    assert all(second.adopt(a) for a in found.values())
    assert LocalExecutor(tmp_path / "elsewhere").scan() == []  # another state dir's attempts are not ours

    ended = wait_exits(second)
    assert [(e.job_id, e.attempt, e.code) for e in ended] == [(5, 2, 75)]
    assert second.kill(6)
    deadline = time.time() + 5
    while second.is_alive(6) and time.time() < deadline:
        time.sleep(0.05)
    assert not second.is_alive(6)
    first.poll()  # reap


def test_a_reused_pid_is_not_adopted(tmp_path):
    executor = LocalExecutor(tmp_path)
    attempt = executor.start(8, 1, py("import time; time.sleep(30)"), env(), str(tmp_path), ())
    other = LocalExecutor(tmp_path)
    wrong = type(attempt)(8, 1, attempt.pid, attempt.proc_start + 1, ())
    assert not other.adopt(wrong)
    executor.kill(8)
    wait_exits(executor)


def lookalike(state_dir, job_id: int, new_group: bool, module: str = "apportion.executors.local.wrapper"):
    """A process whose command line reads like an attempt's wrapper (as a wrapper's own child does
    between its fork and its exec)."""
    argv = [sys.executable, "-c", "import time; time.sleep(30)", module,
            "--state-dir", str(state_dir), "--job", str(job_id), "--attempt", "1", "--slots", "-", "--", "true"]
    return subprocess.Popen(argv, start_new_session=new_group)


def test_only_the_leader_of_a_process_group_is_taken_for_an_attempt(tmp_path):
    executor = LocalExecutor(tmp_path)
    leader, follower = lookalike(executor.state_dir, 1, True), lookalike(executor.state_dir, 2, False)
    try:
        found = executor.scan()
        assert [(a.job_id, a.pid) for a in found] == [(1, leader.pid)]
    finally:
        for process in (leader, follower):
            process.kill()
            process.wait()


def test_a_wrapper_started_before_its_module_moved_is_found_and_adopted(tmp_path):
    """An attempt of a server upgraded while its jobs ran: its command line names the old module."""
    executor = LocalExecutor(tmp_path)
    earlier = lookalike(executor.state_dir, 4, True, module="apportion.executors.wrapper")
    try:
        (found,) = executor.scan()
        assert (found.job_id, found.attempt, found.pid) == (4, 1, earlier.pid)
        assert executor.adopt(found) and executor.is_alive(4)
    finally:
        earlier.kill()
        earlier.wait()


def test_a_scan_waits_for_a_leader_whose_exec_is_under_way(tmp_path, monkeypatch):
    executor = LocalExecutor(tmp_path)
    process = lookalike(executor.state_dir, 1, True)
    real, reads = local_executor._cmdline, []

    def mid_exec_at_first(pid):  # the kernel fills in the command line at the end of an exec
        if pid == process.pid:
            reads.append(pid)
            if len(reads) == 1:
                return []
        return real(pid)

    monkeypatch.setattr(local_executor, "_cmdline", mid_exec_at_first)
    try:
        assert [a.job_id for a in executor.scan()] == [1]
        assert len(reads) >= 2  # read again once its exec was through (more than once on a busy machine)
        monkeypatch.setattr(local_executor, "_cmdline", lambda pid: [] if pid == process.pid else real(pid))
        assert executor.scan(exec_wait_s=0.05) == []  # an exec that never ends is given up on
    finally:
        process.kill()
        process.wait()


def test_a_job_outlives_its_killed_wrapper_and_its_own_exit_code_is_recorded(tmp_path):
    executor = LocalExecutor(tmp_path)
    attempt = executor.start(8, 1, py("import time; time.sleep(1.5); raise SystemExit(3)"), env(), str(tmp_path), ())
    deadline = time.time() + 10
    while not executor.pid_path(8, 1).exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(attempt.pid, 9)
    (ended,) = wait_exits(executor)
    assert (ended.job_id, ended.attempt, ended.code) == (8, 1, 3)  # not killed with it: it ran to its end
    assert executor.exit_record(8, 1) == 3
