"""`apportion serve --executor ray`: the slots a Ray cluster offers, and the executor that runs jobs on it.

The server sees a Ray cluster as it sees a machine: slots of GPU types (``v100:0``,
``v100:1``, …, as many as the live nodes have when the server starts). Its rounds decide which
job gets how many slots of which type; Ray decides the nodes (``executors/ray_executor.py``).
The GPU types come from the cluster file's ``ray.gpu_types`` when it has them, else from
Ray's accelerator labels; a cluster with neither offers its CPUs as ``cpu`` slots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from apportion.core.market import Market
from apportion.executors.ray_autoscaler import node_bundle, request_nodes
from apportion.executors.ray_executor import RayExecutor, default_namespace, slot_ids
from apportion.executors.ray_nodes import capacity, declared, detect, live_nodes
from apportion.executors.ray_room import node_sizes
from apportion.policies.provisioning import ProvisioningPolicy
from apportion.serve.resources.rental.provisioner import RentedProvisioner
from apportion.serve.base.slots import Slot, gpu_type_of
from apportion.workloads.cluster_file import RaySettings


class RayUnavailable(Exception):
    """Why the server cannot use the Ray cluster, in one line."""


@dataclass(frozen=True)
class RayBackend:
    executor: RayExecutor
    slots: list[Slot]
    shared_dir: Path  # jobs' checkpoints, logs and exit records: SHARED_DIR/jobs/ID/
    nodes: dict[str, list[int]]  # slots of each type on each live node
    prices: dict[str, float]  # $ per GPU-hour the cluster file gives
    remote_nodes: int  # live nodes on other machines than the server's
    sizes: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (CPU cores, memory GiB) of those nodes

    def describe(self) -> str:
        """``v100 2+2 (16+16 cores, 60+60 GiB), k80 4 (8 cores, 30 GiB)``: slots, then Ray's CPUs and memory,
        per node of each type."""
        return ", ".join(f"{t} {'+'.join(map(str, n))}{_sizes(self.sizes.get(t, []))}"
                         for t, n in self.nodes.items() if n)


def _sizes(sizes: list[tuple[float, float]]) -> str:
    """`` (16+16 cores, 60+60 GiB)`` ('' when not known)."""
    if not sizes:
        return ""
    return (f" ({'+'.join(f'{cpus:g}' for cpus, _ in sizes)} cores,"
            f" {'+'.join(f'{memory:.3g}' for _, memory in sizes)} GiB)")


def ray_backend(state_dir: Path, address: str | None, settings: RaySettings | None = None,
                rented: bool = False) -> RayBackend:
    """Connect to the Ray cluster and read what it offers; RayUnavailable when it cannot be used.
    ``rented``: its nodes are rented as the server asks (``RayAutoscalerProvisioner``): the slots are the
    most the cluster file's ``node_groups`` allow of each type its ``ray.gpu_types`` declares, live or not."""
    if rented:
        _check_rentable(settings)
    address = address or (settings.address if settings else None) or os.environ.get("RAY_ADDRESS") or None
    shared = Path(settings.shared_dir) if settings and settings.shared_dir else Path(state_dir)
    try:
        shared.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RayUnavailable(f"the shared directory {shared} cannot be made: {err.strerror or err}") from None
    executor = RayExecutor(shared, address=address, namespace=default_namespace(state_dir))
    try:
        nodes = executor.nodes()
    except OSError as err:
        raise RayUnavailable(str(err)) from None
    if settings and settings.gpu_types:
        types = [declared(name, **{key: value}, nodes=nodes) for name, (key, value) in settings.gpu_types.items()]
    else:
        types = detect(nodes, gpu_type_of)
    per_node = capacity(nodes, types)
    if rented:
        return _rented_backend(executor, types, settings, shared, per_node, node_sizes(nodes, types))
    if not any(per_node.values()):
        wanted = ", ".join(f"{t.gpu_type} ({t.marker or t.resource})" for t in types)
        raise RayUnavailable(f"the Ray cluster ({len(live_nodes(nodes))} live nodes) has no slots of the GPU types"
                             f" {wanted}: start its nodes with those resources or declare others in the cluster"
                             " file's ray.gpu_types")
    executor.offer([t for t in types if per_node[t.gpu_type]])
    slots = [Slot(slot, gpu_type, "") for slot, gpu_type in slot_ids({t: sum(n) for t, n in per_node.items()})]
    here = executor.connect().util.get_node_ip_address()
    remote = sum(1 for n in live_nodes(nodes) if n.get("NodeManagerAddress") != here)
    return RayBackend(executor, slots, shared, per_node, dict(settings.prices) if settings else {}, remote,
                      node_sizes(nodes, types))


def _rented_backend(executor: RayExecutor, types: list, settings: RaySettings | None, shared: Path,
                    per_node: dict[str, list[int]], sizes: dict[str, list[tuple[float, float]]]) -> RayBackend:
    """The slots of a cluster whose nodes are rented: the most of each declared type, whatever is live now."""
    executor.offer(types)
    most = {t.gpu_type: settings.most[t.gpu_type] for t in types}
    slots = [Slot(slot, gpu_type, "") for slot, gpu_type in slot_ids(most)]
    return RayBackend(executor, slots, shared, per_node, dict(settings.prices), 0, sizes)



class RayAutoscalerProvisioner(RentedProvisioner):
    """Rents through a Ray cluster's autoscaler: each instance asked is a bundle of its GPU type's node
    resources (``ray_autoscaler.node_bundle``); the instances joined are the executor's live slots."""

    def __init__(self, executor: RayExecutor, market: Market, policy: ProvisioningPolicy, gpu_types: tuple[str, ...],
                 slots: dict[str, int], round_s: float, *, poll_every_s: float = 2.0) -> None:
        super().__init__(market, policy, gpu_types, slots, round_s)
        self.executor, self.poll_every_s = executor, poll_every_s
        self.bundles: list[dict[str, float]] = []  # the last request
        self._seen: tuple[float, dict[str, int]] | None = None  # (when, slots per type then)

    def _ask(self, wanted: np.ndarray, now: float) -> None:
        bundles = []
        for k in np.flatnonzero(wanted):
            kind = self.executor.types.get(str(self.market.gpu_type[k]))
            if kind is not None:
                bundles += [node_bundle(kind, int(self.market.gpus[k]))] * int(wanted[k])
        self.bundles = bundles
        request_nodes(bundles)
        self._seen = None

    def _present(self, now: float) -> dict[str, int]:
        if self._seen is None or now - self._seen[0] >= self.poll_every_s:
            self._seen = (now, self.executor.capacity() or {})
        return self._seen[1]


def _check_rentable(settings: RaySettings | None) -> None:
    """RayUnavailable unless the cluster file declares the types to rent and the most GPUs of each."""
    if settings is None or not settings.gpu_types:
        raise RayUnavailable("--market needs --cluster FILE whose ray.gpu_types declare the types to rent and whose"
                             " node_groups say the most GPUs of each (docs/cloud.md)")
    missing = [t for t in settings.gpu_types if not settings.most.get(t)]
    if missing:
        raise RayUnavailable(f"{settings.source}: node_groups give no GPUs of {', '.join(missing)}: with --market"
                             " they say the most the server may rent of each type in ray.gpu_types")
