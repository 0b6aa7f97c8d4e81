"""What a Ray cluster offers apportion: the slots of each GPU type on each live node.

A GPU type is recognised on a node either by Ray's accelerator-type resource (Ray sets
``accelerator_type:V100 = 1`` on a node whose GPUs are V100s; each of the node's ``GPU`` is
one slot) or by a custom resource the node was started with (``ray start --resources
'{"k80": 4}'``: four slots). ``SlotResource`` says which, and what one slot asks of Ray.
Pure functions over ``ray.nodes()``'s records: no Ray needed to use them.
"""

from __future__ import annotations

from dataclasses import dataclass

ACCELERATOR_PREFIX = "accelerator_type:"
MARKER_AMOUNT = 0.001  # how much of a node's accelerator-type marker (1.0 in all) one slot asks for


@dataclass(frozen=True)
class SlotResource:
    """How one slot of a GPU type is asked of Ray."""

    gpu_type: str  # apportion's name: "v100", "cpu"
    resource: str  # counted on each node, one a slot: "GPU", "CPU" or a custom resource ("k80")
    marker: str | None = None  # a resource only nodes of this type have ("accelerator_type:V100")
    gpu: bool = False  # a slot also takes one of Ray's GPUs (the job gets CUDA_VISIBLE_DEVICES)

    def bundle(self) -> dict[str, float]:
        """One placement-group bundle: the resources of one slot."""
        wanted = {self.resource: 1.0}
        if self.marker:
            wanted[self.marker] = MARKER_AMOUNT
        if self.gpu and self.resource != "GPU":
            wanted["GPU"] = 1.0
        return wanted

    def slots_on(self, resources: dict[str, float]) -> int:
        """Slots of this type on a node with ``resources``."""
        if self.marker and resources.get(self.marker, 0) <= 0:
            return 0
        count = int(resources.get(self.resource, 0) + 1e-9)
        if self.gpu and self.resource != "GPU":
            count = min(count, int(resources.get("GPU", 0) + 1e-9))
        return count


def live_nodes(nodes: list[dict]) -> list[dict]:
    """The live nodes of ``ray.nodes()``."""
    return [n for n in nodes if n.get("Alive")]


def declared(gpu_type: str, accelerator_type: str | None = None, resource: str | None = None,
             nodes: list[dict] = ()) -> SlotResource:
    """A type declared by its accelerator label or by a custom resource. A custom resource takes
    GPUs too when every live node that has it has at least as many GPUs."""
    if accelerator_type is not None:
        return SlotResource(gpu_type, "GPU", f"{ACCELERATOR_PREFIX}{accelerator_type}", gpu=True)
    assert resource is not None
    if resource in ("CPU", "GPU"):
        return SlotResource(gpu_type, resource, gpu=resource == "GPU")
    holders = [n["Resources"] for n in live_nodes(list(nodes)) if n["Resources"].get(resource, 0) > 0]
    with_gpus = bool(holders) and all(r.get("GPU", 0) >= r[resource] for r in holders)
    return SlotResource(gpu_type, resource, gpu=with_gpus)


def detect(nodes: list[dict], name_of=str.lower) -> list[SlotResource]:
    """The types the live nodes' accelerator labels name (``name_of("V100")`` is apportion's name);
    a cluster with no labelled GPUs offers its CPUs as type ``cpu``. (GPUs Ray could not label
    are declared in the cluster file, by a custom resource.)"""
    found: dict[str, SlotResource] = {}
    for node in live_nodes(nodes):
        for marker in (k for k in node["Resources"] if k.startswith(ACCELERATOR_PREFIX)):
            gpu_type = name_of(marker[len(ACCELERATOR_PREFIX):])
            found.setdefault(gpu_type, SlotResource(gpu_type, "GPU", marker, gpu=True))
    if not found:
        return [SlotResource("cpu", "CPU")]
    return list(found.values())


def capacity(nodes: list[dict], types: list[SlotResource]) -> dict[str, list[int]]:
    """Slots of each type on each live node that has some: ``{gpu_type: [slots per node]}``."""
    out = {}
    for kind in types:
        counts = [kind.slots_on(n["Resources"]) for n in live_nodes(nodes)]
        out[kind.gpu_type] = [c for c in counts if c > 0]
    return out
