"""One notification POST: to an address the operator's rule allows, within a hard deadline.

The URL's host is resolved once and every address it gives is checked (notify_hosts.py) before
one is connected to, so a name cannot be made to resolve to an allowed address at the check and
to another at the connection. Redirects are not followed (any answer is the answer) and only
the status line and headers are read, with http.client's bounds on them; the body never is.
A timer shuts the socket down at the deadline, so a receiver that answers a byte at a time
holds a sender for ``timeout_s`` at most.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time

from apportion.serve.jobs.notify_hosts import NotifyHosts, NotifyTarget


class NotSent(Exception):
    """The POST did not get an answer (refused by the rule, unresolvable, unreachable, too slow);
    ``refused``: the operator's rule refused the address, which no retry changes."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def post_json(target: NotifyTarget, body: bytes, hosts: NotifyHosts, timeout_s: float) -> int:
    """POST ``body`` (JSON) to ``target``; the HTTP status it answered. NotSent saying why otherwise.
    ``timeout_s`` bounds the connection and the exchange together (resolving the name is the system's)."""
    address = _allowed_address(target, hosts)
    started = time.monotonic()
    try:
        sock = socket.create_connection((str(address), target.port), timeout=timeout_s)
    except TimeoutError:
        raise NotSent(f"no answer from {target.host_header} within {timeout_s:g} s") from None
    except OSError as err:
        raise NotSent(f"cannot connect to {target.host_header} ({address}): {_said(err)}") from None
    current = [sock]  # what the deadline shuts down: the TLS socket once it wraps the plain one
    expired = threading.Event()
    deadline = threading.Timer(max(0.0, timeout_s - (time.monotonic() - started)), _shut, args=(current, expired))
    deadline.daemon = True
    deadline.start()
    try:
        if target.scheme == "https":
            current[0] = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host,
                                                                  do_handshake_on_connect=False)
            current[0].do_handshake()
        connection = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
        connection.sock = current[0]
        connection.request("POST", target.path, body=body, headers={
            "Host": target.host_header, "Content-Type": "application/json", "User-Agent": "apportion",
            "Connection": "close"})
        status = connection.getresponse().status  # the status line and headers: the body is not read
        return int(status)
    except (OSError, http.client.HTTPException, ValueError) as err:
        if expired.is_set() or isinstance(err, TimeoutError):
            raise NotSent(f"no answer from {target.host_header} within {timeout_s:g} s") from None
        raise NotSent(f"{target.host_header}: {_said(err)}") from None
    finally:
        deadline.cancel()
        current[0].close()


def _allowed_address(target: NotifyTarget, hosts: NotifyHosts) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address to connect to: the first ``target``'s host resolves to, when the rule allows every one."""
    try:
        found = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise NotSent(f"cannot resolve {target.host}: {_said(err)}") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in found]
    if not addresses:
        raise NotSent(f"{target.host} resolves to no address")
    for address in addresses:
        refusal = hosts.address_refusal(target.host, address)
        if refusal is not None:
            raise NotSent(refusal, refused=True)
    return addresses[0]


def _shut(current: list[socket.socket], expired: threading.Event) -> None:
    expired.set()
    try:
        current[0].shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _said(err: BaseException) -> str:
    text = " ".join(str(err).split())[:200]
    return text or type(err).__name__
