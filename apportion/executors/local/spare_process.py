"""What runs in a spare wrapper (spare_pool.py has the whole protocol): its imports, the wait for
its attempt, the watch on its owner, and the factory's loop that forks later spares.

The wrapper's entry point calls ``await_assignment`` when started with ``--spare ID``; it
returns, in the spare (or in a fork of the factory), the arguments of the attempt it was handed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from apportion.executors.local import warm_start
from apportion.executors.local.procfs import process_start, raw_stat
from apportion.executors.local.spare_pool import (
    FACTORY_ID, HANDED, ORPHAN_WAIT_S, OWNER_CHECK_S, fifo_path, owner_path, read_record, ready_path, remove_files,
    spares_dir, write_record,
)


def await_assignment(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """In a spare: import, wait, take the attempt; the wrapper's arguments and the spare's own environment.

    In the factory (``--spare FACTORY_ID``), returns only in the spares it forks. Exits when it has
    had no live owner for its orphan wait, or its state directory is gone."""
    options = dict(zip(argv[::2], argv[1::2]))
    state_dir, spare_id = Path(options["--state-dir"]), options["--spare"]
    orphan_wait_s = float(options.get("--orphan-wait-s", ORPHAN_WAIT_S))
    # blocked since the spare started (SparePool._spawn) until its record is read, so that the wait below
    # is woken by it; caught for the wrapper's whole life after that, for one that comes late
    signal.signal(HANDED, _woken)
    signal.pthread_sigmask(signal.SIG_BLOCK, {HANDED})
    server = int(options.get("--server-pid", "0"))
    owner = _OwnerWatch(state_dir, spare_id, (server, process_start(server) if os.getppid() == server else None),
                        orphan_wait_s)
    spare_env = dict(os.environ)
    if sys.path and sys.path[0] in (os.getcwd(), ""):  # `-m` put this directory first; a job's own goes there
        del sys.path[0]
    why = warm_start.preload()
    if spare_id == FACTORY_ID:
        if why:
            print(f"apportion: no spare factory: {why}; spares start as processes of their own", flush=True)
            remove_files(state_dir, spare_id)
            sys.exit(0)
        spare_id, owner = _run_factory(state_dir, owner)  # from here on, a fork of the factory
    elif why:
        print(f"apportion: warm start off: {why}; the attempt starts cold", flush=True)
    _write_ready(state_dir, spare_id)
    while (record := read_record(state_dir, spare_id)) is None:
        owner.check()
        signal.sigtimedwait({HANDED}, OWNER_CHECK_S)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {HANDED})
    _take_files(record["log"], spares_dir(state_dir) / f"{spare_id}.log")
    os.chdir(record["cwd"])  # its environment stays the spare's: the job's is in the --env-file of its arguments
    return list(record["argv"]), spare_env


def _write_ready(state_dir: Path, spare_id: str) -> None:
    """Say that this spare's imports are done, and which process it is (``read_ready``)."""
    write_record(ready_path(state_dir, spare_id), {"pid": os.getpid(), "start": process_start(os.getpid())})


class _OwnerWatch:
    """A waiting spare's (or the factory's) server: the one that started it, or the one named in its owner file."""

    def __init__(self, state_dir: Path, spare_id: str, owner: tuple[int, int | None], orphan_wait_s: float) -> None:
        self.state_dir, self.spare_id, self.owner, self.orphan_wait_s = state_dir, spare_id, owner, orphan_wait_s
        self.seen = time.monotonic()

    def check(self) -> None:
        """Exit when there has been no live owner for the orphan wait, or the state directory is gone."""
        try:
            adopted = json.loads(owner_path(self.state_dir, self.spare_id).read_text(encoding="utf-8"))
            self.owner = (int(adopted["pid"]), int(adopted["start"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        now = time.monotonic()
        if self.owner[1] is not None and process_start(self.owner[0]) == self.owner[1]:
            self.seen = now
        elif now - self.seen >= self.orphan_wait_s or not spares_dir(self.state_dir).is_dir():
            remove_files(self.state_dir, self.spare_id)
            sys.exit(0)


def _run_factory(state_dir: Path, owner: _OwnerWatch) -> tuple[str, _OwnerWatch]:
    """The factory's loop: fork a spare for each request on its pipe. Returns only in such a fork:
    its ID and its owner (the server that asked)."""
    import select

    fifo = fifo_path(state_dir)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    requests = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)  # read and write: never an end of file
    _write_ready(state_dir, FACTORY_ID)
    pending = b""
    while True:
        owner.check()
        _reap_forks()
        if not select.select([requests], [], [], OWNER_CHECK_S)[0]:
            continue
        pending += os.read(requests, 4096)
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                spare_id, pid, start = line.decode("ascii").split()
                asked_by = (int(pid), int(start))
            except ValueError:
                continue
            if not (spare_id.isalnum() and len(spare_id) == len(FACTORY_ID)) or spare_id == FACTORY_ID:
                continue
            why = warm_start.unfit()
            if why:
                print(f"apportion: the spare factory stops: {why}", flush=True)
                remove_files(state_dir, FACTORY_ID)
                sys.exit(0)
            sys.stdout.flush()
            if os.fork() == 0:
                os.close(requests)
                os.setsid()
                _become_spare(state_dir, spare_id)
                return spare_id, _OwnerWatch(state_dir, spare_id, asked_by, owner.orphan_wait_s)


def _reap_forks() -> None:
    """Reap the forks that have ended (their CPU time then counts in the factory's, as a parent's should)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_spare(state_dir: Path, spare_id: str) -> None:
    """In a fork of the factory: its own log, and its own ID in its command line (how ``scan`` finds it)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    fd = os.open(spares_dir(state_dir) / f"{spare_id}.log", flags, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    if not _rename_argument(FACTORY_ID, spare_id):
        print("apportion: a forked spare cannot name itself in its command line; it exits", flush=True)
        os._exit(1)


def _rename_argument(old: str, new: str) -> bool:
    """Overwrite argument ``old`` of this process's command line with ``new`` (as long) in place, through
    /proc/self/mem; whether /proc/self/cmdline now shows it."""
    fields = raw_stat(os.getpid())
    try:
        begin, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49 of stat)
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(begin)
            at = memory.read(end - begin).find(b"\0" + old.encode() + b"\0")
            if at < 0 or len(new) != len(old):
                return False
            memory.seek(begin + at + 1)
            memory.write(new.encode())
        with open("/proc/self/cmdline", "rb") as handle:
            return new.encode() in handle.read().split(b"\0")
    except (OSError, ValueError, TypeError, IndexError):
        return False


def _woken(signum, frame) -> None:
    """``HANDED`` outside the wait: nothing to do (a forked job gets the default back, warm_start.Launch)."""


def _take_files(log: str, own_log: Path) -> None:
    """Standard output and error to the attempt's log (after what the spare printed), input from /dev/null."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    fd = os.open(log, flags, 0o600)
    try:
        before = own_log.read_bytes()
    except OSError:
        before = b""
    if before:
        os.write(fd, before)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    own_log.unlink(missing_ok=True)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
