"""The supervisor of one attempt: ``python -m apportion.executors.local.wrapper ... -- COMMAND``.

The server starts this as the leader of a new process group; it runs the job's command in
the same group, waits for it, and writes the exit code to ``--exit-file`` (atomically; on a full
disk it tries again, and failing that exits with the job's code as its own status). It
outlives the server, so a server killed with SIGKILL and started again can still learn how
an attempt ended (and with ``--pid-file`` it writes the command's pid, so that the executor can
take the job over should this process die first: orphans.py), and its command line (state directory, job, attempt, slots) lets the new
server find and re-adopt the attempts that are still running.

SIGTERM to the group reaches every process of the job (the training process checkpoints and
exits 75); the supervisor itself ignores it so that it can record the exit. A command given
as a shell line runs under ``/bin/sh -c``, and the shell dies of that SIGTERM at once while
the training process it started is still writing its checkpoint. So the supervisor is the
job's *subreaper* (``PR_SET_CHILD_SUBREAPER``): the shell's children become its own when the
shell dies, and when its command was ended by a stop signal (SIGTERM, SIGINT, SIGHUP) it
waits for those survivors and records the exit code of the first one to exit on its own
(75 after a checkpoint). The server's SIGKILL after its grace period still ends them all.

Once the job has exited, it kills whatever else is left in the group (stray data-loader
workers), itself last.

With ``--replicas N`` (an elastic job on this machine) it starts the command N times, as
torch.distributed's ranks on one node: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (loopback) and a free ``MASTER_PORT``, each rank one of
the attempt's ``CUDA_VISIBLE_DEVICES`` and its share of ``OMP_NUM_THREADS``. The ranks stop
together: a stop signal reaches all of them (they agree on the step to stop at,
apportion.runtime.group), and when one crashes the others are killed at once, so no replica
outlives its attempt. The exit code is the first crash's, else 75 if any rank was
preempted, else 0.

A *spare* (``--spare ID``, spare_pool.py) is this wrapper started before its attempt is known: it
imports torch first, then takes its arguments from the record the executor writes, and forks
the job's Python process instead of exec'ing one when it can (warm_start.py); everything else is as
above.

The job's environment is not this process's: the executor writes it to an owner-only file
(``--env-file``, JSON) that the wrapper reads and removes at once, and only the job's processes
get it, from their start (``Popen(env=...)``: after the switch to ``--run-as``'s account, at the
exec; a warm fork: after that switch, before any of the job's code). The wrapper itself runs in
the server's environment, so nothing a job file sets (``LD_PRELOAD``, ``PYTHONPATH``, ...) ever
runs with the wrapper's rights, which are root's under ``--run-as mapped``. Nor does the wrapper
look at the job's files as root: its ``workdir`` and script are checked by a child dropped to the
account (as_account.py), and the job's process enters the ``workdir`` only once it is the account.

With ``--parent PID`` (the Ray executor's replica, which has no process group of its own to
stop the job with) the attempt dies with that process: when it ends, SIGKILL goes to the
whole group, so a job never outlives the Ray worker that accounts for it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from apportion.executors.local import as_account, warm_start
from apportion.executors.local.group_kill import kill_the_others, signal_group
from apportion.executors.local.procfs import children, group_members

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
PARENT_GONE = signal.SIGUSR2  # what the kernel sends the wrapper when its --parent ends
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PREEMPTED = 75  # a job's exit code after a complete checkpoint (apportion.runtime.job)
EXIT_WRITE_TRIES = 3  # writing the exit record on a full disk: tries, this far apart
EXIT_WRITE_WAIT_S = 1.0
WARM_ENV: dict[str, str] | None = None  # in a spare wrapper: the environment its imports ran in (warm_start.py)
JOB_ENV: dict[str, str] | None = None  # the job's environment, from --env-file (None: none given, this process's own)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--key value`` options up to ``--``, then the command."""
    if "--" not in argv:
        raise SystemExit("usage: python -m apportion.executors.local.wrapper --state-dir S --job J --attempt N"
                         " --slots X --exit-file F --env-file E --workdir D -- COMMAND...")
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    values = {}
    for i in range(0, len(options) - 1, 2):
        values[options[i].lstrip("-")] = options[i + 1]
    return values, command


