"""Which slots cannot run attempts now (a Ray node is gone, an instance not rented), and where the
slots held now run: what a round leaves out and what `status`, `queue` and the dashboard show.

The executor counts live slots per type, not which slot is which (on Ray, slots are not bound to a
node until an attempt is placed): for each slot missing, a free slot of its type, highest first, is
the one shown offline and left out of the round."""

from __future__ import annotations

from typing import Iterable

from apportion.serve.base.slots import Slot


def offline_slots(slots: list[Slot], online: dict[str, int] | None, held: Iterable[str]) -> set[str]:
    """The ids of the slots offline when ``online`` slots of each type can run (None: all), ``held``
    the slots live attempts hold (never among them)."""
    if online is None:
        return set()
    held = set(held)
    missing: set[str] = set()
    for gpu_type in dict.fromkeys(s.gpu_type for s in slots):
        mine = [s.id for s in slots if s.gpu_type == gpu_type]
        excess = len(mine) - online.get(gpu_type, 0)
        for slot in reversed(mine):
            if excess <= 0:
                break
            if slot not in held:
                missing.add(slot)
                excess -= 1
    return missing


def slot_nodes(executor, holders: dict[int, tuple[str, ...]]) -> dict[str, str]:
    """Slot id -> the node its holder's rank runs on, for the jobs (``holders``: job id -> its slots, rank
    order) whose executor says (``nodes_of``: Ray); {} on an executor that runs everything here."""
    nodes_of = getattr(executor, "nodes_of", None)
    if nodes_of is None:
        return {}
    found: dict[str, str] = {}
    for job_id, slots in holders.items():
        try:
            nodes = nodes_of(job_id)
        except (OSError, RuntimeError):  # Ray cannot be asked now: not shown
            return found
        if nodes and len(nodes) == len(slots):
            found.update(zip(slots, nodes))
    return found


def largest_nodes(executor, capacity: dict[str, int]) -> dict[str, int]:
    """Slots of each type on the largest live node that has some, where the executor says how its slots
    lie on nodes (``slots_per_node``: Ray, Slurm); else, or for a type it names no node of, all of the type's
    ``capacity``: this machine, one node a type. The largest, as the simulator's ``ElasticView`` takes it
    where nodes differ: a job of that many fits one node."""
    per_node = getattr(executor, "slots_per_node", None)
    try:
        found = per_node() if per_node is not None else None
    except (OSError, RuntimeError):  # Ray or Slurm cannot be asked now: as if one node
        found = None
    out = {}
    for gpu_type, slots in capacity.items():
        on_nodes = [int(n) for n in (found or {}).get(gpu_type, ()) if int(n) > 0]
        out[gpu_type] = max(1, max(on_nodes) if on_nodes else int(slots))
    return out


def job_nodes(executor, job_id: int, live: bool) -> list[str] | None:
    """The nodes a live job's ranks run on, distinct, in rank order (Ray); None where not known."""
    nodes_of = getattr(executor, "nodes_of", None) if live else None
    if nodes_of is None:
        return None
    try:
        nodes = nodes_of(job_id)
    except (OSError, RuntimeError):
        return None
    return list(dict.fromkeys(nodes)) if nodes else None
