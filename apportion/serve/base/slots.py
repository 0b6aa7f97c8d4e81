"""The slots a server offers: this machine's GPUs, or CPU slots, as ids and one GPU type each;
and the node's CPU cores and memory that the jobs on its slots share.

A slot is what one GPU of a job's ``gpus`` takes: ``gpu:3`` (CUDA device 3, of the type its
model maps to, e.g. ``h100``) or ``cpu:0`` (a share of the host, no CUDA device). ``--slots``
may also say the node's cores and memory (``h100:4,cores:32,memory_gb:256``); by default they
are this machine's: the cores this process may run on, its memory.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from apportion.core.errors import InputError

# substrings of `nvidia-smi` model names, most specific first, and the catalog type they map to
_MODELS = (
    ("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("v100", "v100"), ("p100", "p100"),
    ("k80", "k80"), ("t4", "t4"),
)


@dataclass(frozen=True)
class Slot:
    id: str  # "cpu:0", "gpu:3"
    gpu_type: str  # "cpu", "h100", …
    device: str  # the CUDA device index, "" for a CPU slot


NODE_KEYS = ("cores", "memory_gb")  # --slots groups that size the node, not slots


@dataclass(frozen=True)
class Node:
    """The CPU cores (their ids on this machine) and memory the jobs on a server's slots share (none
    known: the nodes of a Ray cluster, whose cores the server does not divide)."""

    cpus: tuple[int, ...]
    memory_gib: float


def shares_by_type(node: Node, slots: list[Slot]) -> dict[str, tuple[float | None, float | None]]:
    """Each slot type's part of the node's cores and memory (None: not known, not counted), in
    proportion to its slots: a round plans each type's slots as a node of their own, so that what
    placement lets the jobs on each type ask for together never exceeds the machine's."""
    counts: dict[str, int] = {}
    for slot in slots:
        counts[slot.gpu_type] = counts.get(slot.gpu_type, 0) + 1
    total = sum(counts.values())
    cores = float(len(node.cpus)) if node.cpus else None
    memory = float(node.memory_gib) if node.memory_gib else None
    return {t: (None if cores is None else cores * n / total, None if memory is None else memory * n / total)
            for t, n in counts.items()}


def this_machine() -> Node:
    """The cores this process may run on and this machine's memory."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    memory_gib = 0.0
    try:
        match = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        memory_gib = int(match.group(1)) / 2**20 if match else 0.0
    except OSError:
        pass
    return Node(cpus, memory_gib)


def parse_node(text: str | None, source: str = "--slots") -> Node:
    """The node ``--slots`` describes: ``cores:N`` (this machine's first N cores, or ids 0..N-1 beyond
    them) and ``memory_gb:X``; what it leaves out is this machine's."""
    machine = this_machine()
    cpus, memory_gib = machine.cpus, machine.memory_gib
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        key, _, value = part.partition(":")
        key = key.strip().lower()
        if key == "cores":
            if not value.strip().isdigit() or int(value) < 1:
                raise InputError(source, f"'{part}' is not cores:N with N >= 1 (the node's CPU cores)")
            n = int(value)
            cpus = machine.cpus[:n] if n <= len(machine.cpus) else tuple(range(n))
        elif key == "memory_gb":
            try:
                memory_gib = float(value)
            except ValueError:
                memory_gib = math.nan
            if not memory_gib > 0 or math.isinf(memory_gib):
                raise InputError(source, f"'{part}' is not memory_gb:X with X > 0 (the node's memory in GiB)")
    return Node(tuple(cpus), memory_gib)


def gpu_type_of(model: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``h100``; a model the catalog does not know → its name, simplified."""
    name = model.lower()
    for needle, gpu_type in _MODELS:
        if re.search(rf"\b{needle}", name):
            return gpu_type
    simplified = re.sub(r"^(nvidia|tesla|geforce)\s+", "", name).strip()
    return re.sub(r"[^a-z0-9]+", "-", simplified).strip("-") or "gpu"


def detect_gpus(nvidia_smi: str | None = None) -> list[Slot]:
    """This machine's NVIDIA GPUs through ``nvidia-smi`` (none when it is missing or fails)."""
    command = nvidia_smi or shutil.which("nvidia-smi")
    if command is None:
        return _from_proc()
    try:
        out = subprocess.run(
            [command, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    slots = []
    for line in out.splitlines():
        index, _, model = line.partition(",")
        if index.strip().isdigit():
            slots.append(Slot(f"gpu:{index.strip()}", gpu_type_of(model.strip()), index.strip()))
    return slots


def _from_proc() -> list[Slot]:
    """The NVIDIA driver's /proc listing, when nvidia-smi is not on PATH."""
    root = Path("/proc/driver/nvidia/gpus")
    if not root.is_dir():
        return []
    slots = []
    for i, entry in enumerate(sorted(root.iterdir())):
        try:
            text = (entry / "information").read_text()
        except OSError:
            continue
        match = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
        slots.append(Slot(f"gpu:{i}", gpu_type_of(match.group(1) if match else "gpu"), str(i)))
    return slots


def parse_slots(text: str, gpus: list[Slot] | None = None, source: str = "--slots") -> list[Slot]:
    """``cpu:2`` → two CPU slots; ``h100:4`` → the first 4 detected GPUs of that type (or
    GPUs 0-3 declared as that type when none are detected); several groups with commas."""
    slots: list[Slot] = []
    detected = list(gpus or [])
    next_device = 0
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not [p for p in parts if p.partition(":")[0].strip().lower() not in NODE_KEYS]:
        raise InputError(source, "no slots; expected e.g. 'cpu:2' or 'h100:4'")
    for part in parts:
        gpu_type, _, count = part.partition(":")
        gpu_type = gpu_type.strip().lower()
        if gpu_type in NODE_KEYS:  # the node's size: parse_node
            continue
        if not gpu_type or not count.strip().isdigit() or int(count) < 1:
            raise InputError(source, f"'{part}' is not TYPE:COUNT (e.g. 'cpu:2' or 'h100:4')")
        n = int(count)
        if gpu_type == "cpu":
            start = sum(1 for s in slots if s.gpu_type == "cpu")
            slots += [Slot(f"cpu:{start + i}", "cpu", "") for i in range(n)]
            continue
        if detected:
            mine = [s for s in detected if s.gpu_type == gpu_type and s not in slots]
            if len(mine) < n:
                have = ", ".join(sorted({s.gpu_type for s in detected}))
                raise InputError(source, f"asks for {n} {gpu_type} GPUs; this machine has "
                                 f"{len(mine)} (found: {have})")
            slots += mine[:n]
        else:
            slots += [Slot(f"gpu:{next_device + i}", gpu_type, str(next_device + i)) for i in range(n)]
            next_device += n
    parse_node(text, source)  # its cores and memory spelt right too
    return slots


def describe(slots: list[Slot]) -> str:
    """``cpu:2`` / ``h100:4,a100:2``: the count of each type."""
    counts: dict[str, int] = {}
    for s in slots:
        counts[s.gpu_type] = counts.get(s.gpu_type, 0) + 1
    return ",".join(f"{t}:{n}" for t, n in counts.items())
