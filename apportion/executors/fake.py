"""An executor with no processes, for tests and for measuring the scheduler's own overhead.

Attempts "run" until the caller ends them with :meth:`FakeExecutor.finish`; SIGTERM ends an
attempt with exit code 75 (it checkpointed), SIGKILL with no exit record, unless told to
ignore signals.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from apportion.executors.base import Attempt, Exit


class FakeExecutor:
    """An ``Executor`` whose attempts are entries in a dict, ended by the caller."""

    def __init__(self, state_dir: str | Path = "/nonexistent", *, obey_sigterm: bool = True, pids: bool = True) -> None:
        """``pids=False``: its attempts have no process id, as a Ray cluster's have none here."""
        self.state_dir = Path(state_dir)
        self.obey_sigterm = obey_sigterm
        self.pids = pids
        self._pids = itertools.count(1_000_000)
        self._running: dict[int, Attempt] = {}
        self._ended: list[Exit] = []
        self.started: list[Attempt] = []  # every attempt ever started, in order
        self.envs: dict[tuple[int, int], dict[str, str]] = {}
        self.accounts: dict[tuple[int, int], object] = {}  # the OS account each attempt was to run as (None: ours)
        self.replicas: dict[tuple[int, int], int | None] = {}  # processes each attempt was to run (None: one)
        self.asks: dict[tuple[int, int], tuple] = {}  # (cpus, memory_gb) each attempt was started with
        self.signals: list[tuple[int, str]] = []
        self.exit_codes: dict[tuple[int, int], int] = {}  # what an attempt's exit file would say
        self.logs: dict[tuple[int, int], str] = {}  # what an attempt's log would say
        self.live_capacity: dict[str, int] | None = None  # slots of each type still there (None: all)
        self.live_room: dict[str, tuple[float | None, float | None]] | None = None  # cores, GiB by type (None: node's)
        self.live_nodes: dict[str, list[int]] | None = None  # slots of each type on each node (None: one machine)
        self.cores: dict[int, tuple[tuple[int, ...], float]] = {}  # job -> the cores and share it was last held to
        self.core_enforcement = "recorded only (fake executor)"

    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.state_dir / "jobs" / str(job_id) / f"attempt-{attempt}.log"

    def exit_record(self, job_id: int, attempt: int) -> int | None:
        return self.exit_codes.get((job_id, attempt))

    def tail(self, job_id: int, attempt: int, lines: int = 20) -> str:
        return "\n".join(self.logs.get((job_id, attempt), "").splitlines()[-lines:])

    def close(self) -> None:
        """Nothing is held but attempts."""

    def capacity(self) -> dict[str, int] | None:
        """What a test set as ``live_capacity``: the slots of each type still there (None: all)."""
        return self.live_capacity

    def slots_per_node(self) -> dict[str, list[int]] | None:
        """What a test set as ``live_nodes``: the slots of each type on each node (None: all on this machine)."""
        return self.live_nodes

    def set_cores(self, job_id: int, cpus: tuple[int, ...], share: float) -> bool:
        """Record the cores job ``job_id`` is held to; False when it has no attempt running."""
        if job_id not in self._running:
            return False
        self.cores[job_id] = (tuple(cpus), float(share))
        return True

    def room(self) -> dict[str, tuple[float | None, float | None]] | None:
        """What a test set as ``live_room``: each type's cores and GiB its jobs' asks may take (None: the node's)."""
        return self.live_room

    def refusal(self, gpu_types, gpus, cpus, memory_gb) -> None:
        """The server's own node judges a job's cores and memory."""
        return None

    def start(self, job_id, attempt, command, env, workdir, slots, *, run_as=None, replicas=None, cold=False,
              cpus=None, memory_gb=None) -> Attempt:
        if job_id in self._running:
            raise AssertionError(f"job {job_id} started twice at once")
        handle = Attempt(job_id, attempt, next(self._pids) if self.pids else None, 1 if self.pids else None,
                         tuple(slots))
        self._running[job_id] = handle
        self.started.append(handle)
        self.envs[(job_id, attempt)] = dict(env)
        self.accounts[(job_id, attempt)] = run_as
        self.replicas[(job_id, attempt)] = replicas
        self.asks[(job_id, attempt)] = (cpus, memory_gb)
        return handle

    def finish(self, job_id: int, code: int | None) -> None:
        """End job ``job_id``'s attempt with ``code`` (seen at the next poll)."""
        attempt = self._running.pop(job_id)
        if code is not None:
            self.exit_codes[(job_id, attempt.attempt)] = code
        self._ended.append(Exit(job_id, attempt.attempt, code))

    def lose(self, job_id: int, why: str = "its node died") -> None:
        """End job ``job_id``'s attempt as lost with the machine it ran on (no exit record)."""
        attempt = self._running.pop(job_id)
        self._ended.append(Exit(job_id, attempt.attempt, None, why))

    def unplace(self, job_id: int, why: str = "waiting for Ray to place 4 CPU cores beside its slots") -> None:
        """End job ``job_id``'s attempt as never placed on a machine (nothing of it ran)."""
        attempt = self._running.pop(job_id)
        self._ended.append(Exit(job_id, attempt.attempt, None, unplaced=why))

    def end_unseen(self, job_id: int, code: int | None) -> None:
        """End an attempt while no server watches (it died): only its exit record tells."""
        attempt = self._running.pop(job_id)
        if code is not None:
            self.exit_codes[(job_id, attempt.attempt)] = code

    def forget(self) -> None:
        """What a new server's executor knows before ``scan``: nothing (exits not yet seen are lost)."""
        self._ended = []

    def running(self) -> dict[int, Attempt]:
        return dict(self._running)

    def scan(self) -> list[Attempt]:
        return list(self._running.values())

    def adopt(self, attempt: Attempt) -> bool:
        return attempt.job_id in self._running

    def tracked(self) -> dict[int, Attempt]:
        return dict(self._running)

    def is_alive(self, job_id: int) -> bool:
        return job_id in self._running

    def terminate(self, job_id: int) -> bool:
        self.signals.append((job_id, "TERM"))
        if job_id in self._running and self.obey_sigterm:
            self.finish(job_id, 75)
        return True

    def kill(self, job_id: int) -> bool:
        self.signals.append((job_id, "KILL"))
        if job_id in self._running:
            self.finish(job_id, None)
        return True

    def kill_attempt(self, attempt: Attempt) -> None:
        self._running.pop(attempt.job_id, None)

    def poll(self) -> list[Exit]:
        ended, self._ended = self._ended, []
        return ended
