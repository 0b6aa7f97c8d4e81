"""What Slurm accounted for this server's attempts, to set beside apportion's own GPU time.

``sacct`` where Slurm keeps accounting (slurmdbd); else the ``jobcomp/filetxt`` file a cluster without
it may write (``JobCompLoc``). Each attempt is found by its job name, ``apportion.NS.JOB.ATTEMPT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from apportion.executors.slurm.commands import Slurm
from apportion.executors.slurm.nodes import fields


@dataclass(frozen=True)
class Accounted:
    """One attempt as Slurm accounted it."""

    job_id: int
    attempt: int
    state: str
    elapsed_s: float


def _parse_name(name: str, prefix: str) -> tuple[int, int] | None:
    job, _, attempt = name.removeprefix(prefix).partition(".") if name.startswith(prefix) else ("", "", "")
    return (int(job), int(attempt)) if job.isdigit() and attempt.isdigit() else None


def from_sacct(slurm: Slurm, prefix: str, since: str = "1970-01-01") -> list[Accounted] | None:
    """The attempts ``sacct`` knows (None where Slurm keeps no accounting: ``sacct`` refuses)."""
    try:
        out = slurm.run("sacct", "-n", "-P", "-X", "-a", f"--starttime={since}", "-o", "JobName%200,State,ElapsedRaw")
    except OSError:
        return None
    found = []
    for line in out.splitlines():
        name, _, rest = line.partition("|")
        state, _, elapsed = rest.partition("|")
        key = _parse_name(name, prefix)
        if key is not None and elapsed.isdigit():
            found.append(Accounted(*key, state.split()[0] if state else "", float(elapsed)))
    return found


def from_jobcomp(path: str | Path, prefix: str) -> list[Accounted]:
    """The attempts a ``jobcomp/filetxt`` file records (one finished job a line)."""
    found = []
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        f = fields(line)
        key = _parse_name(f.get("Name", ""), prefix)
        if key is None:
            continue
        try:
            elapsed = (datetime.fromisoformat(f["EndTime"]) - datetime.fromisoformat(f["StartTime"])).total_seconds()
        except (KeyError, ValueError):
            continue
        found.append(Accounted(*key, f.get("JobState", ""), elapsed))
    return found


def gpu_seconds(accounted: list[Accounted], gpus: dict[int, int]) -> dict[int, float]:
    """Each job's GPU-seconds as Slurm counts them: its attempts' elapsed times × its GPUs (``gpus``)."""
    out: dict[int, float] = {}
    for a in accounted:
        out[a.job_id] = out.get(a.job_id, 0.0) + a.elapsed_s * gpus.get(a.job_id, 1)
    return out
