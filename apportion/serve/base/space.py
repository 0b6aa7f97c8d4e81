"""Running out of space in the state directory: one exception for every write that failed for
lack of it, and the condition the server shows while it lasts.

A write that finds the disk (or the user's quota) full fails whole: the state file's
transaction rolls back (state.py), the API answers 507 naming the state directory, and the
scheduler keeps what it could not record (an attempt's exit) until a later tick can. The
condition is set by the failure and cleared only by a probe that really writes (a file in the
state directory, and pages of the state file), so a write that happened to fit in space
already held does not clear it while the disk is still full.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

PROBE_BYTES = 64 * 1024  # what a probe writes: more than one page of anything the server writes at once
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class NoSpace(Exception):
    """A write to the state directory failed for lack of space; nothing of it was kept."""

    def __init__(self, state_dir: str | Path, what: str = "") -> None:
        self.state_dir = str(state_dir)
        detail = f" ({what})" if what else ""
        super().__init__(f"the server's state directory {self.state_dir} is out of space{detail}: nothing was"
                         " changed; free space there and try again")


def is_no_space(err: BaseException) -> bool:
    """Did ``err`` fail for lack of space: SQLite's SQLITE_FULL, or ENOSPC / EDQUOT from a file?"""
    if isinstance(err, NoSpace):
        return True
    if isinstance(err, OSError):
        return err.errno in _NO_SPACE_ERRNOS
    if isinstance(err, sqlite3.Error):
        code = getattr(err, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF == sqlite3.SQLITE_FULL
        return "database or disk is full" in str(err)
    return False


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (None: unknown)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def probe_file(state_dir: str | Path) -> None:
    """Write ``PROBE_BYTES`` to a file in ``state_dir`` and remove it; OSError when that fails."""
    path = Path(state_dir) / "space-probe"
    try:
        with open(path, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        try:
            path.unlink()
        except OSError:
            pass
