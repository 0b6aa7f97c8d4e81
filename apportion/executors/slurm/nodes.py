"""What a Slurm partition offers apportion, read from ``scontrol show nodes -d -o`` and ``scontrol show jobs -d -o``.

Pure functions over those commands' text (one record a line, ``Key=Value`` fields): each node's GPU
types and counts (its GRES), cores, memory, state and partitions; the GPUs each job holds on each
node. A node is *usable* when Slurm would start a job on it (not drained, down, failing, not
responding, powered off, in maintenance or rebooting).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# a node in any of these states runs no new job: its GPUs are offline for apportion
UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER", "MAINT", "REBOOT", "FUTURE", "INVAL", "UNKNOWN",
            "NO_RESPOND")
_FIELD = re.compile(r"(\S+?)=(\S*)")
_GRES = re.compile(r"^gpu:([^:(]+):(\d+)")  # gpu:h100:2(S:0-1) or gpu:h100:2(IDX:0-1)
_JOB_NODE = re.compile(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)")


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``scontrol show nodes -d -o`` says it."""

    name: str
    gpus: dict[str, int]  # Slurm GPU type -> count ("h100": 4)
    used: dict[str, int]  # GPUs of each type held by jobs now
    cpus: int
    memory_mb: int
    state: str  # "IDLE", "MIXED+DRAIN", ...
    partitions: tuple[str, ...]
    reason: str = ""

    @property
    def usable(self) -> bool:
        return not any(flag in self.state.upper() for flag in UNUSABLE)


def fields(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one record (a value with spaces, like ``Reason=...``, is cut at its first)."""
    return dict(_FIELD.findall(line))


def gres_counts(text: str) -> dict[str, int]:
    """``gpu:h100:2(S:0-1),gpu:a100:1`` -> ``{"h100": 2, "a100": 1}`` (GPUs without a type are named ``gpu``)."""
    counts: dict[str, int] = {}
    for part in re.split(r",(?![^()]*\))", text or ""):
        part = part.strip()
        match = _GRES.match(part)
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(match.group(2))
        elif re.match(r"^gpu:(\d+)", part):
            counts["gpu"] = counts.get("gpu", 0) + int(re.match(r"^gpu:(\d+)", part).group(1))
    return counts


def parse_nodes(text: str) -> list[SlurmNode]:
    """The nodes of ``scontrol show nodes -d -o``'s output."""
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = fields(line)
        reason = line.split("Reason=", 1)[1].strip() if "Reason=" in line else ""
        nodes.append(SlurmNode(
            name=f["NodeName"], gpus=gres_counts(f.get("Gres", "")), used=gres_counts(f.get("GresUsed", "")),
            cpus=_int(f.get("CPUTot") or f.get("CPUs")), memory_mb=_int(f.get("RealMemory")),
            state=f.get("State", "UNKNOWN"), partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
            reason=reason))
    return nodes


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def in_partition(nodes: list[SlurmNode], partition: str | None) -> list[SlurmNode]:
    """The nodes of ``partition`` (None: every node)."""
    return [n for n in nodes if partition is None or partition in n.partitions]


def expand_hostlist(text: str) -> list[str]:
    """``n[1-3,5],gpu7`` -> ``["n1", "n2", "n3", "n5", "gpu7"]`` (Slurm's compressed host lists, one bracket
    a name); zero-padded ranges keep their width."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text or ""):
        match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            width = len(low)
            for i in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{i:0{width}d}{suffix}")
    return names


@dataclass
class JobGpus:
    """The GPUs one Slurm job holds, per node."""

    job_id: str
    name: str
    state: str
    per_node: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> type -> count


def parse_jobs(text: str) -> list[JobGpus]:
    """Jobs of ``scontrol show jobs -d -o`` with the GPUs they hold on each node (running ones)."""
    jobs = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        f = fields(line)
        job = JobGpus(f["JobId"], f.get("JobName", ""), f.get("JobState", ""))
        for nodes, gres in _JOB_NODE.findall(line):
            counts = gres_counts(gres)
            for node in expand_hostlist(nodes):
                job.per_node[node] = counts
        jobs.append(job)
    return jobs


def online(nodes: list[SlurmNode], types: dict[str, str], others: list[JobGpus]) -> dict[str, int]:
    """apportion's slots of each type that can run attempts now: the GPUs (Slurm type ``types[t]``) of the
    usable nodes, less those that jobs apportion did not start (``others``) hold."""
    held: dict[tuple[str, str], int] = {}
    for job in others:
        if job.state in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
            for node, counts in job.per_node.items():
                for slurm_type, n in counts.items():
                    held[(node, slurm_type)] = held.get((node, slurm_type), 0) + n
    out = {}
    for ours, slurm_type in types.items():
        out[ours] = sum(max(0, n.gpus.get(slurm_type, 0) - held.get((n.name, slurm_type), 0))
                        for n in nodes if n.usable)
    return out


def choose_nodes(nodes: list[SlurmNode], slurm_type: str, count: int, held: dict[str, int] | None = None
                 ) -> list[str] | None:
    """The nodes an attempt of ``count`` GPUs of ``slurm_type`` goes to, the same number of GPUs on each
    (Slurm's ``--gres`` is per node): the fewest nodes that can, each the usable node with the fewest free
    GPUs that still holds its share; None when no even split fits (Slurm is then left to place it).
    ``held``: GPUs of each node promised to attempts submitted but not yet started (not in ``used`` yet)."""
    held = held or {}
    free = sorted((n.gpus.get(slurm_type, 0) - n.used.get(slurm_type, 0) - held.get(n.name, 0), n.name)
                  for n in nodes if n.usable)
    for many in range(1, count + 1):
        if count % many:
            continue
        share = count // many
        fits = [name for f, name in free if f >= share]
        if len(fits) >= many:
            return sorted(fits[:many])
    return None
