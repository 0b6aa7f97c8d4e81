"""`apportion serve --executor slurm`: the slots a Slurm partition offers, and the executor that runs jobs there.

The server sees the partition as it sees a Ray cluster: slots of GPU types (``h100:0``, ``h100:1``,
…, as many GPUs of each GRES type as the partition's nodes have, drained or not: a drained or
down node's slots are offline through ``capacity()``, and come back when Slurm resumes it). Its
rounds decide which job gets how many slots of which type; the executor pins each attempt to
nodes that have them free (``executors/slurm/``). Slurm's GRES types are apportion's GPU types
through ``gpu_type_of`` (``a100``, ``nvidia_h100_80gb`` -> ``h100``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from apportion.executors.slurm.executor import SlurmExecutor
from apportion.serve.base.slots import Slot, gpu_type_of


class SlurmUnavailable(Exception):
    """Why the server cannot use the Slurm cluster, in one line."""


@dataclass(frozen=True)
class SlurmBackend:
    executor: SlurmExecutor
    slots: list[Slot]
    shared_dir: Path  # jobs' checkpoints, logs and exit records: SHARED_DIR/jobs/ID/ (every node must reach it)
    nodes: dict[str, list[int]]  # GPUs of each type on each node of the partition
    prices: dict[str, float] = field(default_factory=dict)
    remote_nodes: int = 0
    offline: tuple[str, ...] = ()  # nodes Slurm does not run jobs on now (drained, down): "n3 (drained: maintenance)"
    where = "Slurm"

    def describe(self) -> str:
        """``h100 2+2, a100 1 (partition gpus); offline now: n3 (DRAIN)``."""
        text = ", ".join(f"{t} {'+'.join(map(str, n))}" for t, n in self.nodes.items() if n)
        return text + (f"; offline now: {', '.join(self.offline)}" if self.offline else "")


def slurm_backend(state_dir: Path, partition: str | None = None, account: str | None = None,
                  env: dict[str, str] | None = None) -> SlurmBackend:
    """Read the partition's nodes from Slurm; SlurmUnavailable when it cannot be used."""
    shared = Path(state_dir).expanduser()
    try:
        shared.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SlurmUnavailable(f"the state directory {shared} cannot be made: {err.strerror or err}") from None
    executor = SlurmExecutor(shared, partition=partition, account=account, env=dict(env or {}))
    try:
        nodes = executor.nodes(fresh=True)
    except OSError as err:
        raise SlurmUnavailable(f"cannot read Slurm's nodes: {err}") from None
    if not nodes:
        where = f"partition {partition!r}" if partition else "the cluster"
        raise SlurmUnavailable(f"Slurm has no nodes in {where} (scontrol show nodes)")
    types: dict[str, str] = {}  # apportion's type -> Slurm's GRES type
    for node in nodes:
        for slurm_type in node.gpus:
            types.setdefault(gpu_type_of(slurm_type), slurm_type)
    if not types:
        raise SlurmUnavailable(f"no node of {partition or 'the cluster'} has GPUs in its GRES (Gres=gpu:TYPE:N):"
                               " apportion's slots are Slurm's GPUs")
    executor.types = types
    per_node = {t: [n.gpus[s] for n in nodes if n.gpus.get(s)] for t, s in types.items()}
    slots = [Slot(f"{t}:{i}", t, "") for t, counts in per_node.items() for i in range(sum(counts))]
    offline = tuple(f"{n.name} ({n.state}{': ' + n.reason if n.reason else ''})" for n in nodes if not n.usable)
    return SlurmBackend(executor, slots, shared, per_node, offline=offline)
