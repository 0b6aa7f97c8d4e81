"""A job's environment reaches the job's processes only: the wrapper that supervises them runs in
the server's own environment (apportion/executors/local/wrapper.py), so nothing a job file sets
(``LD_PRELOAD``, ``PYTHONPATH``, ``BASH_ENV``...) runs with the wrapper's rights, which are root's
under ``--run-as mapped``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from apportion.executors.local import LocalExecutor
from apportion.executors.local.wrapper import read_env_file, write_env_file
from ended import wait_exit

JOB_ONLY = {"JOB_ONLY_SETTING": "set-by-the-job-file", "APPORTION_TOKEN": "a1.secret", "PYTHONSTARTUP": "/nowhere/startup.py"}

# the job prints its own settings, its wrapper's environment (its parent's) and whether its env file is left
PROBE = """
import json, os, sys
wrapper = open(f"/proc/{os.getppid()}/environ", "rb").read().decode().split("\\0")
print(json.dumps({"own": {k: os.environ.get(k) for k in sys.argv[1].split(",")},
                  "wrapper": sorted(e.split("=", 1)[0] for e in wrapper if "=" in e),
                  "env_file_left": os.path.exists(sys.argv[2])}))
"""


def test_the_wrapper_runs_in_the_servers_environment_and_only_the_job_in_its_own(tmp_path):
    executor = LocalExecutor(tmp_path)
    env = {**os.environ, **JOB_ONLY}
    env_file = str(executor.env_path(1, 1))
    executor.start(1, 1, [sys.executable, "-c", PROBE, ",".join(JOB_ONLY), env_file], env, None, ())
    assert wait_exit(executor).code == 0, executor.tail(1, 1)
    seen = json.loads(executor.log_path(1, 1).read_text().splitlines()[-1])

    assert seen["own"] == JOB_ONLY  # the job has its environment
    assert not set(JOB_ONLY) & set(seen["wrapper"])  # its wrapper never had any of it
    assert seen["env_file_left"] is False  # read and removed before the job started
    assert not os.path.exists(env_file)


def test_a_spare_is_handed_no_environment_in_its_record(tmp_path, monkeypatch):
    executor = LocalExecutor(tmp_path, spares=1)
    handed = []
    waiting = object()

    def hand(spare, record):  # what the spare would read; then it "dies": the attempt starts cold
        handed.append(record)
        raise OSError("gone")

    monkeypatch.setattr(executor._pool, "take", lambda command, env, workdir, run_as=None: waiting)
    monkeypatch.setattr(executor._pool, "hand", hand)
    monkeypatch.setattr(executor._pool, "refill", lambda: None)
    env = {**os.environ, **JOB_ONLY}
    executor.start(1, 1, [sys.executable, "-c", "pass"], env, None, ())
    assert wait_exit(executor).code == 0, executor.tail(1, 1)

    assert "--env-file" in handed[0]["argv"]  # the spare reads the job's environment as a cold wrapper does
    assert not any(value in json.dumps(handed[0]) for value in JOB_ONLY.values())


def test_the_env_file_is_owner_only_and_never_written_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("untouched")
    path = tmp_path / "attempt-1.env"
    path.symlink_to(elsewhere)
    write_env_file(path, {"A": "1"})
    assert elsewhere.read_text() == "untouched"
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600 and not path.is_symlink()
    assert read_env_file(str(path)) == {"A": "1"}
    assert not path.exists()  # removed once read: the attempt's credential does not stay on disk


# --- as root: --run-as mapped, with a throwaway OS account ------------------------------------

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                               reason="running a job as another OS account needs root and useradd")

SITECUSTOMIZE = "import os\nwith open({uids!r}, 'a') as out:\n    out.write(f'python {{os.getuid()}}\\n')\n"
BASH_ENV = 'echo "bash $(id -u)" >> {uids}\n'
PRELOAD_C = """#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void seen(void) {{
    FILE *out = fopen("{uids}", "a");
    if (out) {{ fprintf(out, "preload %d\\n", (int)getuid()); fclose(out); }}
}}
"""
WARM_PROBE = """
import ctypes, json, os, subprocess, sys
subprocess.run(["bash", "-c", "true"], check=True)
print(json.dumps({"uid": os.getuid(), "setting": os.environ.get("JOB_ONLY_SETTING"),
                  "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), "warm": "--spare" in sys.orig_argv}))
"""


@pytest.fixture(scope="module")
def account():
    from apportion.serve.accounts.runas import lookup

    name = f"apportion-env-{os.getpid()}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield lookup(name, "alice")
    finally:
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def traps(account):
    """A directory the account can read with a ``sitecustomize.py``, a ``BASH_ENV`` script and (with a C
    compiler) an ``LD_PRELOAD`` library, each appending ``KIND UID`` to the world-writable ``uids``."""
    root = Path(tempfile.mkdtemp(prefix="apportion-traps-"))
    try:
        os.chmod(root, 0o755)
        uids = root / "uids"
        (root / "pythonpath").mkdir(mode=0o755)
        (root / "pythonpath" / "sitecustomize.py").write_text(SITECUSTOMIZE.format(uids=str(uids)))
        (root / "bash_env.sh").write_text(BASH_ENV.format(uids=uids))
        (root / "probe.py").write_text(WARM_PROBE)
        # the server's PYTHONPATH kept after the trap: a wrapper given this one would still start
        pythonpath = os.pathsep.join(filter(None, [str(root / "pythonpath"), os.environ.get("PYTHONPATH")]))
        env = {"PYTHONPATH": pythonpath, "BASH_ENV": str(root / "bash_env.sh")}
        if shutil.which("cc"):
            (root / "trap.c").write_text(PRELOAD_C.format(uids=uids))
            subprocess.run(["cc", "-shared", "-fPIC", "-o", str(root / "trap.so"), str(root / "trap.c")], check=True)
            env["LD_PRELOAD"] = str(root / "trap.so")
        for path in root.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        yield root, env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fresh(uids: Path) -> None:
    uids.write_text("")
    os.chmod(uids, 0o666)


def runnable_python(account, monkeypatch) -> str:
    """An interpreter that ``account`` may run and that imports this apportion from anywhere, the
    server's ``PYTHONPATH`` naming this checkout (as a server started from it would); skip when there is none."""
    import apportion

    checkout = str(Path(apportion.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")])))
    for python in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not python:
            continue
        try:
            imports = subprocess.run([python, "-c", "import apportion.executors.local.spare_process"], capture_output=True,
                                     user=account.uid, group=account.gid, extra_groups=[], cwd="/")
        except OSError:  # the account may not reach it (one under /root)
            continue
        if imports.returncode == 0:
            return python
    pytest.skip(f"no Python here that {account.name} may run and that imports apportion from {checkout}")


def seen_uids(uids: Path) -> set[tuple[str, int]]:
    return {(kind, int(uid)) for kind, uid in (line.split() for line in uids.read_text().splitlines())}


@ROOT_ONLY
def test_a_cold_start_applies_the_jobs_environment_only_as_its_account(account, traps, tmp_path, monkeypatch):
    root, trap_env = traps
    python = runnable_python(account, monkeypatch)
    fresh(root / "uids")
    executor = LocalExecutor(tmp_path, python=python)
    env = {**executor.wrapper_env, **account.environ(), **trap_env, **JOB_ONLY}
    executor.start(1, 1, f"bash -c true && {python} -c 'import os; print(os.environ[\"JOB_ONLY_SETTING\"])'",
                   env, str(root), (), run_as=account)
    assert wait_exit(executor).code == 0, executor.tail(1, 1)

    seen = seen_uids(root / "uids")
    assert not any(uid == 0 for _, uid in seen), seen  # nothing of the job file's ran as root
    expected = {("python", account.uid), ("bash", account.uid)} | ({("preload", account.uid)} if "LD_PRELOAD" in env else set())
    assert expected <= seen  # ... and all of it ran as the job's account
    assert executor.log_path(1, 1).read_text().splitlines()[-1] == "set-by-the-job-file"


@ROOT_ONLY
def test_a_warm_start_applies_the_jobs_environment_only_as_its_account(account, traps, tmp_path, monkeypatch):
    root, trap_env = traps
    python = runnable_python(account, monkeypatch)
    fresh(root / "uids")
    executor = LocalExecutor(tmp_path, python=python, spares=1)
    try:
        deadline = time.time() + 120
        while not (executor._pool.waiting() and executor._pool.is_ready(executor._pool.waiting()[0])):
            assert time.time() < deadline, "no spare was ready in time"
            executor.poll()
            time.sleep(0.05)
        env = {**executor.wrapper_env, **account.environ(), "BASH_ENV": trap_env["BASH_ENV"],
               "JOB_ONLY_SETTING": JOB_ONLY["JOB_ONLY_SETTING"]}  # nothing read at start-up: it starts warm
        executor.start(1, 1, [python, "probe.py"], env, str(root), (), run_as=account)
        assert wait_exit(executor).code == 0, executor.tail(1, 1)
    finally:
        executor.close()

    log = executor.log_path(1, 1).read_text()
    assert "cold start" not in log, log
    facts = json.loads(log.splitlines()[-1])
    assert facts == {"uid": account.uid, "setting": "set-by-the-job-file", "dumpable": 0, "warm": True}  # non-dumpable, as the switch left it
    assert seen_uids(root / "uids") == {("bash", account.uid)}
