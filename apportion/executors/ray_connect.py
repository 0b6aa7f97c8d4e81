"""Join a Ray cluster from this process, or say in one line why not (Ray missing, nobody there).

Ray's own ``ray.init`` waits a long time for an address where nothing listens; a TCP probe
first makes that a prompt error.
"""

from __future__ import annotations

import logging
import socket

PROBE_S = 5.0  # how long the head node's port may take to accept a connection


def join(address: str | None, namespace: str | None = None):
    """``ray``, connected to the cluster at ``address`` (None or ``auto``: RAY_ADDRESS, else the
    one started on this machine); OSError naming what is wrong. A process already connected
    stays as it is."""
    try:
        import ray
    except ImportError:
        raise OSError("Ray is not installed here: pip install 'apportion[ray]' (docs/ray.md)") from None
    if ray.is_initialized():
        return ray
    target = address or "auto"
    if target != "auto" and not target.startswith(("ray://", "http://", "https://")):
        probe(target)
    try:
        ray.init(address=target, namespace=namespace, log_to_driver=False, logging_level=logging.WARNING,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = target if target != "auto" else "auto (RAY_ADDRESS, else the cluster started on this machine)"
        raise OSError(f"cannot connect to the Ray cluster at {where}: {err}") from None
    return ray


def probe(address: str) -> None:
    """OSError unless something accepts TCP connections at ``HOST:PORT``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise OSError(f"{address!r} is not a Ray address (HOST:PORT, e.g. 10.0.0.1:6379, or auto)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S).close()
    except OSError as err:
        raise OSError(f"no Ray cluster at {address}: {err.strerror or err} (is `ray start --head` running there?)"
                      ) from None
