"""Look at a path as the OS account a job runs as, never as root (``--run-as mapped``).

A root server (or a root wrapper) that checked a user's path itself would answer for root: a
file in a directory the account cannot read would be "there", and its messages would tell the
user what lies where they may not look. So every check on a user's path runs in a short child
forked from the caller that drops to the account (groups, gid, uid: ACLs and groups count),
looks with ``os.stat``'s semantics (a ``Permission denied`` on the way is a refusal, never
"not there"), writes its one-line answer to a pipe and exits, exec'ing nothing (the account may
not reach the server's Python). Standard library only: the job's wrapper imports it.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import time
from collections.abc import Callable

MAX_FD = 65536  # the child closes every descriptor below this but its answer's
CHECK_TIMEOUT_S = 10.0


class Identity(tuple):
    """``(uid, gid, groups)`` of an OS account; ``parse("1001:1001:1001,27")`` reads the wrapper's ``--run-as``."""

    @classmethod
    def of(cls, uid: int, gid: int, groups: tuple[int, ...] | list[int]) -> Identity:
        return cls((int(uid), int(gid), tuple(int(g) for g in groups)))

    @classmethod
    def parse(cls, text: str) -> Identity:
        uid, gid, groups = text.split(":")
        return cls.of(int(uid), int(gid), [int(g) for g in groups.split(",") if g])


def become(identity: Identity) -> None:
    """Drop this process to ``identity`` for good: groups, then gid, then uid (the order that works)."""
    uid, gid, groups = identity
    os.setgroups(list(groups))
    os.setregid(gid, gid)
    os.setreuid(uid, uid)


def answer_as(identity: Identity | None, work: Callable[[], str], timeout_s: float = CHECK_TIMEOUT_S) -> str:
    """``work()``'s text, computed by ``identity`` (None, or not root: by this process, which is already
    the account jobs run as). ValueError when the child gives no answer (it failed, or ran past
    ``timeout_s`` and was killed)."""
    if identity is None or os.geteuid() != 0:
        return work()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the account for good, answer, and leave without cleaning up
        code = 1
        try:
            os.closerange(3, write_end)  # the server's sockets and state file are none of its business
            os.closerange(write_end + 1, MAX_FD)
            become(identity)
            data = work().encode("utf-8", "surrogateescape")
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
            if left <= 0 or not readable(read_end, left):
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
        raise ValueError("its check failed")
    return b"".join(chunks).decode("utf-8", "surrogateescape")


def readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` has something to read (or its end) within ``timeout_s``: poll, which, unlike
    select, takes descriptors above 1023, as a busy server's are."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0, int(timeout_s * 1000))))


def cannot_enter(directory: str, read: bool = True) -> str:
    """Why this process cannot work in ``directory`` (reach it, enter it and, with ``read``, list it);
    "" when it can.

    ``os.stat``'s answer, not ``os.path.isdir``'s: a directory on the way this process may not
    pass is "cannot reach", never "no such directory"."""
    try:
        found = os.stat(directory)
    except FileNotFoundError:
        return f"no such directory: {directory}"
    except OSError as err:
        return f"cannot reach {directory}: {err.strerror}"
    if not stat.S_ISDIR(found.st_mode):
        return f"not a directory: {directory}"
    if read:
        return "" if os.access(directory, os.R_OK | os.X_OK) else f"cannot enter and read {directory}"
    return "" if os.access(directory, os.X_OK) else f"cannot enter {directory}"


def cannot_read(path: str, shown: str | None = None) -> tuple[str, str]:
    """(``"missing"``, why) when ``path`` is not there, (``"denied"``, why) when this process may not
    reach or read it (or it is no file), ("", "") when it can read it; ``why`` names it ``shown``."""
    shown = path if shown is None else shown
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return "missing", f"no such file {shown}"
    except OSError as err:
        return "denied", f"cannot reach {shown}: [Errno {err.errno}] {err.strerror}"
    if stat.S_ISDIR(found.st_mode):
        return "denied", f"cannot read {shown}: [Errno 21] Is a directory"
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as err:
        return "denied", f"cannot read {shown}: [Errno {err.errno}] {err.strerror}"
    return "", ""


def cannot_run(program: str, path: str) -> str:
    """Why this process cannot run ``program`` (looked up on ``path`` unless it names a directory), as
    exec would find it; "" when it can. Each candidate it may not reach or execute is named."""
    candidates = [program] if "/" in program else [os.path.join(d or ".", program) for d in path.split(os.pathsep)]
    refused = []
    for candidate in candidates:
        try:
            found = os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            refused.append(f"{candidate}: {err.strerror}")
            continue
        if stat.S_ISREG(found.st_mode) and os.access(candidate, os.X_OK):
            return ""
        refused.append(f"{candidate}: not executable")
    return "; ".join(refused) if refused else f"no {program} on {path}" if "/" not in program else \
        f"no such file {program}"
