"""Spare wrappers: started ahead of any job, imports done, waiting for an attempt (warm.py).

A spare is ``python -m apportion.executors.wrapper --state-dir S --spare ID --server-pid P
--stamp C --orphan-wait-s W``, the leader of its own process group like any wrapper. It imports
torch and the rest (``warm.preload``), then waits for a signal (``HANDED``) with its attempt.

To hand it an attempt, the executor writes the attempt's *record* ``STATE_DIR/spares/ID.json``
(job, attempt, slots, the wrapper's full arguments, the job's environment, its log and working
directory; owner-only), then sends ``HANDED``. The spare reads the record, points its standard
output and error at the attempt's log, moves to the attempt's directory, takes the job's
environment, rewrites the record without the environment, and from then on *is* the wrapper
those arguments describe (it forks the job's process instead of exec'ing Python when it can).
Its command line in ``/proc`` still says ``--spare ID``: a server started later finds the
record by that ID and adopts the attempt as it would any wrapper's. The record and the spare's
own log are removed when the attempt has ended. An attempt is the spare's from the moment its
record is written, even while it is still importing: it survives the server.

A spare without an attempt is no job (``scan`` does not report it) and outlives its server too:
its imports cost seconds of CPU, and a server killed and started again at once would otherwise
pay them again for every spare. It watches its *owner* once a second (the server that started
it, or the one named in ``ID.owner``, which a later server writes when it adopts it) and exits
when it has had no live owner for ``W`` seconds, or when its state directory is gone. A server
adopts the waiting spares it finds only when they run its interpreter, its environment and its
code (``C``, a stamp of the package's files); it kills the others. A server that stops
cleanly kills its waiting spares (``SparePool.close``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from apportion.executors import warm
from apportion.executors.procfs import process_start, stat_fields

HANDED = signal.SIGUSR2  # sent once, after a spare's record is written
MAX_SPARES = 8
MAX_FAILURES = 3  # spares that died while waiting before the pool stops starting them (every start cold)
ORPHAN_WAIT_S = 60.0  # how long a waiting spare waits for a new server after its own is gone
OWNER_CHECK_S = 1.0


def spares_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "spares"


def record_path(state_dir: Path, spare_id: str) -> Path:
    return spares_dir(state_dir) / f"{spare_id}.json"


def owner_path(state_dir: Path, spare_id: str) -> Path:
    return spares_dir(state_dir) / f"{spare_id}.owner"


def ready_path(state_dir: Path, spare_id: str) -> Path:
    """Written by a spare when its imports are done."""
    return spares_dir(state_dir) / f"{spare_id}.ready"


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
    for suffix in (".json", ".log", ".json.tmp", ".owner", ".owner.tmp", ".ready"):
        (spares_dir(state_dir) / f"{spare_id}{suffix}").unlink(missing_ok=True)


def code_stamp() -> str:
    """A stamp of the apportion package's files as installed now: a spare started from other code is not adopted."""
    root = Path(__file__).resolve().parents[1]
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
    """A waiting spare: a child of this server (``process``), or one adopted from an earlier server."""
    spare_id: str
    pid: int
    proc_start: int | None
    process: subprocess.Popen | None = None

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.proc_start is not None and process_start(self.pid) == self.proc_start

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        elif self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class SparePool:
    """The executor's side: keeps ``count`` spares waiting, hands one an attempt."""

    def __init__(self, state_dir: Path, python: str, count: int, orphan_wait_s: float = ORPHAN_WAIT_S) -> None:
        self.state_dir, self.python = Path(state_dir), python
        self.count = max(0, min(int(count), MAX_SPARES))
        self.orphan_wait_s = float(orphan_wait_s)
        self.env = warm.spare_environment(dict(os.environ))
        self.stamp = code_stamp() if self.count else ""
        self._idle: list[Spare] = []
        self._swept = False
        self._failures = 0
        self.adopted = 0  # waiting spares taken over from an earlier server

    def refill(self) -> None:
        """Start spares until ``count`` are waiting (dead ones are forgotten); the first call adopts
        the waiting spares an earlier server left."""
        if self.count == 0:
            return
        if not self._swept:
            self._swept = True
            self._adopt_or_kill_waiting()
            self._sweep()
        for spare in [s for s in self._idle if not s.alive()]:
            self._idle.remove(spare)
            remove_files(self.state_dir, spare.spare_id)
            self._failures += 1
        if self._failures >= MAX_FAILURES:  # a spare cannot live here (its imports fail): cold starts only
            self.count = 0
            return
        while len(self._idle) < self.count:
            try:
                self._idle.append(self._spawn())
            except OSError:
                break

    def close(self) -> None:
        """Kill the waiting spares (a server that stops cleanly leaves none behind)."""
        for spare in self._idle:
            spare.kill()
            remove_files(self.state_dir, spare.spare_id)
        self._idle.clear()

    def _spawn(self) -> Spare:
        directory = spares_dir(self.state_dir)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        spare_id = secrets.token_hex(8)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        # started with HANDED blocked (a mask survives fork and exec): one sent before the spare's Python
        # has set its handler waits for it rather than killing it
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {HANDED})
        try:
            log = os.fdopen(os.open(directory / f"{spare_id}.log", flags, 0o600), "ab")
            with log:
                process = subprocess.Popen(
                    [self.python, "-m", "apportion.executors.wrapper", "--state-dir", str(self.state_dir),
                     "--spare", spare_id, "--server-pid", str(os.getpid()), "--stamp", self.stamp,
                     "--orphan-wait-s", repr(self.orphan_wait_s)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                    cwd=str(directory), start_new_session=True, close_fds=True,
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return Spare(spare_id, process.pid, process_start(process.pid), process)

    def _adopt_or_kill_waiting(self) -> None:
        """Take over the waiting spares of an earlier server that match this one; kill the others."""
        me = (os.getpid(), process_start(os.getpid()))
        for pid, argv, options in live_spares(self.state_dir):
            spare_id = options["--spare"]
            if read_record(self.state_dir, spare_id) is not None:
                continue  # an attempt's wrapper: scan() and adopt() are for those
            started = process_start(pid)
            spare = Spare(spare_id, pid, started)
            if (len(self._idle) < self.count and argv[0] == self.python and options.get("--stamp") == self.stamp
                    and process_environment(pid) == self.env):
                try:  # it reads its new owner within a second
                    write_record(owner_path(self.state_dir, spare_id), {"pid": me[0], "start": me[1]})
                except OSError:
                    continue
                self._idle.append(spare)
                self.adopted += 1
            else:
                spare.kill()
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

    def take(self, command: str | list[str], env: dict[str, str], workdir: str | None) -> Spare | None:
        """A waiting spare for this command (None: it cannot start warm, or none is waiting)."""
        if self.count == 0 or warm.refusal(command, env, self.env, self.python, workdir) is not None:
            return None
        self._idle.sort(key=lambda spare: not self.is_ready(spare))  # one done importing first
        while self._idle:
            spare = self._idle.pop(0)
            if spare.alive():
                return spare
            remove_files(self.state_dir, spare.spare_id)
        return None

    def is_ready(self, spare: Spare) -> bool:
        """Whether ``spare`` has done its imports."""
        return ready_path(self.state_dir, spare.spare_id).exists()

    def waiting(self) -> list[Spare]:
        """The spares waiting for an attempt now, those done importing first."""
        return sorted(self._idle, key=lambda spare: not self.is_ready(spare))

    def hand(self, spare: Spare, record: dict) -> None:
        """Give ``spare`` its attempt; OSError when it is gone (its files are then removed)."""
        try:
            if not spare.alive():
                raise ProcessLookupError("it has exited")
            write_record(record_path(self.state_dir, spare.spare_id), record)
            os.kill(spare.pid, HANDED)
        except OSError as err:
            spare.kill()
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
    marker = "apportion.executors.wrapper"
    if marker not in argv or "--spare" not in argv:
        return None
    options = argv[argv.index(marker) + 1:]
    values = dict(zip(options[::2], options[1::2]))
    return values if values.get("--spare", "").isalnum() else None


# the spare's side -------------------------------------------------------------------------------------------

def await_assignment(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """In a spare: import, wait, take the attempt; the wrapper's arguments and the spare's own environment.

    Exits when it has had no live owner for its orphan wait, or its state directory is gone."""
    options = dict(zip(argv[::2], argv[1::2]))
    state_dir, spare_id = Path(options["--state-dir"]), options["--spare"]
    orphan_wait_s = float(options.get("--orphan-wait-s", ORPHAN_WAIT_S))
    # blocked since the spare started (SparePool._spawn) until its record is read, so that the wait below
    # is woken by it; caught for the wrapper's whole life after that, for one that comes late
    signal.signal(HANDED, _woken)
    signal.pthread_sigmask(signal.SIG_BLOCK, {HANDED})
    server = int(options.get("--server-pid", "0"))
    owner = (server, process_start(server) if os.getppid() == server else None)
    spare_env = dict(os.environ)
    if sys.path and sys.path[0] in (os.getcwd(), ""):  # `-m` put this directory first; a job's own goes there
        del sys.path[0]
    why = warm.preload()
    if why:
        print(f"apportion: warm start off: {why}; the attempt starts cold", flush=True)
    os.close(os.open(ready_path(state_dir, spare_id), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    owner_seen = time.monotonic()
    while (record := read_record(state_dir, spare_id)) is None:
        try:
            adopted = json.loads(owner_path(state_dir, spare_id).read_text(encoding="utf-8"))
            owner = (int(adopted["pid"]), int(adopted["start"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        now = time.monotonic()
        if owner[1] is not None and process_start(owner[0]) == owner[1]:
            owner_seen = now
        elif now - owner_seen >= orphan_wait_s or not spares_dir(state_dir).is_dir():
            remove_files(state_dir, spare_id)
            sys.exit(0)
        signal.sigtimedwait({HANDED}, OWNER_CHECK_S)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {HANDED})
    _take_files(record["log"], spares_dir(state_dir) / f"{spare_id}.log")
    os.chdir(record["cwd"])
    os.environ.clear()
    os.environ.update(record["env"])
    write_record(record_path(state_dir, spare_id), {k: v for k, v in record.items() if k != "env"})
    return list(record["argv"]), spare_env


def _woken(signum, frame) -> None:
    """``HANDED`` outside the wait: nothing to do (a forked job gets the default back, warm.Launch)."""


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
