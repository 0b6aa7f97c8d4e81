"""Queues for hierarchical fairness, in Kueue's words: weight, nominal quota, borrowing.

Pure data and its validation; reading the YAML is ``apportion.workloads.queues``. A job's
``queue`` column names its queue; jobs whose queue is not listed (or empty) share the
default queue ``""``: weight 1, fair, no nominal quota, borrowing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from apportion.core.errors import InputError

QUEUE_POLICIES = ("fair", "fifo")  # how a queue shares among its own jobs
QUEUE_KEYS = ("name", "weight", "policy", "nominal", "borrowing")


@dataclass(frozen=True)
class Queue:
    """One queue: ``weight`` of the capacity left after quotas, ``nominal`` GPUs per type it is
    guaranteed while its jobs can use them (lent to others while they cannot), and whether it
    may ``borrow`` beyond its nominal quota."""

    name: str
    weight: float = 1.0
    policy: str = "fair"  # "fair" (max-min fairness over its jobs) or "fifo"
    nominal: dict[str, float] = field(default_factory=dict)  # GPU type -> GPUs
    borrowing: bool = True


DEFAULT_QUEUE = Queue("")


@dataclass(frozen=True)
class QueueConfig:
    """The queues of a cluster; ``source`` and ``lines`` (field -> 1-based line) are only for
    error messages."""

    queues: tuple[Queue, ...]
    source: str = "<queues>"
    lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError(f"queue names must be unique, got {names}")

    def queue(self, name: str) -> Queue:
        """The queue called ``name``, or the default queue when it is not listed."""
        for q in self.queues:
            if q.name == name:
                return q
        return DEFAULT_QUEUE

    def check_cluster(self, gpu_types: tuple[str, ...], capacity: np.ndarray) -> None:
        """InputError unless every nominal GPU type is in the cluster and, per type, the nominal
        quotas add up to no more than the cluster has (so every quota can be honoured at once)."""
        total = dict.fromkeys(gpu_types, 0.0)
        for i, q in enumerate(self.queues):
            for gpu_type, gpus in q.nominal.items():
                where = f"queues[{i}].nominal.{gpu_type}"
                if gpu_type not in total:
                    raise InputError(
                        self.source,
                        f"queue '{q.name}' has a nominal quota of GPU type '{gpu_type}', which the cluster"
                        f" does not have (cluster: {', '.join(gpu_types)})",
                        line=self.lines.get(where),
                        field=where,
                    )
                total[gpu_type] += gpus
                have = float(capacity[gpu_types.index(gpu_type)])
                if total[gpu_type] > have + 1e-9:
                    raise InputError(
                        self.source,
                        f"nominal quotas of '{gpu_type}' add up to {total[gpu_type]:g} GPUs but the cluster"
                        f" has {have:g}",
                        line=self.lines.get(where),
                        field=where,
                    )

    def nominal_matrix(self, queues: list[Queue], gpu_types: tuple[str, ...]) -> np.ndarray:
        """[len(queues), T] nominal GPUs of each queue on each cluster type."""
        matrix = np.zeros((len(queues), len(gpu_types)))
        for i, q in enumerate(queues):
            for gpu_type, gpus in q.nominal.items():
                if gpu_type in gpu_types:
                    matrix[i, gpu_types.index(gpu_type)] = gpus
        return matrix


def queue_config_from_mapping(data: object, source: str) -> QueueConfig:
    """Build from parsed YAML ``{queues: [{name, weight, policy, nominal, borrowing}]}``.

    InputError names the field (``queues[1].weight``); the loader adds the line.
    """
    if not isinstance(data, dict) or "queues" not in data:
        raise InputError(source, "expected a mapping with a 'queues' list", field="queues")
    extra = sorted(str(k) for k in data if k != "queues")
    if extra:
        raise InputError(source, f"unknown key '{extra[0]}' (known: queues)", field=extra[0])
    raw = data["queues"]
    if not isinstance(raw, list) or not raw:
        raise InputError(source, "must be a non-empty list", field="queues")
    queues: list[Queue] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"queues[{i}]"
        if not isinstance(entry, dict):
            raise InputError(source, "must be a mapping", field=where)
        unknown = sorted(str(k) for k in entry if k not in QUEUE_KEYS)
        if unknown:
            raise InputError(
                source, f"unknown key '{unknown[0]}' (known: {', '.join(QUEUE_KEYS)})", field=f"{where}.{unknown[0]}"
            )
        name = entry.get("name")
        if isinstance(name, (int, float)) and not isinstance(name, bool):
            name = str(name)
        if not isinstance(name, str) or not name.strip():
            raise InputError(source, "must be a non-empty queue name", field=f"{where}.name")
        name = name.strip()
        if name in seen:
            raise InputError(source, f"queue '{name}' is listed twice", field=f"{where}.name")
        seen.add(name)
        weight = entry.get("weight", 1.0)
        if not _is_number(weight) or not weight > 0:
            raise InputError(source, f"must be a number > 0, got {weight!r}", field=f"{where}.weight")
        policy = entry.get("policy", "fair")
        if policy not in QUEUE_POLICIES:
            raise InputError(
                source, f"must be one of {', '.join(QUEUE_POLICIES)}, got {policy!r}", field=f"{where}.policy"
            )
        borrowing = entry.get("borrowing", True)
        if not isinstance(borrowing, bool):
            raise InputError(source, f"must be true or false, got {borrowing!r}", field=f"{where}.borrowing")
        nominal_raw = entry.get("nominal", {}) or {}
        if not isinstance(nominal_raw, dict):
            raise InputError(
                source, "must be a mapping of GPU type to GPUs, e.g. {v100: 8}", field=f"{where}.nominal"
            )
        nominal: dict[str, float] = {}
        for gpu_type, gpus in nominal_raw.items():
            key = str(gpu_type).strip().lower()
            if not _is_number(gpus) or gpus < 0:
                raise InputError(
                    source, f"must be a number of GPUs >= 0, got {gpus!r}", field=f"{where}.nominal.{gpu_type}"
                )
            nominal[key] = nominal.get(key, 0.0) + float(gpus)
        queues.append(Queue(name, float(weight), policy, nominal, borrowing))
    return QueueConfig(tuple(queues), source)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
