"""Under ``--run-as`` a job's process enters its workdir and opens its files only as its OS
account, never as root on its behalf (the wrapper stays root): a workdir below a directory the
account cannot pass is refused, whether the job starts cold (exec) or warm (a fork), and a
script the account may not read fails at once, naming it and the errno. Root only: the tests
run jobs as ``nobody``."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from apportion.executors.local import LocalExecutor
from apportion.executors.local.as_account import Identity, answer_as, cannot_enter, cannot_read
from ended import wait_exit

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running a job as another account needs root")

NOBODY = pwd.getpwnam("nobody")
AS_NOBODY = f"{NOBODY.pw_uid}:{NOBODY.pw_gid}:{NOBODY.pw_gid}"
CHECKOUT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def place():
    """``open/`` that nobody may use, and ``private/work/`` (itself open) below root's 0700 ``private/``,
    holding a secret that only a process that entered ``work`` as root could read by a relative path."""
    root = Path(tempfile.mkdtemp(prefix="apportion-enter-"))
    try:
        os.chmod(root, 0o755)
        (root / "open").mkdir(mode=0o755)
        (root / "private" / "work").mkdir(parents=True)
        os.chmod(root / "private", 0o700)
        os.chmod(root / "private" / "work", 0o777)
        (root / "private" / "work" / "secret.txt").write_text("root's secret\n")
        os.chmod(root / "private" / "work" / "secret.txt", 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_path_is_looked_at_as_the_account_with_stats_answer(place):
    nobody = Identity.parse(AS_NOBODY)
    work = str(place / "private" / "work")
    assert answer_as(None, lambda: cannot_enter(work)) == ""  # root passes
    assert answer_as(nobody, lambda: cannot_enter(work)) == f"cannot reach {work}: Permission denied"
    # not "no such directory": behind a directory it cannot pass, nobody learns nothing of what is there
    assert answer_as(nobody, lambda: cannot_enter(work + "-not-there")) == f"cannot reach {work}-not-there: " \
                                                                          "Permission denied"
    assert answer_as(nobody, lambda: cannot_enter(str(place / "open" / "gone"))) == \
        f"no such directory: {place / 'open' / 'gone'}"
    assert answer_as(nobody, lambda: repr(cannot_read(f"{work}/secret.txt", "secret.txt"))) == \
        repr(("denied", "cannot reach secret.txt: [Errno 13] Permission denied"))


def test_a_cold_start_enters_the_workdir_only_as_the_account(place):
    executor = LocalExecutor(place / "state")
    work = place / "private" / "work"
    executor.start(1, 1, ["/bin/sh", "-c", "cat secret.txt"], {"PATH": "/usr/bin:/bin"}, str(work), (),
                   run_as=_account())
    ended = wait_exit(executor)
    log = executor.log_path(1, 1).read_text()
    assert "root's secret" not in log
    assert ended.code == 126, log  # cannot start: never retried
    assert log.splitlines()[-1] == (f"apportion: cannot start: cannot enter the workdir: cannot reach {work}:"
                                    f" Permission denied (as uid {NOBODY.pw_uid})")


def test_the_cold_exec_switches_account_before_it_changes_directory(place):
    """The wrapper's own check aside (a directory made unreachable between the check and the exec):
    the exec'd child enters the workdir after the switch, and says so when it cannot."""
    work = place / "private" / "work"
    code = textwrap.dedent(f"""
        from apportion.executors.local.wrapper import spawn
        child = spawn(["/bin/cat", "secret.txt"], {{"workdir": {str(work)!r}, "run-as": {AS_NOBODY!r}}}, env={{}})
        raise SystemExit(child.wait())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": CHECKOUT})
    assert "root's secret" not in done.stdout
    assert done.returncode == 126, done.stderr
    assert done.stderr.strip() == (f"apportion: cannot start: cannot enter the workdir {work}: Permission denied"
                                   f" (as uid {NOBODY.pw_uid})")


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no system Python for nobody to run")
def test_a_warm_fork_switches_account_before_it_changes_directory(place):
    """The fork of a spare (warm_start.Launch) becomes the account first, then enters the workdir."""
    work = place / "private" / "work"
    script = place / "open" / "peek.py"
    script.write_text("print(open('secret.txt').read())\n")
    os.chmod(script, 0o644)
    code = textwrap.dedent(f"""
        import os
        from apportion.executors.local.warm_start import Launch
        launch = object.__new__(Launch)  # what Launch decides before it forks, for this script
        launch.command, launch.env, launch.workdir = ["python3", {str(script)!r}], {{}}, {str(work)!r}
        launch.kind, launch.name, launch.args, launch.path0, launch.threads = "script", {str(script)!r}, [], "/", {{}}
        pid = launch.fork({AS_NOBODY!r})
        raise SystemExit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    done = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHECKOUT})
    assert "root's secret" not in done.stdout
    assert done.returncode == 126, done.stderr
    assert done.stderr.strip() == (f"apportion: cannot start: cannot enter the workdir {work}: Permission denied"
                                   f" (as uid {NOBODY.pw_uid})")


