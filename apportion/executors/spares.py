"""Spare wrappers: started ahead of any job, imports done, waiting for an attempt (warm.py).

A spare is ``python -m apportion.executors.wrapper --state-dir S --spare ID --server-pid P``,
the leader of its own process group like any wrapper. It imports torch and the rest
(``warm.preload``), then waits for one line on its standard input. Until it has an attempt it
dies with the server (``PR_SET_PDEATHSIG``: SIGUSR1 when the server's thread that started it
ends, and it exits unless its record exists by then; an end of file on its standard input
too) and is no job: ``scan`` does not report it. An attempt handed to a spare still importing
is its own from the moment its record is written: it survives the server.

To hand it an attempt, the executor writes the attempt's *record* ``STATE_DIR/spares/ID.json``
(job, attempt, slots, the wrapper's full arguments, the job's environment, its log and working
directory; owner-only), then writes ``go`` to the spare's standard input. The spare reads the
record, stops dying with the server, points its standard output and error at the attempt's log
and its standard input at /dev/null, moves to the attempt's directory, takes the job's
environment, rewrites the record without the environment, and from then on *is* the wrapper
those arguments describe (it forks the job's process instead of exec'ing Python when it can).
Its command line in ``/proc`` still says ``--spare ID``: a server started later finds the
record by that ID and adopts the attempt as it would any wrapper's. The record and the spare's
own log are removed when the attempt has ended.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from apportion.executors import warm

PR_SET_PDEATHSIG = 1
SERVER_GONE = signal.SIGUSR1  # what a waiting spare gets when the server ends
MAX_SPARES = 8
MAX_FAILURES = 3  # spares that died while waiting before the pool stops starting them (every start cold)


def spares_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "spares"


def record_path(state_dir: Path, spare_id: str) -> Path:
    return spares_dir(state_dir) / f"{spare_id}.json"


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
    for suffix in (".json", ".log", ".json.tmp"):
        (spares_dir(state_dir) / f"{spare_id}{suffix}").unlink(missing_ok=True)


@dataclass
class Spare:
    spare_id: str
    process: subprocess.Popen


class SparePool:
    """The executor's side: keeps ``count`` spares waiting, hands one an attempt."""

    def __init__(self, state_dir: Path, python: str, count: int) -> None:
        self.state_dir, self.python = Path(state_dir), python
        self.count = max(0, min(int(count), MAX_SPARES))
        self.env = warm.spare_environment(dict(os.environ))
        self._idle: list[Spare] = []
        self._swept = False
        self._failures = 0

    def refill(self) -> None:
        """Start spares until ``count`` are waiting (dead ones are reaped and forgotten)."""
        if self.count == 0:
            return
        if not self._swept:  # files of a server that died with spares assigned are the adopted attempts' own
            self._swept = True
            self._sweep()
        for spare in [s for s in self._idle if s.process.poll() is not None]:
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

    def _spawn(self) -> Spare:
        directory = spares_dir(self.state_dir)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        spare_id = secrets.token_hex(8)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        with os.fdopen(os.open(directory / f"{spare_id}.log", flags, 0o600), "ab") as log:
            process = subprocess.Popen(
                [self.python, "-m", "apportion.executors.wrapper", "--state-dir", str(self.state_dir),
                 "--spare", spare_id, "--server-pid", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=str(directory),
                start_new_session=True, close_fds=True,
            )
        return Spare(spare_id, process)

    def _sweep(self) -> None:
        """Remove the files of spares that no longer run."""
        live = set(live_spare_ids(self.state_dir))
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
        while self._idle:
            spare = self._idle.pop(0)
            if spare.process.poll() is None:
                return spare
            remove_files(self.state_dir, spare.spare_id)
        return None

    def hand(self, spare: Spare, record: dict) -> None:
        """Give ``spare`` its attempt; OSError when it is gone (its files are then removed)."""
        try:
            write_record(record_path(self.state_dir, spare.spare_id), record)
            spare.process.stdin.write(b"go\n")
            spare.process.stdin.close()
        except (OSError, ValueError) as err:
            spare.process.kill()
            spare.process.wait()
            remove_files(self.state_dir, spare.spare_id)
            raise OSError(f"the warm wrapper {spare.process.pid} is gone: {err}") from None


def live_spare_ids(state_dir: Path) -> list[str]:
    """The IDs of this state directory's spares that run now (waiting or assigned)."""
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
        if options is not None and options.get("--state-dir") == str(state_dir):
            found.append(options["--spare"])
    return found


def spare_options(argv: list[str]) -> dict[str, str] | None:
    """The options of a spare's command line, or None when it is not a spare."""
    marker = "apportion.executors.wrapper"
    if marker not in argv or "--spare" not in argv:
        return None
    options = argv[argv.index(marker) + 1:]
    values = dict(zip(options[::2], options[1::2]))
    return values if values.get("--spare", "").isalnum() else None


# the spare's side -------------------------------------------------------------------------------------------

def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def await_assignment(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """In a spare: import, wait, take the attempt; the wrapper's arguments and the spare's own environment.

    Exits when the server ends first (or closes the pipe without handing an attempt)."""
    options = dict(zip(argv[::2], argv[1::2]))
    server = int(options.get("--server-pid", "0"))
    state_dir, spare_id = Path(options["--state-dir"]), options["--spare"]

    def server_gone(signum, frame) -> None:
        if not record_path(state_dir, spare_id).exists():  # no attempt of its own: a spare no more
            os._exit(0)

    signal.signal(SERVER_GONE, server_gone)
    if not _prctl(PR_SET_PDEATHSIG, int(SERVER_GONE)):
        sys.exit(0)  # it could not die with the server
    if os.getppid() != server:  # the server is gone already
        server_gone(None, None)
    spare_env = dict(os.environ)
    if sys.path and sys.path[0] in (os.getcwd(), ""):  # `-m` put this directory first; a job's own goes there
        del sys.path[0]
    why = warm.preload()
    if why:
        print(f"apportion: warm start off: {why}; the attempt starts cold", flush=True)
    if sys.stdin.buffer.readline().strip() != b"go":
        sys.exit(0)
    record = read_record(state_dir, spare_id)
    if record is None:
        sys.exit(0)
    _prctl(PR_SET_PDEATHSIG, 0)  # from now on an attempt: it outlives the server
    signal.signal(SERVER_GONE, signal.SIG_DFL)
    _take_files(record["log"], spares_dir(state_dir) / f"{spare_id}.log")
    os.chdir(record["cwd"])
    os.environ.clear()
    os.environ.update(record["env"])
    write_record(record_path(state_dir, spare_id), {k: v for k, v in record.items() if k != "env"})
    return list(record["argv"]), spare_env


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
