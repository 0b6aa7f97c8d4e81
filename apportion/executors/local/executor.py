"""Run attempts as local process groups; stop them with SIGTERM, then SIGKILL; find them again.

Each attempt is ``python -m apportion.executors.local.wrapper ... -- COMMAND`` started with
``start_new_session=True``: the wrapper leads a new process group that the job's processes
share, so one ``killpg`` reaches all of them. Its stdout and stderr (the job's too) go to
``STATE_DIR/jobs/ID/attempt-N.log``; the wrapper writes the exit code to
``attempt-N.exit``. The wrapper runs in the server's own environment
(``warm_start.spare_environment``), never the job's: the job's environment goes to ``attempt-N.env``
(owner-only, the server's), which the wrapper reads and removes before it starts the job with
it (wrapper.py). Nothing ties an attempt to the server's life: a server that dies and starts
again finds its attempts by their command lines (``scan``) and adopts them, checking the
process start time so that a reused PID is never mistaken for an attempt.

A wrapper that dies (``kill -9``) leaves the job's processes running without a supervisor.
The executor that started it is the subreaper of its attempts, so those processes become its
own children: it supervises them in the wrapper's place (orphans.py), reaps them, records
their exit code and kills what is left of the group, and the job keeps its work. Where that
is not possible (no subreaper on this system, or a wrapper started by an earlier server), the
executor kills what is left of the attempt's process group as soon as it sees the wrapper
gone, so that an attempt never outlives its record and two never run at once.

With ``spares``, a Python job's attempt is handed to a wrapper started ahead of time with torch
imported (spare_pool.py), which forks the job instead of exec'ing Python (warm_start.py); ``scan`` finds
such a wrapper by the ``--spare ID`` in its command line and its attempt in ``STATE_DIR/spares/ID.json``.
A spare forked by the spare factory, or adopted from an earlier server, is not this process's
child: it is followed through ``/proc`` (``Watched``), and its job is still supervised here when
it dies, as long as the factory was started by this server (this process is then its subreaper).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from apportion.executors.local import warm_start
from apportion.executors.base import Attempt, Exit
from apportion.executors.local.cores import CpuQuota, set_affinity
from apportion.executors.local.group_kill import signal_group
from apportion.executors.local.orphans import Orphaned, orphaned_command
from apportion.executors.local.procfs import group_members, process_start, stat_fields, still_runs
from apportion.executors.local.spare_pool import ORPHAN_WAIT_S, SparePool, read_record, remove_files, spare_options
from apportion.executors.local.wrapper import become_subreaper, write_env_file, write_exit
from apportion.executors.local.wrapper_command import MARKER, options_start

EXEC_WAIT_S = 1.0  # how long a scan waits for a process group leader's exec to finish
PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (no command line, ever)


_stat = stat_fields  # the fields of /proc/PID/stat after the command name, None when gone or a zombie


def _cmdline(pid: int) -> list[str] | None:
    """The argument vector of process ``pid`` (empty while an exec is still under way), or None when gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return raw.decode("utf-8", "replace").split("\0") if raw else []


def tail(path: Path, lines: int = 20, max_bytes: int = 16384) -> str:
    """The last ``lines`` lines of a file (empty when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").rstrip("\n")
    return "\n".join(text.splitlines()[-lines:])


def kill_leftovers(pgid: int) -> None:
    """SIGKILL the processes left in process group ``pgid`` after its leader (a wrapper) ended.

    Only a live process can hold a group's number, and a new process never gets a number that
    a group still uses: while any member is alive, the group is still the attempt's.
    """
    if group_members(pgid):
        signal_group(pgid)


class Watched:
    """A wrapper that is not this process's child (a spare forked by the factory, or one an earlier
    server started): followed through ``/proc``; its exit status is known only from its exit file."""

    UNKNOWN = -1000  # what ``poll`` gives once it has ended: not an exit code

    def __init__(self, pid: int, proc_start: int | None) -> None:
        self.pid, self.proc_start = pid, proc_start

    def poll(self) -> int | None:
        return None if still_runs(self.pid, self.proc_start) else self.UNKNOWN


def _running(wrapper: subprocess.Popen | Watched) -> bool:
    """Whether an attempt's wrapper still runs (a zombie reads as ended: it is reaped by ``poll``)."""
    if isinstance(wrapper, Watched):
        return wrapper.poll() is None
    return stat_fields(wrapper.pid) is not None


