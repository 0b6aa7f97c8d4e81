"""Holding an attempt to its share of this machine's CPU cores: affinity, and a CPU quota where a cgroup allows.

Affinity (``sched_setaffinity``) is set on every thread of every process in the attempt's process
group, so a job's data-loader workers started earlier are moved too and those started later inherit
it; it changes on the live processes, never restarting them. Affinity gives whole cores; the
fraction of a core a share may have beyond them is a CFS quota: cgroup v2 ``cpu.max`` where this
machine's unified hierarchy has the cpu controller, else cgroup v1 ``cpu.cfs_quota_us``, in a
cgroup of the attempt's own (``apportion-<state dir>/job-<id>``). The server's cgroup weighs as much
as as many busy processes as this machine has cores (``cpu.shares``/``cpu.weight``), and each job's
in it as its share, so that under contention from outside the server its jobs get what they would
as plain processes, divided among them as their shares are. Where neither is writable (no root, a
container without them) the quota is skipped and ``CpuQuota.how`` says so.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from apportion.executors.local.procfs import group_members

PERIOD_US = 100_000  # the CFS period a quota is a share of
V2_ROOT = Path("/sys/fs/cgroup")
V1_CPU_ROOT = Path("/sys/fs/cgroup/cpu")


def group_threads(pgid: int) -> list[int]:
    """Every thread of every live process in process group ``pgid``."""
    threads = []
    for pid in group_members(pgid):
        try:
            threads += [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # it ended meanwhile
    return threads


def set_affinity(pgid: int, cpus: tuple[int, ...]) -> int:
    """Pin every thread of process group ``pgid`` to ``cpus``; how many threads were pinned."""
    pinned = 0
    for tid in group_threads(pgid):
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except (ProcessLookupError, PermissionError):
            continue  # ended meanwhile, or switched to another account that this server may not pin
    return pinned


class CpuQuota:
    """Per-attempt cgroups with a CPU quota under ``root``; ``how`` is '' where none can be made.
    With neither ``root`` nor ``version`` given, they are this machine's, found; ``version=0``: none."""

    def __init__(self, state_dir: Path, root: Path | None = None, version: int | None = None) -> None:
        tag = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
        if root is None and version is None:
            root, version = _writable_cpu_cgroup()
        self.version = version or 0
        self.base = root / f"apportion-{tag}" if root is not None and version else None
        self.how = {2: "cgroup v2 cpu.max", 1: "cgroup v1 cpu.cfs_quota_us"}.get(self.version, "")
        self._leftover: set[int] = set()  # jobs whose cgroup still held a process (a zombie) when removed
        if self.base is not None and self.base.is_dir():  # a server that stopped before removing its jobs' cgroups
            self._leftover = {int(d.name[4:]) for d in self.base.glob("job-*") if d.name[4:].isdigit()}
            self.sweep()

    def job_dir(self, job_id: int) -> Path | None:
        return self.base / f"job-{job_id}" if self.base is not None else None

    def set(self, job_id: int, pgid: int, cores: float) -> bool:
        """Put process group ``pgid`` in job ``job_id``'s cgroup, limited to ``cores`` cores; False where it cannot."""
        directory = self.job_dir(job_id)
        if directory is None:
            return False
        try:
            fresh = not self.base.is_dir()
            directory.mkdir(parents=True, exist_ok=True)
            if self.version == 2 and (directory.parent / "cgroup.subtree_control").exists():
                _write(directory.parent / "cgroup.subtree_control", "+cpu")
            quota = max(1000, int(round(cores * PERIOD_US)))
            machine = len(os.sched_getaffinity(0))
            if self.version == 2:
                if fresh:
                    _write(self.base / "cpu.weight", str(min(10_000, 100 * machine)))
                _write(directory / "cpu.weight", str(min(10_000, max(1, round(100 * cores)))))
                _write(directory / "cpu.max", f"{quota} {PERIOD_US}")
            else:
                if fresh:
                    _write(self.base / "cpu.shares", str(1024 * machine))
                _write(directory / "cpu.shares", str(max(2, round(1024 * cores))))
                _write(directory / "cpu.cfs_period_us", str(PERIOD_US))
                _write(directory / "cpu.cfs_quota_us", str(quota))
            for pid in group_members(pgid):
                try:
                    _write(directory / "cgroup.procs", str(pid))
                except OSError:
                    continue  # ended meanwhile
        except OSError:
            return False
        return True

    def remove(self, job_id: int) -> None:
        """Remove job ``job_id``'s cgroup once its processes are gone; one that still holds a process
        (a zombie not yet reaped, an attempt a later server adopts) is tried again by ``sweep``."""
        if self.base is not None:
            self._leftover.add(job_id)
            self.sweep()

    @property
    def leftover(self) -> bool:
        """Whether an ended attempt's cgroup is still to be removed."""
        return bool(self._leftover)

    def sweep(self) -> None:
        """Remove the cgroups of ended attempts that are empty now, and the server's own once it has none."""
        if self.base is None:
            return
        for job_id in sorted(self._leftover):
            try:
                self.job_dir(job_id).rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            self._leftover.discard(job_id)
        if not self._leftover:
            try:
                self.base.rmdir()
            except OSError:
                pass


def _write(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _writable_cpu_cgroup() -> tuple[Path | None, int | None]:
    """Where this process may make cgroups with a CPU quota, and their version: (None, None) when nowhere."""
    v2 = _own_v2_cgroup()
    if v2 is not None and "cpu" in _read(v2 / "cgroup.controllers").split() and os.access(v2, os.W_OK):
        return v2, 2
    if (V1_CPU_ROOT / "cpu.cfs_quota_us").exists() and os.access(V1_CPU_ROOT, os.W_OK):
        return V1_CPU_ROOT, 1
    return None, None


def _own_v2_cgroup() -> Path | None:
    """This process's cgroup v2 directory (the unified hierarchy), or None when there is none."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        if line.startswith("0::"):
            for mount in (V2_ROOT, V2_ROOT / "unified"):
                if (mount / "cgroup.controllers").exists():
                    return mount / line[3:].lstrip("/")
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
