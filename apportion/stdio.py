"""Keep stdout for a program's own output: inside ``stdout_to_stderr()``, whatever is written to
stdout — a Python ``print`` or a C library's write to file descriptor 1, such as the banner
HiGHS prints when a model is created — goes to stderr instead.

Nested and concurrent uses share one redirection, undone when the last of them ends.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_saved_fd: int | None = None
_saved_stdout = None


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 and ``sys.stdout`` at stderr until the block ends."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _depth, _saved_fd, _saved_stdout
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        _flush()
        _saved_stdout = sys.stdout
        sys.stdout = sys.stderr
        try:
            _saved_fd = os.dup(1)
        except OSError:  # no file descriptor 1: nothing to protect
            _saved_fd = None
            return
        try:
            os.dup2(2, 1)
        except OSError:
            os.close(_saved_fd)
            _saved_fd = None


def _leave() -> None:
    global _depth, _saved_fd, _saved_stdout
    with _lock:
        _depth -= 1
        if _depth:
            return
        _flush()
        if _saved_fd is not None:
            os.dup2(_saved_fd, 1)
            os.close(_saved_fd)
            _saved_fd = None
        sys.stdout, _saved_stdout = _saved_stdout, None


def _flush() -> None:
    """Write out what Python and C buffered, so that it lands where it was written."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (e.g. Windows)
        pass
