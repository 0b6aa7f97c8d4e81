"""Owner-only files: the state directory, the state file (job specs with their ``env``, the
credentials' hashes) and the attempts' logs are readable by the server's OS user alone.

Each is created with its mode (not through the process umask, which the server's threads and
its jobs share); one left wider by an older apportion is narrowed when the server opens it.
"""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create directory ``path`` (and its parents) owner-only when it does not exist yet."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
    return path


def private_file(path: Path) -> Path:
    """Create file ``path`` empty and owner-only when it does not exist; narrow it when it does."""
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
    except FileExistsError:
        tighten(path, FILE_MODE)
    return path


def tighten(path: Path, mode: int) -> None:
    """Take away every permission bit of ``path`` beyond ``mode`` (when it exists and is ours)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if st.st_uid == os.geteuid() and st.st_mode & 0o777 & ~mode:
        os.chmod(path, st.st_mode & 0o777 & mode)
