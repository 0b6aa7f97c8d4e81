"""What a job's ``cpus`` and ``memory_gb`` ask of a Ray cluster: its bundles, and the nodes that could hold them.

A job's cores and memory are spread evenly over its bundles (one a slot), on top of what the
slot itself asks (``SlotResource.bundle``): ``CPU`` cpus/world (added to the slot's own CPU where
the slot is a core, type ``cpu``) and Ray's ``memory`` resource, in bytes. A job that asks
nothing keeps the slot's bundle as it is. Pure functions over ``ray.nodes()``'s records: no Ray
needed to use them.
"""

from __future__ import annotations

import math

from apportion.executors.ray_nodes import SlotResource, capacity, live_nodes

GIB = 2**30
CPU_STEPS = 10_000  # Ray counts resources to 4 decimal places: a share is rounded down to them, so world shares fit


def job_bundle(kind: SlotResource, world: int, cpus: float | None = None, memory_gb: float | None = None
               ) -> dict[str, float]:
    """One of the ``world`` bundles of a job of ``kind`` asking ``cpus`` cores and ``memory_gb`` GiB in all."""
    bundle = kind.bundle()
    if cpus:
        bundle["CPU"] = bundle.get("CPU", 0.0) + math.floor(cpus / world * CPU_STEPS + 1e-9) / CPU_STEPS
    if memory_gb:
        bundle["memory"] = float(math.floor(memory_gb * GIB / world))
    return bundle


def bundles_on(resources: dict[str, float], bundle: dict[str, float]) -> int:
    """How many copies of ``bundle`` a node with ``resources`` (in all, taken or not) could hold."""
    counts = [math.floor(resources.get(name, 0.0) / amount + 1e-9) for name, amount in bundle.items() if amount > 0]
    return min(counts) if counts else 0


def most_on_one_node(nodes: list[dict], bundle: dict[str, float]) -> int:
    """The most copies of ``bundle`` one live node could hold (0: none could hold one)."""
    return max((bundles_on(n["Resources"], bundle) for n in live_nodes(nodes)), default=0)


def fits(nodes: list[dict], bundle: dict[str, float], world: int) -> bool:
    """Could the live nodes hold ``world`` copies of ``bundle`` between them (Ray's ``PACK``)?"""
    return sum(bundles_on(n["Resources"], bundle) for n in live_nodes(nodes)) >= world


def node_sizes(nodes: list[dict], kinds: list[SlotResource]) -> dict[str, list[tuple[float, float]]]:
    """``{gpu_type: [(CPU cores, memory GiB) of each live node]}``, the nodes in ``ray_nodes.capacity``'s order."""
    out = {}
    for kind in kinds:
        holders = [n["Resources"] for n in live_nodes(nodes) if capacity([n], [kind])[kind.gpu_type]]
        out[kind.gpu_type] = [(r.get("CPU", 0.0), r.get("memory", 0.0) / GIB) for r in holders]
    return out


def room_by_type(nodes: list[dict], kinds: list[SlotResource]) -> dict[str, tuple[float | None, float | None]]:
    """``{gpu_type: (CPU cores, memory GiB)}`` the live nodes offer beside each type's slots, each node's
    divided among the types of its slots in proportion to them (as a server's round plans one node per
    type); ``(None, None)`` for a type whose slot is itself a core (``cpu``: its slots and a job's asks
    draw on the same cores, which only Ray's placement can weigh)."""
    counted = [k for k in kinds if k.resource != "CPU"]
    room = {k.gpu_type: [0.0, 0.0] for k in counted}
    for node in live_nodes(nodes):
        resources = node["Resources"]
        slots = {k.gpu_type: k.slots_on(resources) for k in counted}
        total = sum(slots.values())
        for kind in counted:
            if slots[kind.gpu_type]:
                part = slots[kind.gpu_type] / total
                room[kind.gpu_type][0] += resources.get("CPU", 0.0) * part
                room[kind.gpu_type][1] += resources.get("memory", 0.0) / GIB * part
    return {k.gpu_type: (None, None) if k.resource == "CPU" else (room[k.gpu_type][0], room[k.gpu_type][1])
            for k in kinds}


def refusal(nodes: list[dict], kinds: list[SlotResource], gpus: int, cpus: float | None, memory_gb: float | None
            ) -> tuple[str, str] | None:
    """Why no live nodes of ``kinds`` could ever hold a job of ``gpus`` slots asking ``cpus`` cores and
    ``memory_gb`` GiB beside them, as ``(field, message)``; None when some could, or when a kind has no
    live node to judge by (it may join later)."""
    if not (cpus or memory_gb):
        return None
    holders = {k.gpu_type: [n for n in live_nodes(nodes) if bundles_on(n["Resources"], k.bundle()) > 0] for k in kinds}
    if not kinds or any(not holders[k.gpu_type] for k in kinds):
        return None

    def any_fits(with_cpus, with_memory) -> bool:
        return any(fits(holders[k.gpu_type], job_bundle(k, gpus, with_cpus, with_memory), gpus) for k in kinds)

    if any_fits(cpus, memory_gb):
        return None
    cores_fit, memory_fits = any_fits(cpus, None), any_fits(None, memory_gb)
    field = "memory_gb" if cores_fit and not memory_fits else "cpus"  # each fits alone: the cores are named
    asked = [f"{cpus} CPU cores"] if field == "cpus" else []
    if field == "memory_gb" or (memory_gb and (not memory_fits or cores_fit)):
        asked.append(f"{memory_gb:g} GiB of memory")
    largest = "; ".join(_largest(k, holders[k.gpu_type], field) for k in kinds)
    return field, (f"asks for {' and '.join(asked)} beside its {gpus} slot{'s' if gpus != 1 else ''};"
                   f" no Ray nodes have room for them: {largest}")


def _largest(kind: SlotResource, nodes: list[dict], field: str) -> str:
    """``the largest v100 node has 32 CPU cores for 4 slots``: the node of ``kind`` with the most of what
    ``field`` asks."""
    resource = "memory" if field == "memory_gb" else "CPU"
    biggest = max(nodes, key=lambda n: n["Resources"].get(resource, 0.0))
    amount = biggest["Resources"].get(resource, 0.0)
    slots = bundles_on(biggest["Resources"], kind.bundle())
    has = f"{amount / GIB:.3g} GiB of memory" if resource == "memory" else f"{amount:g} CPU cores"
    shared = ", one of them each slot's own" if resource == "CPU" and kind.resource == "CPU" else ""
    return f"the largest {kind.gpu_type} node has {has} for {slots} slot{'s' if slots != 1 else ''}{shared}"
