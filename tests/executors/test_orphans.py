"""An attempt whose wrapper died is supervised by the executor (executors/local/orphans.py): its
exit code is the wrapper's rule, the training process's own after a shell line was stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from apportion.executors.base import Attempt
from apportion.executors.local import orphans
from apportion.executors.local.procfs import group_members, raw_stat
from apportion.executors.local.wrapper import become_subreaper

# the training process under a shell line: on SIGTERM it checkpoints (here: waits for the file GO) and exits 75
TRAINER = """
import os, signal, sys, time
go, ready = sys.argv[1], sys.argv[2]
def checkpoint_and_exit(signum, frame):
    while not os.path.exists(go):
        time.sleep(0.01)
    sys.exit(75)
signal.signal(signal.SIGTERM, checkpoint_and_exit)
with open(ready + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.replace(ready + ".tmp", ready)
while True:
    time.sleep(1)
"""


def wait_until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def state(pid: int) -> str | None:
    fields = raw_stat(pid)
    return None if fields is None else fields[0]


def test_a_survivor_that_exits_while_the_executor_looks_gives_its_own_exit_code(tmp_path, monkeypatch):
    """The shell died of SIGTERM; its training process exits 75 just after the executor's reap and
    just before it looks for live processes of the group. It is no longer alive, but its code is
    still to be read: the attempt ends 75 (preempted, checkpoint written), not -15 (a crash)."""
    assert become_subreaper()  # as the executor is: the shell's orphans become this process's children
    go, ready = tmp_path / "go", tmp_path / "ready"
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    line = f"{sys.executable} {trainer} {go} {ready} & wait"
    shell = subprocess.Popen(["/bin/sh", "-c", line], start_new_session=True)  # the wrapper's command
    try:
        wait_until(ready.exists, "the training process to start")
        survivor = int(ready.read_text())
        orphan = orphans.Orphaned(Attempt(1, 1, shell.pid, None, ()), shell.pid, time.time())
        os.killpg(shell.pid, signal.SIGTERM)
        wait_until(lambda: state(shell.pid) == "Z" and int(raw_stat(survivor)[1]) == os.getpid(),
                   "the shell to die and leave the training process to this process")
        live = orphans.group_members

        def survivor_exits_first(pgid: int) -> list[int]:
            go.touch()
            wait_until(lambda: state(survivor) == "Z", "the training process to exit")
            return live(pgid)

        monkeypatch.setattr(orphans, "group_members", survivor_exits_first)
        assert orphan.reap() == 75
        assert state(survivor) is None and state(shell.pid) is None  # both reaped
    finally:
        if group_members(shell.pid):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
