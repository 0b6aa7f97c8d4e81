"""What a server does first, before its heavy imports: take its port, so that a busy one is said at once."""

from __future__ import annotations

import socket


class ServerError(Exception):
    """Why the server cannot start, in one line."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (0: any free port); ServerError naming the address if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and without
    # it a keep-alive client waits ~40 ms on each answer (Nagle against delayed ACKs)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ServerError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock
