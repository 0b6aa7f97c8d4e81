"""Asking a Ray cluster's autoscaler for nodes: one bundle an instance, of its GPU type's node resources.

``request_resources`` replaces the cluster's standing request: the autoscaler starts nodes until
the bundles fit, and may stop idle nodes no bundle needs. Ray is imported only when asked.
"""

from __future__ import annotations

from apportion.executors.ray_nodes import SlotResource


def node_bundle(kind: SlotResource, slots: int) -> dict[str, float]:
    """One node's worth of ``slots`` slots of ``kind``, as the Ray executor asks for each slot."""
    return {name: (amount if name == kind.marker else amount * slots) for name, amount in kind.bundle().items()}


def request_nodes(bundles: list[dict[str, float]]) -> None:
    """The autoscaler's standing request becomes ``bundles`` (none: no node is asked for)."""
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=[dict(b) for b in bundles])