def write_env_file(path: str | os.PathLike, env: dict[str, str]) -> None:
    """Write a job's environment for its wrapper (``--env-file``): created afresh, never through a link,
    readable by its owner only (it holds the attempt's credential)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(env, handle)


def read_env_file(path: str) -> dict[str, str]:
    """The job's environment from ``--env-file``, which is removed once read; OSError or ValueError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as handle:
        env = json.load(handle)
    os.unlink(path)
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("not a JSON object of strings")
    return env


def job_environment() -> dict[str, str]:
    """What the job's processes start with: its own environment, else (no --env-file) this process's."""
    return dict(os.environ if JOB_ENV is None else JOB_ENV)


def _ignore(signum, frame) -> None:  # a handler, not SIG_IGN: children must not inherit "ignored"
    pass


def _account(run_as: str | None) -> dict:
    """Popen's arguments to start the command as ``--run-as UID:GID:GROUPS`` (none: as this process's user)."""
    if not run_as:
        return {}
    uid, gid, groups = run_as.split(":")
    return {"user": int(uid), "group": int(gid), "extra_groups": [int(g) for g in groups.split(",") if g]}


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux); False where that is not possible."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent: int) -> bool:
    """SIGKILL this process group when ``parent`` (this process's parent) ends (Linux); False where that is not possible."""
    def parent_gone(signum, frame) -> None:
        signal_group(0)

    signal.signal(PARENT_GONE, parent_gone)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(PARENT_GONE), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it ended before the death signal was armed
        signal_group(0)
    return True


def wait_for(child: int) -> int:
    """Reap children until ``child`` has exited; its exit code (negative: the signal that killed it)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def wait_for_survivors(code: int, subreaper: bool) -> int:
    """After the command was ended by a stop signal, wait for the processes it left running.

    They are the job's own (the training process under a shell line) and received the same
    signal: they are checkpointing. The exit code is that of the first of them to exit on its
    own, else the command's.
    """
    me = os.getpid()
    survivors = set(children(me)) if subreaper else set(group_members(os.getpgid(0))) - {me}
    if not survivors:
        return code
    print(f"apportion: the command ended by {signal.Signals(-code).name}; waiting for the"
          f" {len(survivors)} process(es) it left running ({', '.join(map(str, sorted(survivors)))})",
          file=sys.stderr, flush=True)
    chosen = None
    while survivors:
        if not subreaper:  # they are not our children: only their end can be seen, not their code
            time.sleep(0.05)
            survivors &= set(group_members(os.getpgid(0)))
            continue
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid in survivors:
            survivors.discard(pid)
            exit_code = os.waitstatus_to_exitcode(status)
            if chosen is None and exit_code >= 0:
                chosen = exit_code
    return code if chosen is None else chosen


class _Forked:
    """A job's process forked by a warm wrapper (what ``Popen`` is for one it exec'd)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None


def spawn(command: list[str], options: dict[str, str], env: dict[str, str] | None = None):
    """Start ``command`` with ``env`` (None: the job's environment) in this process group: forked warm
    when this wrapper is a spare that can (warm_start.py; otherwise it says why in the log), else exec'd;
    OSError if it cannot be started."""
    env = job_environment() if env is None else env
    if WARM_ENV is not None:
        launch = warm_start.Launch(command, env, WARM_ENV, options.get("workdir"), options.get("run-as"))
        if launch.refusal is None:
            return _Forked(launch.fork(options.get("run-as")))
        print(f"apportion: cold start: {launch.refusal}", file=sys.stderr, flush=True)
    workdir, run_as = options.get("workdir") or None, options.get("run-as")
    if run_as and workdir:  # the account enters its directory, never root on its behalf
        return subprocess.Popen(command, env=env, preexec_fn=_enter_after_switch(workdir), **_account(run_as))
    return subprocess.Popen(command, cwd=workdir, env=env, **_account(run_as))


