"""What ``/proc`` says about processes: their state, start time, parent and process group.

Shared by the executor (finding attempts, cleaning up after one) and the wrapper (waiting for
the job's processes); standard library only, so that the wrapper starts fast.
"""

from __future__ import annotations

import os


def raw_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), zombies included; None when gone.

    Index 0 is the state (``Z``: a zombie), 1 the parent's pid, 2 the process group, 6 the
    flags, 19 the start time.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields or None


def stat_fields(pid: int) -> list[str] | None:
    """``raw_stat`` of a live process: None when it is gone or a zombie (it has exited already)."""
    fields = raw_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return fields


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks, or None when there is no such (live) process."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def _processes(zombies: bool):
    """``(pid, fields)`` of every process (zombies too when ``zombies``)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = raw_stat(int(entry.name)) if zombies else stat_fields(int(entry.name))
            if fields is not None:
                yield int(entry.name), fields


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    return [pid for pid, fields in _processes(False) if int(fields[2]) == pgid]


def children(ppid: int) -> list[int]:
    """The processes whose parent is ``ppid``, zombies included (their exit status is still to be read)."""
    return [pid for pid, fields in _processes(True) if int(fields[1]) == ppid]


def children_in_group(ppid: int, pgid: int) -> list[int]:
    """The children of ``ppid`` (zombies included) in process group ``pgid``."""
    return [pid for pid, fields in _processes(True) if int(fields[1]) == ppid and int(fields[2]) == pgid]


def still_runs(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` started at ``start`` still runs; when it has ended as this process's
    child (one it inherited as a subreaper, whose end nothing else here waits for), it is reaped."""
    if start is not None and process_start(pid) == start:
        return True
    fields = raw_stat(pid)
    if fields is not None and fields[0] == "Z" and int(fields[1]) == os.getpid() and int(fields[19]) == start:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return False