def test_a_script_the_account_may_not_read_fails_at_once_naming_it_and_the_errno(place):
    executor = LocalExecutor(place / "state")
    work = place / "open"
    (work / "train.py").write_text("print('trained')\n")
    os.chmod(work / "train.py", 0o600)  # root's alone
    executor.start(1, 1, ["python3", "train.py"], {"PATH": "/usr/bin:/bin"}, str(work), (), run_as=_account())
    assert wait_exit(executor).code == 126
    assert executor.log_path(1, 1).read_text().splitlines()[-1] == (
        f"apportion: cannot start: cannot read train.py: [Errno 13] Permission denied (as uid {NOBODY.pw_uid})")

    hidden = place / "private" / "work"  # the same answer whether or not the file is there
    for job, name in ((2, "secret.txt"), (3, "no-such.py")):
        executor.start(job, 1, ["python3", str(hidden / name)], {"PATH": "/usr/bin:/bin"}, str(work), (),
                       run_as=_account())
        assert wait_exit(executor).code == 126
        assert executor.log_path(job, 1).read_text().splitlines()[-1] == (
            f"apportion: cannot start: cannot reach {hidden / name}: [Errno 13] Permission denied"
            f" (as uid {NOBODY.pw_uid})")


def _account():
    from apportion.serve.accounts.runas import lookup

    return lookup("nobody", "alice")


def test_a_command_the_account_may_not_run_names_the_path_and_fails_at_once(place):
    """An operator's PATH whose python the account may not run: exit 126 (never retried), the path named."""
    private = place / "private"
    os.symlink(sys.executable, private / "python3")  # root's alone: private/ is 0700
    executor = LocalExecutor(place / "state")
    executor.start(1, 1, ["python3", "-c", "pass"], {"PATH": f"{private}:/nonexistent"}, str(place / "open"), (),
                   run_as=_account())
    assert wait_exit(executor).code == 126
    assert executor.log_path(1, 1).read_text().splitlines()[-1] == (
        f"apportion: cannot start python3: {private}/python3: Permission denied (as uid {NOBODY.pw_uid})")


def test_a_mapped_job_whose_script_its_account_may_not_read_fails_at_once_not_retried(place):
    from apportion.policies.las import Las
    from apportion.serve.accounts.runas import RunAs
    from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
    from apportion.serve.base.slots import parse_slots
    from apportion.serve.store.state import StateStore

    (place / "open" / "train.py").write_text("print('trained')\n")
    os.chmod(place / "open" / "train.py", 0o600)  # root's alone
    state = place / "state"
    state.mkdir()
    config = ServeConfig(state_dir=state, round_s=1.0, max_retries=3, run_as=RunAs("mapped", {"alice": "nobody"}))
    scheduler = Scheduler(StateStore(state / "state.db"), LocalExecutor(state), parse_slots("cpu:1"), Las(), config)
    scheduler.submit({"name": "j", "command": "python3 train.py", "total_steps": 10,
                      "workdir": str(place / "open")}, "alice")
    deadline = time.time() + 30
    while scheduler.store.job(1).status not in ("failed", "completed"):
        assert time.time() < deadline, scheduler.store.job(1).reason
        scheduler.tick()
        time.sleep(0.05)
    row = scheduler.store.job(1)
    assert (row.status, row.retries, row.attempt) == ("failed", 0, 1)
    assert row.reason == "its command is not executable (exit 126) on attempt 1, not retried"
    assert row.reason_log == f"apportion: cannot start: cannot read train.py: [Errno 13] Permission denied (as uid " \
                             f"{NOBODY.pw_uid})"


def test_whether_a_job_starts_warm_is_decided_on_what_its_account_sees(place, monkeypatch):
    """Warm or cold is in the start event: decided as root, it would tell whether a script is there
    in a directory the account may not read. So the pool's checks run as the account."""
    executor = LocalExecutor(place / "state", spares=1)
    taken = object()
    monkeypatch.setattr(executor._pool, "_first_alive", lambda spares: taken)  # as if a spare were waiting
    hidden = place / "private" / "work"
    (hidden / "train.py").write_text("pass\n")
    there, missing = ([sys.executable, str(hidden / name)] for name in ("train.py", "nothing.py"))
    env, work = dict(executor._pool.env), str(place / "open")
    try:
        assert executor._pool.take(there, env, work) is taken  # as root (no account): an oracle
        assert executor._pool.take(missing, env, work) is None
        assert executor._pool.take(there, env, work, AS_NOBODY) is None  # as nobody: the same answer for both
        assert executor._pool.take(missing, env, work, AS_NOBODY) is None
    finally:
        executor.close()


def test_a_mapped_job_with_no_workdir_runs_in_its_job_directory_which_it_may_enter_not_list(place):
    from apportion.policies.las import Las
    from apportion.serve.accounts.runas import RunAs
    from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
    from apportion.serve.base.slots import parse_slots
    from apportion.serve.store.state import StateStore

    state = place / "state"
    state.mkdir()
    config = ServeConfig(state_dir=state, round_s=1.0, run_as=RunAs("mapped", {"alice": "nobody"}))
    scheduler = Scheduler(StateStore(state / "state.db"), LocalExecutor(state), parse_slots("cpu:1"), Las(), config)
    scheduler.submit({"name": "j", "command": "pwd; id -u", "total_steps": 10}, "alice")
    deadline = time.time() + 30
    while scheduler.store.job(1).status not in ("failed", "completed"):
        assert time.time() < deadline, scheduler.store.job(1).reason
        scheduler.tick()
        time.sleep(0.05)
    assert scheduler.store.job(1).status == "completed", scheduler.store.job(1).reason
    assert scheduler.executor.tail(1, 1).splitlines()[-2:] == [str(state / "jobs" / "1"), str(NOBODY.pw_uid)]