def unstartable(command: list[str], options: dict[str, str]) -> tuple[int, str] | None:
    """Why the command cannot start, as the wrapper's exit code and one line, or None (it may start).

    Looked at as the job's OS account (``--run-as``: a child dropped to it, as_account.py), never as
    root: a ``workdir`` the account cannot reach, and the script of a ``python SCRIPT …`` command (or
    of a plain shell line saying so) that is not there (127) or that the account may not read (126).
    Python would exit 2, like any crash, and every retry would fail alike; so these fail at once."""
    workdir = options.get("workdir") or None
    line = command[2] if len(command) == 3 and command[:2] == ["/bin/sh", "-c"] else command
    argv = warm_start.python_command(line)
    found = warm_start.target(argv) if argv and os.path.basename(argv[0]).startswith("python") else None
    script = found[1] if found is not None and found[0] == "script" else None
    if workdir is None and script is None:
        return None

    def look() -> str:
        if workdir is not None:
            why = as_account.cannot_enter(workdir, read=False)  # the job's own directory is 0711: enter, not list
            if why:
                return f"{127 if why.startswith('no such') else 126} cannot enter the workdir: {why}"
        if script is not None:
            how, why = as_account.cannot_read(os.path.join(workdir, script) if workdir else script, script)
            if how:
                return f"{127 if how == 'missing' else 126} {why}"
        return ""

    run_as = options.get("run-as")
    try:
        said = as_account.answer_as(as_account.Identity.parse(run_as) if run_as else None, look)
    except ValueError as err:  # the check itself failed: the start says what goes wrong, if anything
        print(f"apportion: cannot check the command's files as its account: {err}", file=sys.stderr, flush=True)
        return None
    if not said:
        return None
    code, _, why = said.partition(" ")
    return int(code), why + (f" (as uid {run_as.split(':')[0]})" if run_as else "")


def _enter_after_switch(workdir: str):
    """Popen's ``preexec_fn`` under ``--run-as``: runs after the switch to the account (Popen's own
    ``cwd=`` would change directory before it, as root) and changes to ``workdir``; if it cannot,
    it says so on the log and the child exits 126 before exec'ing anything."""
    def enter() -> None:
        try:
            os.chdir(workdir)
        except OSError as err:
            os.write(2, f"apportion: cannot start: cannot enter the workdir {workdir}: {err.strerror}"
                        f" (as uid {os.getuid()})\n".encode("utf-8", "replace"))
            os._exit(126)
    return enter


def cannot_start(command: list[str], options: dict[str, str], err: OSError, what: str = "") -> int:
    """Say why ``command`` could not be exec'd and return the shell's code for it: 126 when the account
    may not run what it found (each candidate on the job's PATH named, looked at as the account), else 127."""
    program = command[0] if command else "(empty command)"
    said = f"{err}"
    code = 127
    if isinstance(err, PermissionError) and command:
        code = 126
        run_as = options.get("run-as")
        try:
            why = as_account.answer_as(as_account.Identity.parse(run_as) if run_as else None,
                                       lambda: as_account.cannot_run(program, job_environment().get("PATH", os.defpath)))
        except ValueError:
            why = ""
        said = (why or err.strerror) + (f" (as uid {run_as.split(':')[0]})" if run_as else "")
    print(f"apportion: cannot start {what}{program}: {said}", file=sys.stderr, flush=True)
    return code


def run_one(command: list[str], options: dict[str, str], subreaper: bool) -> int:
    """Run ``command`` and wait for it (and, after a stop signal, for what it left running); its exit code."""
    try:
        child = spawn(command, options)
    except OSError as err:
        return cannot_start(command, options, err)
    if options.get("pid-file"):  # which process is the command, should this one die first (orphans.py)
        try:
            write_pid(options["pid-file"], child.pid)
        except OSError:  # a full disk: the job runs on (only a job whose wrapper dies cannot be taken over)
            _remove(f"{options['pid-file']}.tmp")
    code = wait_for(child.pid)
    child.returncode = code  # reaped here, not by Popen
    if code < 0 and -code in STOP_SIGNALS:
        code = wait_for_survivors(code, subreaper)
    return code


def crashed(code: int) -> bool:
    """Did a replica fail (not done, not preempted, not stopped by the server's signal)?"""
    return code not in (0, PREEMPTED) and not (code < 0 and -code in STOP_SIGNALS)


def free_port() -> int:
    """A TCP port free on the loopback interface now, for the ranks' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def replica_env(base: dict[str, str], rank: int, count: int, port: int) -> dict[str, str]:
    """Rank ``rank``'s environment: torchrun's variables, its own device, its share of the threads."""
    env = dict(base)
    env.update({"RANK": str(rank), "WORLD_SIZE": str(count), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(count),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    devices = [d.strip() for d in base.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices[rank % len(devices)]
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if base.get(name, "").isdigit():
            env[name] = str(max(1, int(base[name]) // count))
    return env


def stop_the_others() -> None:
    """SIGKILL every other process of this attempt's group (the replicas, and whatever they started)."""
    kill_the_others(os.getpgid(0))


