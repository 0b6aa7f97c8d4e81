"""An attempt whose wrapper died (``kill -9``, the OOM killer) while its job ran on.

The executor that starts wrappers is the *subreaper* of its descendants
(``PR_SET_CHILD_SUBREAPER``): when a wrapper dies, the job's processes become the executor's
own children instead of init's. So the executor can do what the wrapper did (wait for the
job, take its exit code, kill whatever is left in the group) and the job keeps its work
rather than being killed and restarted. ``Orphaned`` is that supervision, one ``reap`` per poll.

The exit code is the wrapper's rule: the code of the command (the wrapper's child), except
that when the command died of a stop signal (a shell killed by SIGTERM while the training
process it started checkpoints), the first code of a survivor that exited on its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from apportion.executors.base import Attempt
from apportion.executors.local.procfs import children_in_group, group_members, raw_stat
from apportion.executors.local.wrapper import STOP_SIGNALS


@dataclass
class Orphaned:
    """An attempt supervised by the executor since its wrapper died; ``command``: the process the
    wrapper started (a training process, or the shell of a shell line)."""

    attempt: Attempt
    command: int
    started: float  # when the attempt started (wall clock), for its exit record
    codes: list[tuple[int, int]] = field(default_factory=list)  # (pid, exit code) in the order reaped

    def reap(self) -> int | None:
        """Reap what ended of the job; its exit code once it is over, else None."""
        self._reap_ended()
        first = next((code for pid, code in self.codes if pid == self.command), None)
        if first is None:
            return None
        if first < 0 and -first in STOP_SIGNALS:
            if group_members(self.attempt.pid):
                return None  # the survivors received the same signal: they are checkpointing
            # all have exited, but one that did after the pass above is a zombie not reaped yet: its code counts
            self._reap_ended()
            return next((code for pid, code in self.codes if pid != self.command and code >= 0), first)
        return first

    def _reap_ended(self) -> None:
        """Reap the job's processes that have exited (this process's children in the attempt's group)."""
        for pid in children_in_group(os.getpid(), self.attempt.pid):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if got == pid:
                self.codes.append((pid, os.waitstatus_to_exitcode(status)))


def orphaned_command(pid_file: Path, pgid: int) -> int | None:
    """The command a dead wrapper started (its pid in ``pid_file``) when it is now this process's
    child in the attempt's group (alive, or ended and not reaped yet); None when the wrapper had
    reaped it already, or never started it."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return None
    fields = raw_stat(pid)
    if fields is None or int(fields[1]) != os.getpid() or int(fields[2]) != pgid:
        return None
    return pid
