"""Spare wrappers: started ahead of any job, imports done, waiting for an attempt (warm_start.py).

A spare is ``python -m apportion.executors.local.wrapper --state-dir S --spare ID --server-pid P
--stamp C --orphan-wait-s W``, the leader of its own process group like any wrapper. It imports
torch and the rest (``warm_start.preload``), then waits for a signal (``HANDED``) with its attempt.

To hand it an attempt, the executor writes the attempt's *record* ``STATE_DIR/spares/ID.json``
(job, attempt, slots, the wrapper's full arguments, its log and working directory; owner-only),
then sends ``HANDED``. The spare reads the record, points its standard output and error at the
attempt's log, moves to the attempt's directory, and from then on *is* the wrapper those
arguments describe: it reads the job's environment from their ``--env-file`` as a cold wrapper
does, never takes it into its own, and forks the job's process instead of exec'ing Python when
it can (the fork takes that environment once it is the job's account, warm_start.py).
Its command line in ``/proc`` still says ``--spare ID``: a server started later finds the
record by that ID and adopts the attempt as it would any wrapper's. The record and the spare's
own log are removed when the attempt has ended. An attempt is the spare's from the moment its
record is written, even while it is still importing: it survives the server.

The first spares are processes of their own; so is the *factory*, started when they have done
their imports: a spare with the ID ``FACTORY_ID`` that, once its own are done, forks every later
spare on request (a line on its pipe ``STATE_DIR/spares/FACTORY_ID.fifo``): milliseconds and
pages shared copy-on-write, where a spare of its own spends 2.5 CPU-seconds importing torch. A fork starts its own session,
writes its ID over the factory's in its command line (through ``/proc/self/mem``, so that
``scan`` finds it as it finds any spare) and its pid in ``ID.ready``; the factory reaps it.

A spare without an attempt is no job (``scan`` does not report it) and outlives its server too:
its imports cost seconds of CPU, and a server killed and started again at once would otherwise
pay them again for every spare. It watches its *owner* once a second (the server that started
it, or the one named in ``ID.owner``, which a later server writes when it adopts it) and exits
when it has had no live owner for ``W`` seconds, or when its state directory is gone. A server
adopts the waiting spares (and the factory) it finds only when they run its interpreter, its
environment and its code (``C``, a stamp of the package's files); it kills the others. A
server that stops cleanly kills its waiting spares and the factory (``SparePool.close``).

This module is the server's side (the pool) and the files both sides share; what runs in a
spare, the wait and the factory's loop, is ``spare_process.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from apportion.executors.local import as_account, warm_start
from apportion.executors.local.group_kill import signal_group
from apportion.executors.local.procfs import process_start, stat_fields, still_runs
from apportion.executors.local.wrapper_command import MARKER, options_start

HANDED = signal.SIGUSR2  # sent once, after a spare's record is written
MAX_SPARES = 8
MAX_FAILURES = 3  # spares that died while waiting before the pool stops starting them (every start cold)
ORPHAN_WAIT_S = 60.0  # how long a waiting spare waits for a new server after its own is gone
OWNER_CHECK_S = 1.0
FACTORY_ID = "0" * 16  # the spare that forks the others (an ID token_hex never gives in practice)
FORK_WAIT_S = 0.5  # how long a start waits for a spare being forked when none is ready
FORK_TIMEOUT_S = 5.0  # a fork not ready by then never will be (it takes milliseconds)


def spares_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "spares"


def record_path(state_dir: Path, spare_id: str) -> Path:
    return spares_dir(state_dir) / f"{spare_id}.json"


def owner_path(state_dir: Path, spare_id: str) -> Path:
    return spares_dir(state_dir) / f"{spare_id}.owner"


def ready_path(state_dir: Path, spare_id: str) -> Path:
    """Written by a spare when its imports are done."""
    return spares_dir(state_dir) / f"{spare_id}.ready"


def fifo_path(state_dir: Path) -> Path:
    """The factory's requests: one line a spare to fork."""
    return spares_dir(state_dir) / f"{FACTORY_ID}.fifo"


