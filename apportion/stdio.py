"""Keep stdout for a program's own output: inside ``stdout_to_stderr()``, whatever is written to
stdout — a Python ``print`` or a C library's write to file descriptor 1 — goes to stderr instead;
inside ``c_stdout_discarded()``, what a C library writes to file descriptor 1 goes nowhere (the
banner HiGHS prints when a model is created, which nobody asked for).

Nested and concurrent uses share one redirection, undone when the last of them ends; a discard
holds the redirection's lock for its (short) block, so that neither undoes the other.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.RLock()  # a redirection may be entered inside a discard's block
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


@contextmanager
def c_stdout_discarded() -> Iterator[None]:
    """Point file descriptor 1 at the null device until the block ends, C's buffered output flushed
    on either side so that only what the block wrote is lost. Keep the block short: other threads
    writing to file descriptor 1 meanwhile are silenced too, and wait to redirect it."""
    with _lock:
        _flush()
        saved = _null_stdout()
        try:
            yield
        finally:
            if saved is not None:
                _flush()
                os.dup2(saved, 1)
                os.close(saved)


def _null_stdout() -> int | None:
    """Point file descriptor 1 at the null device; a copy of what it was, or None if it was nothing."""
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1: nothing to discard
        return None
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
    except OSError:
        os.close(saved)
        return None
    return saved


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
