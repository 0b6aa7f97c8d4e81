"""What the scheduler asks of an executor: start, signal, watch and find again a job's attempts.

``Attempt`` is a started attempt, ``Exit`` one that ended; ``Executor`` is every call the
server makes on an executor, so that another executor (a fake one for tests, Ray) plugs in.
Whether an attempt is alive is the executor's to say, in its own terms (``is_alive``, ``scan``,
``adopt``, ``poll``): an attempt's process id, where it has one, is information, never the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Attempt:
    job_id: int
    attempt: int
    pid: int | None  # its process here (locally: the wrapper, leader of its process group); None: it has none (Ray)
    proc_start: int | None  # start time in clock ticks since boot, from /proc/PID/stat
    slots: tuple[str, ...]
    # how it was started: True handed to a warm spare (which may still start it cold, saying why in its log),
    # False exec'd cold, None: the executor does not say
    warm: bool | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Exit:
    job_id: int
    attempt: int
    code: int | None  # the job's exit code (negative: killed by that signal); None: gone with no record
    lost: str = ""  # why it was lost with the machine it ran on ("its Ray node died"); a retry, not a crash
    # why it never ran: its machines could not be had in time ("waiting for Ray to place 4 CPU cores beside its
    # slots"); the job waits for a round again, neither a retry nor a preemption
    unplaced: str = ""


@runtime_checkable
class Executor(Protocol):
    """Runs at most one attempt per job; the scheduler decides which, where and when."""

    def start(self, job_id: int, attempt: int, command: str | list[str], env: dict[str, str],
              workdir: str | None, slots: tuple[str, ...], *, run_as=None, replicas: int | None = None,
              cold: bool = False, cpus: int | None = None, memory_gb: float | None = None) -> Attempt:
        """Start attempt ``attempt`` of job ``job_id`` on ``slots`` with exactly ``env``; OSError if it cannot.

        ``env`` is for the job's own processes only: whatever supervises them (root under
        ``--run-as mapped``) must not run with it, nor hand it to anything before the switch to
        ``run_as``'s account (it holds the job file's ``LD_PRELOAD``, ``PYTHONPATH`` ...).

        ``run_as`` (an ``apportion.serve.accounts.runas.Account``; passed only when set): run the job's
        command as that OS account instead of the server's. ``replicas`` (passed only for an
        elastic job, one a slot): run the command that many times as torch.distributed's
        replicas (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
        ``MASTER_PORT``), one attempt that ends when all have, or at once when one crashes.
        ``cold`` (passed only when set): never a warm start (an executor that has none ignores it).
        ``cpus``, ``memory_gb`` (passed only when the job file says them): the CPU cores and host
        memory the job needs beside all its slots; an executor that reserves them for the attempt
        (Ray: in its placement group) does, one that does not (this machine's: the server divides
        its cores, core_split.py) ignores them.
        """
        ...

    def poll(self) -> list[Exit]:
        """The attempts that ended since the last call, each reported once."""
        ...

    def is_alive(self, job_id: int) -> bool:
        """Does the job have an attempt this executor tracks that has not ended?"""
        ...

    def terminate(self, job_id: int) -> bool:
        """SIGTERM the job's tracked attempt (it should checkpoint and exit 75); False if there is none."""
        ...

    def kill(self, job_id: int) -> bool:
        """SIGKILL the job's tracked attempt and everything it started; False if there is none."""
        ...

    def scan(self) -> list[Attempt]:
        """Attempts of this state directory still alive, whoever started them (for a restarted server)."""
        ...

    def adopt(self, attempt: Attempt) -> bool:
        """Track an attempt found by ``scan`` as if started here; False if it is no longer alive."""
        ...

    def kill_attempt(self, attempt: Attempt) -> None:
        """SIGKILL an attempt found by ``scan`` that is not to be adopted (a stray)."""
        ...

    def exit_record(self, job_id: int, attempt: int) -> int | None:
        """The exit code an attempt left behind, or None when it left none."""
        ...

    def tail(self, job_id: int, attempt: int, lines: int = 20) -> str:
        """The last ``lines`` lines of an attempt's output ('' when there is none)."""
        ...

    def log_path(self, job_id: int, attempt: int) -> Path:
        """Where an attempt's output (stdout and stderr) is written."""
        ...

    def capacity(self) -> dict[str, int] | None:
        """Slots of each GPU type that can run attempts now (a cluster that lost a node has fewer
        than the server was started with); None: all of the server's slots, always."""
        ...

    def refusal(self, gpu_types: tuple[str, ...], gpus: int, cpus: int | None, memory_gb: float | None
                ) -> tuple[str, str] | None:
        """Why no machine of any of ``gpu_types`` could ever hold a job of ``gpus`` slots that needs ``cpus``
        cores and ``memory_gb`` GiB beside them, as ``(field, message)``; None when one could, or when the
        executor leaves it to the server's own node (``ServeConfig.node``)."""
        ...

    def room(self) -> dict[str, tuple[float | None, float | None]] | None:
        """Each slot type's CPU cores and GiB of memory (None: not counted) on the executor's live machines,
        which a round's placement counts the jobs' ``cpus`` and ``memory_gb`` against; None where the
        server's own node (``ServeConfig.node``) holds the slots. Optional: an executor without it is
        taken to answer None."""
        ...

    def slots_per_node(self) -> dict[str, list[int]] | None:
        """Slots of each GPU type on each live node, where a type's slots are spread over several (Ray,
        Slurm): a policy that sizes jobs counts a job over two nodes as synchronising between them. None
        (or an executor without it): all of a type's slots are on one node, this machine."""
        ...

    def set_cores(self, job_id: int, cpus: tuple[int, ...], share: float) -> bool:
        """Hold the job's running attempt to CPU cores ``cpus`` (ids on its machine) and ``share`` cores'
        time, changed on the live attempt (no restart); False when it has none here. An executor that
        cannot hold an attempt to cores records or ignores it."""
        ...

    def close(self) -> None:
        """Release what is held that is no attempt (the local executor's waiting spares) when the
        server stops cleanly; attempts go on running for a server started later."""
        ...