def read_ready(state_dir: Path, spare_id: str) -> tuple[int, int] | None:
    """The pid and start time a spare wrote when its imports were done (None: not yet)."""
    try:
        ready = json.loads(ready_path(state_dir, spare_id).read_text(encoding="utf-8"))
        return int(ready["pid"]), int(ready["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_record(state_dir: Path, spare_id: str) -> dict | None:
    """The attempt handed to spare ``spare_id`` (None: none, or not readable)."""
    if not spare_id.isalnum():
        return None
    try:
        record = json.loads(record_path(state_dir, spare_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(path: Path, record: dict) -> None:
    """Write ``record`` atomically, readable by its owner only."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(tmp, path)


def remove_files(state_dir: Path, spare_id: str) -> None:
    for suffix in (".json", ".log", ".json.tmp", ".owner", ".owner.tmp", ".ready", ".ready.tmp", ".fifo"):
        (spares_dir(state_dir) / f"{spare_id}{suffix}").unlink(missing_ok=True)


def code_stamp() -> str:
    """A stamp of the apportion package's files as installed now: a spare started from other code is not adopted."""
    root = Path(__file__).resolve().parents[2]  # apportion/
    digest = hashlib.sha256()
    for directory, _, names in sorted(os.walk(root)):
        for name in sorted(n for n in names if n.endswith(".py")):
            try:
                info = os.stat(os.path.join(directory, name))
            except OSError:
                continue
            digest.update(f"{directory}/{name}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


@dataclass
class Spare:
    """A waiting spare: started by this server (``process``), forked by the factory (its pid known once
    it is ready), or adopted from an earlier server."""
    spare_id: str
    pid: int | None
    proc_start: int | None
    process: subprocess.Popen | None = None
    requested: float | None = None  # when the factory was asked to fork it

    def resolve(self, state_dir: Path) -> bool:
        """Whether its pid is known (a fork's is read from its ready file)."""
        if self.pid is None and (ready := read_ready(state_dir, self.spare_id)) is not None:
            self.pid, self.proc_start = ready
        return self.pid is not None

    def alive(self, state_dir: Path, factory_alive: bool = False) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if not self.resolve(state_dir):  # still being forked
            return factory_alive and time.monotonic() - (self.requested or 0.0) < FORK_TIMEOUT_S
        return still_runs(self.pid, self.proc_start)  # a fork whose factory died first is reaped here

    def kill(self, state_dir: Path) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        elif self.alive(state_dir) and self.pid is not None:
            signal_group(self.pid)
            for _ in range(100):  # ours to reap if this process is its subreaper and its parent is gone
                if not self.alive(state_dir):
                    break
                time.sleep(0.001)


class SparePool:
    """The executor's side: keeps ``count`` spares waiting, hands one an attempt.

    The first spares are started as processes of their own; so is the *factory*, once they have
    done their imports: a spare that, once its own are done, forks every later one (milliseconds
    and copy-on-write memory, not seconds of CPU and 300 MB). Without a live factory, spares are
    started as processes."""

    def __init__(self, state_dir: Path, python: str, count: int, orphan_wait_s: float = ORPHAN_WAIT_S) -> None:
        self.state_dir, self.python = Path(state_dir), python
        self.count = max(0, min(int(count), MAX_SPARES))
        self.orphan_wait_s = float(orphan_wait_s)
        self.env = warm_start.spare_environment(dict(os.environ))
        self.stamp = code_stamp() if self.count else ""
        self._idle: list[Spare] = []
        self._factory: Spare | None = None
        self._swept = False
        self._failures = 0
        self._factory_failures = 0  # factories that died: after MAX_FAILURES, none is started again
        self._fork_failures = 0  # forks asked for and never ready: after MAX_FAILURES, the factory is let go
        self.adopted = 0  # waiting spares (the factory included) taken over from an earlier server

    def refill(self) -> None:
        """Start spares until ``count`` are waiting (dead ones are forgotten); the first call adopts
        the waiting spares an earlier server left."""
        if self.count == 0:
            return
        if not self._swept:
            self._swept = True
            self._adopt_or_kill_waiting()
            self._sweep()
        factory_alive = self._factory_alive()
        for spare in [s for s in self._idle if not s.alive(self.state_dir, factory_alive)]:
            self._idle.remove(spare)
            spare.kill(self.state_dir)
            remove_files(self.state_dir, spare.spare_id)
            if spare.pid is None:  # its factory never forked it
                self._fork_failures += 1
            else:
                self._failures += 1
        if self._failures >= MAX_FAILURES:  # a spare cannot live here (its imports fail): cold starts only
            self.count = 0
            return
        if self._fork_failures >= MAX_FAILURES and self._factory is not None:  # forks fail: spares of their own
            self._factory.kill(self.state_dir)
            remove_files(self.state_dir, FACTORY_ID)
            self._factory, self._factory_failures, factory_alive = None, MAX_FAILURES, False
        while len(self._idle) < self.count:
            spare = None
            if factory_alive and self.is_ready(self._factory):
                try:
                    spare = self._fork()
                except OSError:
                    self._fork_failures += 1
            try:
                self._idle.append(spare or self._spawn())
            except OSError:
                break
        # the factory imports once the first spares have (three imports at once would slow the first jobs)
        if (self._factory is None and self._factory_failures < MAX_FAILURES
                and all(self.is_ready(spare) for spare in self._idle)):
            try:
                self._factory = self._spawn(FACTORY_ID)
            except OSError:
                self._factory_failures = MAX_FAILURES

    def _factory_alive(self) -> bool:
        if self._factory is not None and not self._factory.alive(self.state_dir):
            self._factory.kill(self.state_dir)
            remove_files(self.state_dir, FACTORY_ID)
            self._factory = None
            self._factory_failures += 1
        return self._factory is not None

    def close(self) -> None:
        """Kill the waiting spares and the factory (a server that stops cleanly leaves none behind)."""
        for spare in self._idle + ([self._factory] if self._factory is not None else []):
            spare.kill(self.state_dir)
            remove_files(self.state_dir, spare.spare_id)
        self._idle.clear()
        self._factory = None

    def _spawn(self, spare_id: str | None = None) -> Spare:
        """Start a spare (or the factory) as a process of its own."""
        directory = spares_dir(self.state_dir)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        spare_id = spare_id or secrets.token_hex(8)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        # started with HANDED blocked (a mask survives fork and exec): one sent before the spare's Python
        # has set its handler waits for it rather than killing it
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {HANDED})
        try:
            log = os.fdopen(os.open(directory / f"{spare_id}.log", flags, 0o600), "ab")
            with log:
                process = subprocess.Popen(
                    [self.python, "-m", MARKER, "--state-dir", str(self.state_dir),
                     "--spare", spare_id, "--server-pid", str(os.getpid()), "--stamp", self.stamp,
                     "--orphan-wait-s", repr(self.orphan_wait_s)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                    cwd=str(directory), start_new_session=True, close_fds=True,
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return Spare(spare_id, process.pid, process_start(process.pid), process)

    def _fork(self) -> Spare:
        """Ask the factory for a spare; its pid is known once it is ready (milliseconds)."""
        spare_id = secrets.token_hex(8)
        line = f"{spare_id} {os.getpid()} {process_start(os.getpid())}\n".encode()
        fd = os.open(fifo_path(self.state_dir), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.write(fd, line)  # shorter than PIPE_BUF: written whole or not at all
        finally:
            os.close(fd)
        return Spare(spare_id, None, None, requested=time.monotonic())

    def _adopt_or_kill_waiting(self) -> None:
        """Take over the waiting spares and the factory of an earlier server that match this one; kill the others."""
        me = (os.getpid(), process_start(os.getpid()))
        for pid, argv, options in live_spares(self.state_dir):
            spare_id = options["--spare"]
            if read_record(self.state_dir, spare_id) is not None:
                continue  # an attempt's wrapper: scan() and adopt() are for those
            spare = Spare(spare_id, pid, process_start(pid))
            room = self._factory is None if spare_id == FACTORY_ID else len(self._idle) < self.count
            if (room and argv[0] == self.python and options.get("--stamp") == self.stamp
                    and process_environment(pid) == self.env):
                try:  # it reads its new owner within a second
                    write_record(owner_path(self.state_dir, spare_id), {"pid": me[0], "start": me[1]})
                except OSError:
                    continue
                if spare_id == FACTORY_ID:
                    self._factory = spare
                else:
                    self._idle.append(spare)
                self.adopted += 1
            else:
                spare.kill(self.state_dir)
                remove_files(self.state_dir, spare_id)

    def _sweep(self) -> None:
        """Remove the files of spares that no longer run."""
        live = {options["--spare"] for _, _, options in live_spares(self.state_dir)}
        try:
            names = os.listdir(spares_dir(self.state_dir))
        except OSError:
            return
        for name in names:
            spare_id = name.split(".")[0]
            if spare_id not in live:
                (spares_dir(self.state_dir) / name).unlink(missing_ok=True)

    def take(self, command: str | list[str], env: dict[str, str], workdir: str | None,
             run_as: str | None = None) -> Spare | None:
        """A waiting spare for this command (None: it cannot start warm, or none is waiting).

        One done importing first; then one being forked, if it is ready within ``FORK_WAIT_S``;
        then one still importing (the job waits for the rest of its imports, as it would cold).
        ``run_as`` (``UID:GID:GROUPS``): the job's files are looked at as that account, never as root,
        whose answer (warm, or cold: the start event says which) would tell what lies where it may not look."""
        if self.count == 0:
            return None
        if run_as:
            try:
                refused = as_account.answer_as(as_account.Identity.parse(run_as), lambda: warm_start.refusal(
                    command, env, self.env, self.python, workdir) or "") or None
            except ValueError as err:
                refused = str(err)
        else:
            refused = warm_start.refusal(command, env, self.env, self.python, workdir)
        if refused is not None:
            return None
        deadline = time.monotonic() + FORK_WAIT_S
        while True:
            ready = [spare for spare in self.waiting() if spare.pid is not None and self.is_ready(spare)]
            if (chosen := self._first_alive(ready)) is not None:
                return chosen
            if any(spare.pid is None for spare in self._idle) and time.monotonic() < deadline:
                time.sleep(0.002)
                continue
            return self._first_alive([spare for spare in self._idle if spare.pid is not None])

    def _first_alive(self, spares: list[Spare]) -> Spare | None:
        """Take the first of ``spares`` still alive out of the pool (forgetting dead ones on the way)."""
        for spare in spares:
            self._idle.remove(spare)
            if spare.alive(self.state_dir):
                return spare
            remove_files(self.state_dir, spare.spare_id)
        return None

    def is_ready(self, spare: Spare) -> bool:
        """Whether ``spare`` has done its imports (a fork's are its factory's)."""
        return ready_path(self.state_dir, spare.spare_id).exists()

    def waiting(self) -> list[Spare]:
        """The spares waiting for an attempt now, those done importing first."""
        for spare in self._idle:
            spare.resolve(self.state_dir)
        return sorted(self._idle, key=lambda spare: not self.is_ready(spare))

    def hand(self, spare: Spare, record: dict) -> None:
        """Give ``spare`` its attempt; OSError when it is gone (its files are then removed)."""
        try:
            if not spare.alive(self.state_dir) or spare.pid is None:
                raise ProcessLookupError("it has exited")
            write_record(record_path(self.state_dir, spare.spare_id), record)
            os.kill(spare.pid, HANDED)
        except OSError as err:
            spare.kill(self.state_dir)
            remove_files(self.state_dir, spare.spare_id)
            raise OSError(f"the warm wrapper {spare.pid} is gone: {err}") from None


def live_spares(state_dir: Path) -> list[tuple[int, list[str], dict[str, str]]]:
    """``(pid, argv, options)`` of this state directory's spares that run now (waiting or assigned)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                argv = handle.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        options = spare_options(argv)
        if options is not None and options.get("--state-dir") == str(state_dir) and stat_fields(int(entry.name)):
            found.append((int(entry.name), argv, options))
    return found


def process_environment(pid: int) -> dict[str, str] | None:
    """The environment process ``pid`` was started with (None: not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().decode("utf-8", "surrogateescape").split("\0")
    except OSError:
        return None
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def spare_options(argv: list[str]) -> dict[str, str] | None:
    """The options of a spare's command line, or None when it is not a spare."""
    begin = options_start(argv)
    if begin is None or "--spare" not in argv:
        return None
    options = argv[begin:]
    values = dict(zip(options[::2], options[1::2]))
    return values if values.get("--spare", "").isalnum() else None
