"""Ending an attempt's process group: the one way the executor, the wrapper and the spare pool
send a group a signal (a group already gone is no error) or SIGKILL each of its other members.

Standard library and ``procfs`` only, so that the wrapper starts fast.
"""

from __future__ import annotations

import os
import signal

from apportion.executors.local.procfs import group_members


def signal_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to process group ``pgid`` (0: the caller's own); False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_the_others(pgid: int) -> None:
    """SIGKILL every live process of group ``pgid`` but the caller, one by one (the caller lives on:
    it still has an exit status to give)."""
    me = os.getpid()
    for pid in group_members(pgid):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