class LocalExecutor:
    """The ``Executor`` of this machine: each attempt a process group, found again through ``/proc``."""

    def __init__(self, state_dir: str | Path, python: str = sys.executable, spares: int = 0,
                 orphan_wait_s: float = ORPHAN_WAIT_S) -> None:
        """``spares``: how many warm wrappers (torch imported, waiting for an attempt) to keep ready
        for jobs that are a Python script or module (spare_pool.py, warm_start.py); 0: every start is cold.
        ``orphan_wait_s``: how long a waiting spare outlives this server, for the next one to adopt."""
        self.state_dir = Path(os.path.realpath(state_dir))
        self.python = python
        self.wrapper_env = warm_start.spare_environment(dict(os.environ))  # a wrapper's own: never a job's
        self._pool = SparePool(self.state_dir, python, spares, orphan_wait_s) if spares else None
        self._spare_of: dict[int, str] = {}  # job -> the spare ID of its attempt's wrapper (its record's name)
        self._scanned_spares: dict[int, str] = {}  # pid -> spare ID, of assigned spares found by scan
        self._children: dict[int, tuple[Attempt, subprocess.Popen | Watched, float]] = {}  # job -> attempt, wrapper, start time
        self._adopted: dict[int, Attempt] = {}
        self._orphans: dict[int, Orphaned] = {}  # attempts whose wrapper died, supervised here
        self._subreaper: bool | None = None  # set when the first attempt starts
        self._quota: CpuQuota | None = None  # attempts' CPU quotas, found the first time cores are set

    # files -------------------------------------------------------------------------------

    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(job_id)

    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.job_dir(job_id) / f"attempt-{attempt}.log"

    def exit_path(self, job_id: int, attempt: int) -> Path:
        return self.job_dir(job_id) / f"attempt-{attempt}.exit"

    def env_path(self, job_id: int, attempt: int) -> Path:
        """The job's environment, for its wrapper to read (and remove) before it starts the job."""
        return self.job_dir(job_id) / f"attempt-{attempt}.env"

    def pid_path(self, job_id: int, attempt: int) -> Path:
        """Where the wrapper writes the pid of the command it started."""
        return self.job_dir(job_id) / f"attempt-{attempt}.pid"

    def exit_record(self, job_id: int, attempt: int) -> int | None:
        try:
            return int(json.loads(self.exit_path(job_id, attempt).read_text())["code"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def tail(self, job_id: int, attempt: int, lines: int = 20) -> str:
        return tail(self.log_path(job_id, attempt), lines)

    def capacity(self) -> None:
        """This machine's slots are the server's, all of them, always."""
        return None

    def room(self) -> None:
        """This machine is the server's own node: its cores and memory are ``ServeConfig.node``'s."""
        return None

    def slots_per_node(self) -> None:
        """This machine is one node: all of a type's slots are on it."""
        return None

    def refusal(self, gpu_types: tuple[str, ...], gpus: int, cpus: int | None, memory_gb: float | None) -> None:
        """This machine is the server's own node: the server checks a job's cores and memory against it."""
        return None

    # cores -------------------------------------------------------------------------------

    def set_cores(self, job_id: int, cpus: tuple[int, ...], share: float) -> bool:
        """Hold the job's attempt to cores ``cpus`` (affinity of all its threads, live) and, where a
        cgroup allows, to ``share`` cores' time; False when it has no attempt here."""
        attempt = self.tracked().get(job_id)
        if attempt is None or attempt.pid is None or not self.is_alive(job_id):
            return False
        set_affinity(attempt.pid, tuple(cpus))
        if self._quota is None:
            self._quota = CpuQuota(self.state_dir)
        self._quota.set(job_id, attempt.pid, share)
        return True

    @property
    def core_enforcement(self) -> str:
        """How a share of cores is held: affinity, and a CPU quota where a cgroup is writable."""
        if self._quota is None:
            self._quota = CpuQuota(self.state_dir)
        return "affinity + " + self._quota.how if self._quota.how else "affinity only (no writable cgroup for a CPU quota)"

    # processes ---------------------------------------------------------------------------

    def start(self, job_id: int, attempt: int, command: str | list[str], env: dict[str, str],
              workdir: str | None, slots: tuple[str, ...], *, run_as=None, replicas: int | None = None,
              cold: bool = False, cpus: int | None = None, memory_gb: float | None = None) -> Attempt:
        """Start one attempt in its own process group; OSError if it cannot be started.

        ``env`` is the job's processes' alone: the wrapper gets it in ``attempt-N.env``, not in its
        own environment. With ``run_as`` the wrapper stays this process's user and starts the
        command as that account; with ``replicas`` it starts the command that many times, as
        torch.distributed's ranks. A Python job starts warm in a spare wrapper when one is
        waiting, unless ``cold``. ``cpus`` and ``memory_gb`` reserve nothing here: the server divides
        this machine's cores among its jobs (``set_cores``).
        """
        if self._subreaper is None:  # a wrapper's orphans become this process's children
            self._subreaper = become_subreaper()
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.exit_path(job_id, attempt).unlink(missing_ok=True)
        self.pid_path(job_id, attempt).unlink(missing_ok=True)
        spare = None if cold or self._pool is None else self._pool.take(
            command, env, workdir or str(directory), run_as.argument() if run_as is not None else None)
        if spare is not None and isinstance(command, str):  # a plain `python …` line: no shell needed
            command = warm_start.python_command(command)
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        env_path = self.env_path(job_id, attempt)
        write_env_file(env_path, env)
        wrapper = [
            self.python, "-m", MARKER, "--state-dir", str(self.state_dir), "--job", str(job_id),
            "--attempt", str(attempt), "--slots", ",".join(slots) or "-",
            "--exit-file", str(self.exit_path(job_id, attempt)), "--pid-file", str(self.pid_path(job_id, attempt)),
            "--env-file", str(env_path), "--workdir", workdir or str(directory),
            *(["--run-as", run_as.argument()] if run_as is not None else []),
            *(["--replicas", str(int(replicas))] if replicas is not None else []),
            "--", *argv,
        ]
        if spare is not None:
            try:
                self._pool.hand(spare, {"job": job_id, "attempt": attempt, "slots": list(slots), "argv": wrapper[3:],
                                        "log": str(self.log_path(job_id, attempt)), "cwd": str(directory)})
                self._spare_of[job_id] = spare.spare_id
            except OSError:
                spare = None  # it died meanwhile: a cold start instead
            self._pool.refill()
        if spare is not None:  # forked by the spare factory or adopted from an earlier server: not our child
            process = spare.process or Watched(spare.pid, spare.proc_start)
        else:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            try:
                with os.fdopen(os.open(self.log_path(job_id, attempt), flags, 0o600), "ab") as log:  # owner-only
                    process = subprocess.Popen(
                        wrapper, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.wrapper_env,
                        cwd=str(directory), start_new_session=True, close_fds=True,
                    )
            except OSError:
                env_path.unlink(missing_ok=True)
                raise
        started = process.proc_start if isinstance(process, Watched) else process_start(process.pid)
        handle = Attempt(job_id, attempt, process.pid, started, tuple(slots), warm=spare is not None)
        self._children[job_id] = (handle, process, time.time())
        return handle

    def scan(self, exec_wait_s: float = EXEC_WAIT_S) -> list[Attempt]:
        """Attempts of this state directory that are alive on this machine, found by command line.

        Only a process group leader can be an attempt: the wrapper leads its own group, and a
        child it has forked but not yet exec'd shows the wrapper's command line under another
        PID. A leader whose command line is still empty is in the middle of its exec (the
        kernel fills it in last); it is read again for up to ``exec_wait_s`` seconds.
        """
        found, pending = [], []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = _stat(pid)
            if fields is None or int(fields[2]) != pid or int(fields[6]) & PF_KTHREAD:
                continue
            argv = _cmdline(pid)
            if argv == []:
                pending.append(pid)
            elif argv is not None:
                found.append((pid, argv))
        deadline = time.monotonic() + exec_wait_s
        while pending:
            still = []
            for pid in pending:
                argv = _cmdline(pid)
                if argv == []:
                    still.append(pid)
                elif argv is not None:
                    found.append((pid, argv))
            pending = still
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.002)
        attempts = (self._attempt(pid, argv) for pid, argv in found)
        return sorted((a for a in attempts if a is not None), key=lambda a: a.pid)

    def _attempt(self, pid: int, argv: list[str]) -> Attempt | None:
        """The attempt that a wrapper's command line describes, or None when it is no wrapper of ours."""
        spare = spare_options(argv)
        if spare is not None:  # a spare wrapper: its attempt is in its record (none while it waits)
            record = read_record(self.state_dir, spare["--spare"]) if spare.get("--state-dir") == str(self.state_dir) else None
            started = process_start(pid)
            try:
                job_id, attempt, slots = int(record["job"]), int(record["attempt"]), tuple(map(str, record["slots"]))
            except (TypeError, KeyError, ValueError):
                return None
            if started is None:
                return None
            self._scanned_spares[pid] = spare["--spare"]
            return Attempt(job_id, attempt, pid, started, slots)
        begin = options_start(argv)
        if begin is None or "--" not in argv:
            return None
        options = argv[begin: argv.index("--")]
        values = dict(zip(options[::2], options[1::2]))
        if values.get("--state-dir") != str(self.state_dir):
            return None
        started = process_start(pid)
        if started is None:
            return None
        try:
            job_id, attempt = int(values["--job"]), int(values["--attempt"])
        except (KeyError, ValueError):
            return None
        slots = tuple(s for s in values.get("--slots", "").split(",") if s and s != "-")
        return Attempt(job_id, attempt, pid, started, slots)

    def adopt(self, attempt: Attempt) -> bool:
        """Track an attempt started by an earlier server; False when it is no longer alive."""
        started = process_start(attempt.pid)
        if started is None or (attempt.proc_start is not None and started != attempt.proc_start):
            return False
        self._adopted[attempt.job_id] = Attempt(attempt.job_id, attempt.attempt, attempt.pid, started, attempt.slots)
        if attempt.pid in self._scanned_spares:
            self._spare_of[attempt.job_id] = self._scanned_spares[attempt.pid]
        return True

    def tracked(self) -> dict[int, Attempt]:
        out = {job: a for job, a in self._adopted.items()}
        out.update({job: o.attempt for job, o in self._orphans.items()})
        out.update({job: a for job, (a, _, _) in self._children.items()})
        return out

    def is_alive(self, job_id: int) -> bool:
        if job_id in self._orphans:  # alive until poll() has reported its end
            return True
        if job_id in self._children:  # not Popen.poll(): the wrapper is reaped only by poll() below
            wrapper = self._children[job_id][1]
            return _running(wrapper) or bool(group_members(wrapper.pid))
        attempt = self._adopted.get(job_id)
        return attempt is not None and process_start(attempt.pid) == attempt.proc_start

    def terminate(self, job_id: int) -> bool:
        """SIGTERM to the attempt's whole process group, then SIGCONT: a stopped process (``kill -STOP``,
        a hung job) gets its SIGTERM only once it runs again, and may then still checkpoint."""
        sent = self._signal(job_id, signal.SIGTERM)
        if sent:
            self._signal(job_id, signal.SIGCONT)
        return sent

    def kill(self, job_id: int) -> bool:
        """SIGKILL to the attempt's whole process group."""
        return self._signal(job_id, signal.SIGKILL)

    def kill_attempt(self, attempt: Attempt) -> None:
        """SIGKILL an attempt this server does not track (a stray), after checking it is that process;
        if its wrapper is gone, SIGKILL what is left of its process group."""
        if attempt.pid is None:  # recorded by an executor without processes here: nothing of it runs on this machine
            return
        started = process_start(attempt.pid)
        if started is None:
            kill_leftovers(attempt.pid)
        elif started == attempt.proc_start:
            signal_group(attempt.pid)

    def _signal(self, job_id: int, sig: int) -> bool:
        attempt = self.tracked().get(job_id)
        if attempt is None or not self.is_alive(job_id):
            return False
        return signal_group(attempt.pid, sig)

    def close(self) -> None:
        """Kill the waiting spares; attempts go on running (a server started later adopts them). The
        cgroups of attempts that ended are removed (their last processes may take a moment to leave)."""
        if self._pool is not None:
            self._pool.close()
        deadline = time.monotonic() + 3.0
        while self._quota is not None and self._quota.leftover and time.monotonic() < deadline:
            self._quota.sweep()
            time.sleep(0.05)

    def poll(self) -> list[Exit]:
        """Attempts that have ended since the last call, with their exit codes (and spares kept ready)."""
        if self._pool is not None:
            self._pool.refill()
        ended = self._ended()
        if self._quota is not None and (ended or self._quota.leftover):
            for exit_ in ended:
                self._quota.remove(exit_.job_id)
            self._quota.sweep()
        for exit_ in ended:
            self.env_path(exit_.job_id, exit_.attempt).unlink(missing_ok=True)  # a wrapper that died before reading it
            spare_id = self._spare_of.pop(exit_.job_id, None)
            if spare_id is not None:
                remove_files(self.state_dir, spare_id)
        return ended

    def _ended(self) -> list[Exit]:
        ended = []
        for job_id, (attempt, process, started) in list(self._children.items()):
            if _running(process):
                continue
            if self._subreaper and self.exit_record(job_id, attempt.attempt) is None:
                command = orphaned_command(self.pid_path(job_id, attempt.attempt), process.pid)
                if command is not None:  # the wrapper died before its job: supervise the job in its place
                    self._orphans[job_id] = Orphaned(attempt, command, started)
                    process.poll()  # the group keeps its number while the job's processes live
                    del self._children[job_id]
                    continue
            kill_leftovers(process.pid)  # before reaping: its zombie keeps the group's number ours
            returncode = process.poll()
            if returncode is None:
                continue
            del self._children[job_id]
            code = self.exit_record(job_id, attempt.attempt)
            if code is None and returncode >= 0:  # the wrapper itself failed before the job ran
                code = returncode
            ended.append(Exit(job_id, attempt.attempt, code))
        for job_id, attempt in list(self._adopted.items()):
            if process_start(attempt.pid) == attempt.proc_start:
                continue
            if process_start(attempt.pid) is None:  # not reused by another process: any group left is ours
                kill_leftovers(attempt.pid)
            del self._adopted[job_id]
            ended.append(Exit(job_id, attempt.attempt, self.exit_record(job_id, attempt.attempt)))
        for job_id, orphan in list(self._orphans.items()):
            code = orphan.reap()
            if code is None:
                continue
            kill_leftovers(orphan.attempt.pid)
            del self._orphans[job_id]
            try:  # as the wrapper would have: a server started later reads it
                write_exit(str(self.exit_path(job_id, orphan.attempt.attempt)), code, orphan.started)
            except OSError:
                pass
            ended.append(Exit(job_id, orphan.attempt.attempt, code))
        return ended
