"""Run attempts as Slurm jobs: one ``sbatch`` per attempt, pinned to nodes, its ranks ``srun``'s tasks.

``start`` picks the nodes (``nodes.choose_nodes``: the fewest usable nodes with the GPUs free) and
submits a batch job named ``apportion.NS.JOB.ATTEMPT`` (``NS``: the state directory's digest) with
``--nodelist``, ``--ntasks`` (one a slot), ``--gres=gpu:TYPE:N`` and ``--ntasks-per-node=N`` (the
same share on each node), the job's CPU cores and memory, its workdir, the Slurm account (``--account``) and, under ``--run-as mapped``,
the user's own uid (``--uid``, which needs root). Its script ``srun``s one task a rank
(``task.py``; a job of one rank runs it in the batch step itself), which becomes the local executor's wrapper: logs, exit records and the checkpoint
contract are those of this machine, in ``STATE_DIR/jobs/ID/`` (a directory every node reaches).

- ``poll`` reads ``squeue`` (at most every ``poll_every_s``): a job gone from it ended; its code is
  its ranks' exit records' (the first crash's, else 75 if one was preempted, else 0); without
  them Slurm's verdict (``scontrol show job``, else ``sacct``): a node failure, the time limit or
  Slurm's own preemption make the attempt *lost* (a retry that counts no crash). A rank that
  crashed ends the attempt at once (the others are cancelled), but lost when one of its nodes is
  down. A job Slurm has not started ``place_wait_s`` after its submission (others' jobs hold the
  nodes) is withdrawn: ``Exit.unplaced``.
- ``terminate``: ``scancel --signal=TERM`` (every rank's processes, ``--full`` for one rank in the
  batch step; the wrapper records 75 after the checkpoint); ``kill``: ``scancel --signal=KILL`` then ``scancel``.
- ``scan`` lists the jobs of this state directory in ``squeue`` (by name; the slots in the comment),
  so that a server restarted after ``kill -9`` adopts them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from apportion.executors.base import Attempt, Exit
from apportion.executors.local.executor import tail
from apportion.executors.local.wrapper import write_env_file
from apportion.executors.slurm.commands import Slurm
from apportion.executors.slurm.nodes import SlurmNode, choose_nodes, fields, online, parse_jobs, parse_nodes

PREEMPTED = 75
PLACE_WAIT_S = 60.0  # a job Slurm has not started this long after its submission is withdrawn
POLL_EVERY_S = 0.25  # squeue at most this often
NODES_EVERY_S = 1.0  # scontrol show nodes/jobs at most this often
LIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
        "STAGE_OUT", "STOPPED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")
LOST_STATES = {"NODE_FAIL": "its Slurm node failed", "TIMEOUT": "Slurm ended it at its time limit",
               "PREEMPTED": "Slurm preempted it", "BOOT_FAIL": "its Slurm node failed to boot",
               "DEADLINE": "Slurm ended it at its deadline"}


def namespace(state_dir: str | Path) -> str:
    """The Slurm job-name prefix of one state directory's attempts: two servers never see each other's."""
    return hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:12]


def slot_type(slot: str) -> str:
    """``h100:3`` -> ``h100``."""
    return slot.rpartition(":")[0] or slot


def sbatch_argv(*, name: str, slots: tuple[str, ...], slurm_type: str, nodes: list[str] | None, partition: str | None,
                account: str | None, output: str, workdir: str, run_as=None, cpus: int | None = None,
                memory_gb: float | None = None) -> list[str]:
    """The ``sbatch`` command line of one attempt (its script comes on stdin): one task a GPU, the same
    number on each of ``nodes`` (None: one node, wherever Slurm finds it)."""
    ranks = len(slots)
    many = len(nodes) if nodes else 1
    share = ranks // many
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--comment=apportion slots={','.join(slots)}",
            f"--nodes={many}", f"--ntasks={ranks}", f"--ntasks-per-node={share}", f"--gres=gpu:{slurm_type}:{share}",
            f"--output={output}", f"--chdir={workdir}", "--no-requeue", "--export=ALL"]
    if nodes:
        argv.append(f"--nodelist={','.join(nodes)}")
    if partition:
        argv.append(f"--partition={partition}")
    if account and run_as is None:  # a mapped user's job is charged to that user's own default account
        argv.append(f"--account={account}")
    if run_as is not None:
        argv += [f"--uid={run_as.uid}", f"--gid={run_as.gid}"]
    if cpus:
        argv.append(f"--cpus-per-task={max(1, math.ceil(cpus / ranks))}")
    if memory_gb:
        argv.append(f"--mem={max(1, math.ceil(memory_gb * 1024 / many))}M")
    return argv


def batch_script(python: str, job_dir: str, attempt: int, ranks: int, wrapper_args: list[str]) -> str:
    """The batch script: one ``srun`` task a rank, each becoming the wrapper (``task.py``); one rank runs in
    the batch step itself (no step to launch: it starts sooner)."""
    task = [python, "-m", "apportion.executors.slurm.task", "--job-dir", job_dir, "--attempt", str(attempt),
            "--", *wrapper_args]
    if ranks == 1:
        return f"#!/bin/sh\nexec {shlex.join(task)}\n"
    return ("#!/bin/sh\n"
            f"exec srun --ntasks={ranks} --kill-on-bad-exit=0 --input=none {shlex.join(task)}\n")


def signal_options(ranks: int, signum: int) -> list[str]:
    """``scancel``'s options that send ``signum`` to every process of an attempt of ``ranks`` ranks: its batch
    step's (one rank, ``--full``), else its ``srun`` step's tasks (not the batch step, whose ``srun``
    would pass the signal on a second time)."""
    name = f"--signal={signal.Signals(signum).name.removeprefix('SIG')}"
    return [name, "--full"] if ranks == 1 or signum == signal.SIGKILL else [name]


@dataclass
class _Attempt:
    """An attempt this executor watches."""

    attempt: Attempt
    slurm_id: str
    started: float  # time.monotonic() at its submission
    state: str = "PENDING"
    reason: str = ""
    nodes: str = ""  # squeue's %N
    signalled: int | None = None
    env_path: Path | None = None
    slurm_type: str = ""
    planned: tuple[str, ...] = ()  # the nodes it was pinned to ((): Slurm's choice)


@dataclass
class SlurmExecutor:
    """The ``Executor`` on a Slurm partition. ``types``: apportion's GPU type -> Slurm's GRES type."""

    state_dir: Path
    types: dict[str, str] = field(default_factory=dict)
    partition: str | None = None
    account: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # for Slurm's commands (SLURM_CONF)
    place_wait_s: float = PLACE_WAIT_S
    poll_every_s: float = POLL_EVERY_S
    python: str = sys.executable

    core_enforcement = "Slurm (each job holds the cores its job file asks, --cpus-per-task)"

    def __post_init__(self) -> None:
        self.state_dir = Path(os.path.realpath(self.state_dir))
        self.slurm = Slurm(self.env)
        self.prefix = f"apportion.{namespace(self.state_dir)}."
        self._tracked: dict[int, _Attempt] = {}
        self._found: dict[tuple[int, int], str] = {}  # (job, attempt) -> Slurm job id, by scan
        self._ended: list[Exit] = []
        self._polled = 0.0
        self._cluster: tuple[float, list[SlurmNode], list] | None = None

    # the cluster ------------------------------------------------------------------------------

    def nodes(self, fresh: bool = False) -> list[SlurmNode]:
        """The partition's nodes (every node without a partition), from ``scontrol show nodes -d -o``."""
        return self._read_cluster(fresh)[0]

    def _read_cluster(self, fresh: bool = False) -> tuple[list[SlurmNode], list]:
        now = time.monotonic()
        if fresh or self._cluster is None or now - self._cluster[0] >= NODES_EVERY_S:
            nodes = parse_nodes(self.slurm.run("scontrol", "show", "nodes", "-d", "-o"))
            if self.partition:
                nodes = [n for n in nodes if self.partition in n.partitions]
            jobs = parse_jobs(self.slurm.run("scontrol", "show", "jobs", "-d", "-o"))
            self._cluster = (now, nodes, jobs)
        return self._cluster[1], self._cluster[2]

    def capacity(self) -> dict[str, int] | None:
        """GPUs of each offered type on the usable nodes, less those others' jobs hold (apportion's own jobs'
        GPUs are its slots' still); None when Slurm cannot be asked now (all slots, as before)."""
        cluster = self._offered_cluster()
        if cluster is None:
            return None
        nodes, jobs = cluster
        others = [j for j in jobs if not j.name.startswith(self.prefix)]
        return online(nodes, self.types, others)

    def slots_per_node(self) -> dict[str, list[int]] | None:
        """GPUs of each offered type on each usable node (others' jobs' included: a node's size), which a
        policy that sizes jobs counts; None when Slurm cannot be asked now."""
        cluster = self._offered_cluster()
        if cluster is None:
            return None
        return {t: [n.gpus[s] for n in cluster[0] if n.usable and n.gpus.get(s)] for t, s in self.types.items()}

    def _offered_cluster(self):
        """Slurm's nodes and jobs (``_read_cluster``) where GPU types are offered; None where none are, or
        when Slurm cannot be asked now."""
        if not self.types:
            return None
        try:
            return self._read_cluster()
        except OSError:
            return None

    def refusal(self, gpu_types, gpus, cpus, memory_gb):
        """None: Slurm itself refuses a job no node can hold (it is withdrawn as never placed)."""
        return None

    def room(self):
        """None: Slurm counts each job's cores and memory (``--cpus-per-task``, ``--mem``)."""
        return None

    def set_cores(self, job_id: int, cpus: tuple[int, ...], share: float) -> bool:
        """Not held: a Slurm job's cores are those Slurm allotted it."""
        return False

    def close(self) -> None:
        """Nothing is held but attempts (Slurm's jobs)."""

    # files ----------------------------------------------------------------------------------

    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(job_id)

    def log_path(self, job_id: int, attempt: int, rank: int = 0) -> Path:
        return self.job_dir(job_id) / (f"attempt-{attempt}" + (f".rank-{rank}" if rank else "") + ".log")

    def exit_path(self, job_id: int, attempt: int, rank: int = 0) -> Path:
        return self.job_dir(job_id) / (f"attempt-{attempt}" + (f".rank-{rank}" if rank else "") + ".exit")

    def exit_record(self, job_id: int, attempt: int, ranks: int | None = None) -> int | None:
        """The attempt's code from its ranks' records (None without rank 0's, or, given ``ranks``, any)."""
        codes = {}
        for rank in range(ranks or 1):
            code = _read_code(self.exit_path(job_id, attempt, rank))
            if code is None:
                return None
            codes[rank] = code
        if ranks is None:
            for path in self.job_dir(job_id).glob(f"attempt-{attempt}.rank-*.exit"):
                rank = path.name.removeprefix(f"attempt-{attempt}.rank-").removesuffix(".exit")
                if rank.isdigit() and _read_code(path) is not None:
                    codes[int(rank)] = _read_code(path)
        return combined(codes)

    def tail(self, job_id: int, attempt: int, lines: int = 20) -> str:
        """The last lines of rank 0's log; and of Slurm's own messages when the attempt left no exit record
        (they say why: a node failure, a time limit, a task that could not start). With a record they only
        say that the wrapper ended its task, after recording."""
        text = tail(self.log_path(job_id, attempt), lines)
        if self.exit_record(job_id, attempt) is not None:
            return text
        slurm = tail(self.job_dir(job_id) / f"attempt-{attempt}.slurm.log", lines)
        return "\n".join(t for t in (text, slurm) if t)

    def nodes_of(self, job_id: int) -> tuple[str, ...] | None:
        """Each rank's Slurm node (rank r holds its r-th slot); None until every rank has started."""
        tracked = self._tracked.get(job_id)
        if tracked is None:
            return None
        a = tracked.attempt
        found = []
        for rank in range(len(a.slots)):
            path = self.job_dir(job_id) / (f"attempt-{a.attempt}" + (f".rank-{rank}" if rank else "") + ".node")
            try:
                found.append(path.read_text().strip())
            except OSError:
                return None
        return tuple(found) if all(found) else None

    # attempts --------------------------------------------------------------------------------

    def start(self, job_id: int, attempt: int, command: str | list[str], env: dict[str, str],
              workdir: str | None, slots: tuple[str, ...], *, run_as=None, replicas: int | None = None,
              cold: bool = False, cpus: int | None = None, memory_gb: float | None = None) -> Attempt:
        """Submit the attempt as a Slurm job pinned to the nodes that have its GPUs free; OSError if Slurm
        refuses it."""
        if replicas is not None and replicas != len(slots):
            raise OSError(f"on Slurm an attempt runs one task a slot: {len(slots)}, not {replicas}")
        types = {slot_type(s) for s in slots}
        if len(types) != 1 or next(iter(types)) not in self.types:
            raise OSError(f"slots {','.join(slots) or '(none)'} are not of one type this Slurm partition offers"
                          f" ({', '.join(self.types) or 'none'})")
        slurm_type = self.types[types.pop()]
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for old in directory.glob(f"attempt-{attempt}.*"):  # a former server's try at this attempt
            if old.suffix in (".exit", ".node", ".env", ".rank-env"):
                old.unlink(missing_ok=True)
        env_path = directory / f"attempt-{attempt}.env"
        write_env_file(env_path, env)
        if run_as is not None:  # the job's own account runs every task: its directory and files are its own
            for path in (directory, env_path):
                os.chown(path, run_as.uid, run_as.gid)
        try:
            now, held = self._free_view(slurm_type)
            nodes = choose_nodes(now, slurm_type, len(slots), held)
        except OSError:
            nodes = None
        wrapper_args = ["--state-dir", str(self.state_dir), "--job", str(job_id), "--attempt", str(attempt),
                        "--slots", ",".join(slots) or "-", "--workdir", workdir or str(directory), "--",
                        *(["/bin/sh", "-c", command] if isinstance(command, str) else list(command))]
        argv = sbatch_argv(name=f"{self.prefix}{job_id}.{attempt}", slots=tuple(slots), slurm_type=slurm_type,
                           nodes=nodes, partition=self.partition, account=self.account,
                           output=str(directory / f"attempt-{attempt}.slurm.log"), workdir=str(directory),
                           run_as=run_as, cpus=cpus, memory_gb=memory_gb)
        script = batch_script(self.python, str(directory), attempt, len(slots), wrapper_args)
        wrapper_env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        try:
            out = self.slurm.run(*argv, stdin=script, env=wrapper_env)
        except OSError:
            env_path.unlink(missing_ok=True)
            raise
        slurm_id = out.strip().split(";")[0]
        handle = Attempt(job_id, attempt, None, None, tuple(slots))
        self._tracked[job_id] = _Attempt(handle, slurm_id, time.monotonic(), env_path=env_path, slurm_type=slurm_type,
                                         planned=tuple(nodes or ()))
        return handle

    def _free_view(self, slurm_type: str) -> tuple[list[SlurmNode], dict[str, int]]:
        """The nodes now, and the GPUs of ``slurm_type`` on each that this executor's attempts submitted but
        not yet started hold (Slurm counts a job's GPUs as used only once it runs): two attempts started in
        one round never go to the same free GPU."""
        nodes, jobs = self._read_cluster(fresh=True)
        started = {j.job_id for j in jobs if j.per_node}
        held: dict[str, int] = {}
        for tracked in self._tracked.values():
            if tracked.slurm_id in started or tracked.slurm_type != slurm_type or not tracked.planned:
                continue
            share = len(tracked.attempt.slots) // len(tracked.planned)
            for node in tracked.planned:
                held[node] = held.get(node, 0) + share
        return nodes, held

    def slurm_id(self, job_id: int) -> str | None:
        """The Slurm job id of the job's tracked attempt."""
        tracked = self._tracked.get(job_id)
        return tracked.slurm_id if tracked else None

    def is_alive(self, job_id: int) -> bool:
        return job_id in self._tracked

    def terminate(self, job_id: int) -> bool:
        """``scancel --signal=TERM``: every rank's processes (a job Slurm has not started is withdrawn)."""
        return self._signal(job_id, signal.SIGTERM)

    def kill(self, job_id: int) -> bool:
        """``scancel --signal=KILL``, then ``scancel``: nothing of it is left."""
        return self._signal(job_id, signal.SIGKILL)

    def _signal(self, job_id: int, signum: int) -> bool:
        tracked = self._tracked.get(job_id)
        if tracked is None:
            return False
        if tracked.state == "PENDING":
            self._refresh(force=True)
            tracked = self._tracked.get(job_id)
            if tracked is None:
                return True
        if tracked.state == "PENDING":  # never started: nothing runs, nothing to save
            self._cancel(tracked.slurm_id)
            self._end(job_id, None, unplaced=f"Slurm had not started it ({tracked.reason or 'pending'})")
            return True
        tracked.signalled = signum
        if signum == signal.SIGKILL:
            self._cancel(tracked.slurm_id, "--signal=KILL", "--full")
            self._cancel(tracked.slurm_id)
        else:
            self._cancel(tracked.slurm_id, *signal_options(len(tracked.attempt.slots), signum))
        return True

    def _cancel(self, slurm_id: str, *options: str) -> None:
        try:
            self.slurm.run("scancel", *options, slurm_id)
        except OSError:  # it ended meanwhile
            pass

    def _refresh(self, force: bool = False) -> bool:
        """Read the state, reason and nodes of this server's jobs from ``squeue``; False when not asked now
        (``poll_every_s`` has not passed)."""
        now = time.monotonic()
        if not force and now - self._polled < self.poll_every_s:
            return False
        self._polled = now
        ids = ",".join(t.slurm_id for t in self._tracked.values())
        if not ids:
            return True
        out = self.slurm.run("squeue", "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%r|%N", check=False)
        seen = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                seen[parts[0]] = (parts[1], parts[2], parts[3])
        for job_id, tracked in list(self._tracked.items()):
            state, reason, nodes = seen.get(tracked.slurm_id, ("", "", ""))
            tracked.state, tracked.reason, tracked.nodes = state or "GONE", reason, nodes or tracked.nodes
        return True

    def poll(self) -> list[Exit]:
        """Attempts that ended since the last call: gone from Slurm's queue, a rank crashed, or not started by
        Slurm ``place_wait_s`` after their submission (withdrawn)."""
        if self._tracked:
            try:
                asked = self._refresh()
            except OSError:  # Slurm cannot be asked now: next time
                asked = False
            if asked:
                self._settle()
        ended, self._ended = self._ended, []
        return ended

    def _settle(self) -> None:
        now = time.monotonic()
        for job_id, tracked in list(self._tracked.items()):
            a = tracked.attempt
            ranks = len(a.slots)
            if tracked.state not in LIVE or tracked.state == "COMPLETING" and self.exit_record(
                    job_id, a.attempt, ranks) is not None:
                self._ended_job(job_id, tracked)
            elif tracked.state == "PENDING" and now - tracked.started >= self.place_wait_s:
                self._cancel(tracked.slurm_id)
                self._end(job_id, None, unplaced=f"Slurm had not started it in {self.place_wait_s:g} s"
                                                 f" ({tracked.reason or 'pending'})")
            elif ranks > 1 and tracked.state == "RUNNING" and tracked.signalled is None:
                crash = self._crashed_rank(job_id, a.attempt, ranks)
                if crash is not None:  # the others would hang on the broken collective: end them
                    lost = self._lost_node(tracked)
                    self._cancel(tracked.slurm_id, "--signal=KILL", "--full")
                    self._cancel(tracked.slurm_id)
                    self._end(job_id, None if lost else crash, lost=lost)

    def _crashed_rank(self, job_id: int, attempt: int, ranks: int) -> int | None:
        for rank in range(ranks):
            code = _read_code(self.exit_path(job_id, attempt, rank))
            if code is not None and code not in (0, PREEMPTED):
                return code
        return None

    def _lost_node(self, tracked: _Attempt) -> str:
        """Why the attempt is lost with a node of its own ('' when all its nodes are up)."""
        from apportion.executors.slurm.nodes import expand_hostlist

        mine = set(expand_hostlist(tracked.nodes))
        try:
            nodes = self.nodes(fresh=True)
        except OSError:
            return ""
        down = sorted(n.name for n in nodes if n.name in mine and not n.usable and (
            "DOWN" in n.state or "NOT_RESPONDING" in n.state or "FAIL" in n.state))
        return f"its Slurm node {down[0]} is down" if down else ""

    def _ended_job(self, job_id: int, tracked: _Attempt) -> None:
        """A job gone from Slurm's queue: its code from the exit records, else Slurm's verdict."""
        a = tracked.attempt
        code = self.exit_record(job_id, a.attempt, len(a.slots))
        if code is None:
            code = self.exit_record(job_id, a.attempt)  # rank 0's alone
        if code is not None and code not in (0, PREEMPTED):
            lost = self._lost_node(tracked)
            if lost:
                self._end(job_id, None, lost=lost)
                return
        if code is not None:
            self._end(job_id, code)
            return
        state, slurm_code = self._verdict(tracked.slurm_id)
        if state in LOST_STATES and tracked.signalled != signal.SIGKILL:
            self._end(job_id, None, lost=LOST_STATES[state])
        elif tracked.signalled is not None:
            self._end(job_id, -int(tracked.signalled))
        else:
            self._end(job_id, slurm_code)

    def _verdict(self, slurm_id: str) -> tuple[str, int | None]:
        """How Slurm says a job ended: its state and exit code (``scontrol``, else ``sacct``), ("", None) when
        it no longer knows."""
        try:
            record = fields(self.slurm.run("scontrol", "show", "job", "-o", slurm_id, check=False))
            if "JobState" in record:
                return record["JobState"], _slurm_code(record.get("ExitCode", ""))
            out = self.slurm.run("sacct", "-n", "-P", "-X", "-j", slurm_id, "-o", "State,ExitCode", check=False)
        except OSError:
            return "", None
        for line in out.splitlines():
            state, _, code = line.partition("|")
            return state.split()[0] if state else "", _slurm_code(code)
        return "", None

    def _end(self, job_id: int, code: int | None, lost: str = "", unplaced: str = "") -> None:
        tracked = self._tracked.pop(job_id)
        a = tracked.attempt
        for path in (self.job_dir(job_id) / f"attempt-{a.attempt}.env",
                     *self.job_dir(job_id).glob(f"attempt-{a.attempt}*.rank-env")):
            path.unlink(missing_ok=True)
        self._ended.append(Exit(job_id, a.attempt, code, lost, unplaced))

    # a restarted server -----------------------------------------------------------------------

    def scan(self) -> list[Attempt]:
        """This state directory's attempts still in Slurm's queue (by job name; their slots from the comment)."""
        argv = ["squeue", "-h", "-o", "%i|%j|%T|%k"] + ([f"--partition={self.partition}"] if self.partition else [])
        found, self._found = [], {}
        for line in self.slurm.run(*argv).splitlines():
            parts = line.strip().split("|", 3)
            if len(parts) != 4 or not parts[1].startswith(self.prefix) or parts[2] not in LIVE:
                continue
            job, _, attempt = parts[1][len(self.prefix):].partition(".")
            if not (job.isdigit() and attempt.isdigit()):
                continue
            slots = parts[3].partition("slots=")[2].split()[0] if "slots=" in parts[3] else ""
            self._found[(int(job), int(attempt))] = parts[0]
            found.append(Attempt(int(job), int(attempt), None, None, tuple(s for s in slots.split(",") if s)))
        return found

    def adopt(self, attempt: Attempt) -> bool:
        """Watch an attempt found by ``scan``; False unless it is still in Slurm's queue."""
        slurm_id = self._found.get((attempt.job_id, attempt.attempt))
        if slurm_id is None or not attempt.slots:
            return False
        out = self.slurm.run("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T|%r|%N", check=False).strip()
        state, _, rest = out.partition("|")
        if state not in LIVE:
            return False
        reason, _, nodes = rest.partition("|")
        self._tracked[attempt.job_id] = _Attempt(attempt, slurm_id, time.monotonic(), state, reason, nodes)
        return True

    def kill_attempt(self, attempt: Attempt) -> None:
        """Cancel an attempt found by ``scan`` that is not to be adopted."""
        slurm_id = self._found.get((attempt.job_id, attempt.attempt))
        if slurm_id is not None:
            self._cancel(slurm_id, "--signal=KILL", "--full")
            self._cancel(slurm_id)


def _read_code(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def combined(codes: dict[int, int]) -> int:
    """An attempt's code from its ranks': the first crash's, else 75 if any was preempted, else 0."""
    for rank in sorted(codes):
        if codes[rank] not in (0, PREEMPTED):
            return codes[rank]
    return PREEMPTED if PREEMPTED in codes.values() else 0


def _slurm_code(text: str) -> int | None:
    """Slurm's ``ExitCode=CODE:SIGNAL`` -> the code, or minus the signal; None when not said."""
    code, _, sig = text.partition(":")
    if not code.isdigit():
        return None
    return -int(sig) if sig.isdigit() and int(sig) else int(code)