def run_replicas(command: list[str], count: int, options: dict[str, str], subreaper: bool) -> int:
    """Run ``command`` as ``count`` ranks and wait for all of them; the attempt's exit code."""
    port = free_port()
    ranks: dict[int, int] = {}  # pid -> rank
    for rank in range(count):
        try:
            child = spawn(command, options, env=replica_env(job_environment(), rank, count, port))
        except OSError as err:
            code = cannot_start(command, options, err, what=f"rank {rank}: ")
            stop_the_others()
            while ranks:
                pid, _ = os.waitpid(-1, 0)
                ranks.pop(pid, None)
            return code
        ranks[child.pid] = rank
    codes: dict[int, int] = {}  # rank -> its exit code
    left_behind: list[int] = []  # exit codes of processes the ranks left running, reaped as the subreaper
    first_crash = None
    while len(codes) < count:
        pid, status = os.waitpid(-1, 0)
        code = os.waitstatus_to_exitcode(status)
        if pid not in ranks:
            left_behind.append(code)
            continue
        codes[ranks[pid]] = code
        if crashed(code) and first_crash is None:
            first_crash = code
            print(f"apportion: rank {ranks[pid]} of {count} ended ({code}); stopping the others",
                  file=sys.stderr, flush=True)
            stop_the_others()
    if first_crash is not None:
        return first_crash
    ended = list(codes.values())
    stopped = [c for c in ended if c < 0]
    if stopped:  # a rank under a shell line: its shell died of the stop signal, the training process checkpointed
        own = [c for c in left_behind if c >= 0]
        ended = [c for c in ended if c >= 0] + (own or [wait_for_survivors(stopped[0], subreaper)])
    if PREEMPTED in ended:
        return PREEMPTED
    return next((c for c in ended if c != 0), 0)


def write_exit(path: str, code: int, started: float) -> None:
    _replace_file(path, json.dumps({"code": code, "started": started, "finished": time.time()}), durable=True)


def record_exit(path: str, code: int, started: float, tries: int = EXIT_WRITE_TRIES) -> bool:
    """Write the exit record, trying again while the disk is full; False when it could not be written
    (the wrapper's own exit status then carries the code to the executor)."""
    for attempt in range(tries):
        try:
            write_exit(path, code, started)
            return True
        except OSError as err:
            _remove(f"{path}.tmp")
            if attempt + 1 == tries:
                try:
                    print(f"apportion: cannot write the exit record {path}: {err}", file=sys.stderr)
                except OSError:  # the log is on the same full disk
                    pass
            else:
                time.sleep(EXIT_WRITE_WAIT_S)
    return False


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_pid(path: str, pid: int) -> None:
    _replace_file(path, str(pid))


def _replace_file(path: str, text: str, *, durable: bool = False) -> None:
    """Write ``path`` whole or not at all (a reader never sees half of it); ``durable``: on disk first."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    global WARM_ENV, JOB_ENV
    argv = sys.argv[1:] if argv is None else argv
    if "--spare" in argv and "--" not in argv:  # a spare: imports done, it waits for its attempt (spare_pool.py)
        from apportion.executors.local.spare_process import await_assignment

        argv, WARM_ENV = await_assignment(argv)
    options, command = parse(argv)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _ignore)
    subreaper = become_subreaper()
    if options.get("parent") and os.getpgid(0) == os.getpid():
        die_with(int(options["parent"]))
    started = time.time()
    replicas = int(options.get("replicas") or 0)
    try:
        JOB_ENV = read_env_file(options["env-file"]) if options.get("env-file") else None
    except (OSError, ValueError) as err:
        print(f"apportion: cannot read the job's environment {options['env-file']}: {err}", file=sys.stderr, flush=True)
        code = 127
    else:
        refused = unstartable(command, options)
        if refused is not None:  # as a shell says a missing command (127) or one it may not run (126): no retry
            code, why = refused
            print(f"apportion: cannot start: {why}", file=sys.stderr, flush=True)
        else:
            code = run_replicas(command, replicas, options, subreaper) if replicas else run_one(command, options,
                                                                                                subreaper)
    path = options.get("exit-file")
    recorded = record_exit(path, code, started) if path else True
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the log is on a full disk too
        pass
    if os.getpgid(0) == os.getpid():  # only when leading our own group, as the server starts us
        if recorded:
            signal_group(0)
        kill_the_others(os.getpid())  # no record: the exit status below must reach the executor
        os._exit(code if code >= 0 else 128 - code)  # not sys.exit: its flush of a log on a full disk would fail
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
