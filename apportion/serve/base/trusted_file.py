"""Whether a file the server or a client takes orders or secrets from is safe to trust: one that
another account may change (group- or world-writable, or owned by anyone but the reading user or
root) could be made to hold a credential or a setting of that account's choosing.

Checked on the opened file's ``fstat`` (not a second look at the path that could be swapped
between the look and the read), as ssh checks its keys; the message says the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def trust_problem(info: os.stat_result, path: str | Path, *, secret: bool) -> str | None:
    """Why the file ``info`` describes (at ``path``) is not to be trusted, with the command that
    fixes it; None when it is. ``secret``: it holds a credential, so others may not read it either."""
    mode = stat.S_IMODE(info.st_mode)
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        return f"it is owned by another user (uid {info.st_uid}), who could change it: chown {_account(me)} {path}"
    if secret and mode & 0o077:
        return (f"other users may {'change' if mode & 0o022 else 'read'} it (mode {mode:03o}): chmod 600 {path}")
    if mode & 0o022:
        return f"other users may change it (mode {mode:03o}): chmod go-w {path}"
    return None


def _account(uid: int) -> str:
    """The account name of ``uid`` for a ``chown`` command (its number when it has none)."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)
