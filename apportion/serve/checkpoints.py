"""What the server reads of a job's checkpoint directory, and as which OS account.

A job resumes from its newest intact checkpoint (apportion.runtime.checkpoint.newest_intact:
readable, and matching its SHA-256 where it has one); the server reads that once when an
attempt ends, never unpickling anything. It hashes only checkpoints up to VERIFY_MOST_BYTES
(it holds the scheduler's lock meanwhile, about 0.7 s a GiB); a larger one is verified by the
job's own restore, and the step that restore reached is recorded at its first lease call. Under ``--run-as mapped`` the server is root and a
job file may name any directory, so it reads the directory in a short child process forked
from the server that has dropped to the job's OS account (and execs nothing: the account may
not reach the server's Python): a file that account cannot read never counts as the job's
progress. A submit whose ``checkpoint_dir`` that account cannot use, or whose ``workdir`` it
cannot enter, is refused.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from collections.abc import Callable

from apportion.runtime.checkpoint import Intact, newest_intact
from apportion.serve.runas import Account

VERIFY_MOST_BYTES = 256 * 2**20  # larger checkpoints are verified by the job's restore, not under the server's lock
READ_TIMEOUT_S = 60.0  # listing the directory and hashing at most VERIFY_MOST_BYTES (~0.2 s) a file
CHECK_TIMEOUT_S = 10.0
MAX_FD = 65536  # the child closes every descriptor below this but its answer's


def newest_intact_as(directory: str, account: Account | None) -> Intact:
    """The newest intact checkpoint in ``directory``, read as ``account`` (None: as the server)."""
    if account is None or os.geteuid() != 0:  # not root: the server is the account its jobs run as
        return newest_intact(directory, VERIFY_MOST_BYTES)
    try:
        found = _as_account(account, lambda: newest_intact(directory, VERIFY_MOST_BYTES)._asdict(), READ_TIMEOUT_S)
        return Intact(found["step"], tuple(found["skipped"]),
                      f"{found['error']} (as OS account {account.name})" if found["error"] else "")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return Intact(None, error=f"cannot read {directory} as OS account {account.name}: {err}")


def unusable_checkpoint_dir(directory: str, account: Account | None) -> str | None:
    """Why ``account`` could not keep its checkpoints in ``directory`` (reach, read and write it, or
    create it), or None. Checked by the account itself, so its groups and any ACL count."""
    return _problem_as(account, lambda: _cannot_use(directory))


def unusable_workdir(directory: str, account: Account | None) -> str | None:
    """Why ``account`` could not run a job in ``directory`` (one it cannot enter and read), or None."""
    return _problem_as(account, lambda: _cannot_enter(directory))


def _problem_as(account: Account | None, check: Callable[[], str]) -> str | None:
    """What ``check()`` finds wrong when ``account`` runs it (None: nothing, or no other account to be)."""
    if account is None or os.geteuid() != 0:
        return None
    try:
        said = _as_account(account, check, CHECK_TIMEOUT_S)
    except (OSError, ValueError) as err:
        return f"cannot check it as OS account {account.name}: {err}"
    return f"{said} (as OS account {account.name}, which runs the job)" if said else None


def _cannot_enter(directory: str) -> str:
    """Why this process cannot work in ``directory``; "" when it can (or it is not there: submit says so)."""
    try:
        if not os.path.isdir(directory):
            return "not a directory" if os.path.exists(directory) else ""
    except OSError as err:
        return f"cannot reach it: {err.strerror}"
    return "" if os.access(directory, os.R_OK | os.X_OK) else "cannot enter and read it"


def _cannot_use(directory: str) -> str:
    """Why this process cannot keep checkpoints in ``directory``; "" when it can."""
    path = probe = os.path.abspath(directory)
    while True:
        try:
            os.stat(probe)
        except FileNotFoundError:
            probe = os.path.dirname(probe)
            continue
        except OSError as err:
            return f"cannot reach {probe}: {err.strerror}"
        if probe == path:
            if not os.path.isdir(path):
                return "not a directory"
            return "" if os.access(path, os.R_OK | os.W_OK | os.X_OK) else "cannot read and write it"
        return "" if os.access(probe, os.W_OK | os.X_OK) else f"cannot create it in {probe}"


def _as_account(account: Account, work: Callable[[], object], timeout_s: float):
    """``work()``'s JSON-able answer, computed in a forked child that is ``account``; ValueError when
    it gives none (it failed, or ran past ``timeout_s`` and was killed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the account for good, answer, and leave without cleaning up
        code = 1
        try:
            os.closerange(3, write_end)  # the server's sockets and state file are none of its business
            os.closerange(write_end + 1, MAX_FD)
            os.setgroups(list(account.groups))
            os.setgid(account.gid)
            os.setuid(account.uid)
            data = json.dumps(work()).encode()
            while data:
                data = data[os.write(write_end, data):]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise ValueError(f"no answer within {timeout_s:g} s")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise ValueError("its reader failed")
    return json.loads(b"".join(chunks))
