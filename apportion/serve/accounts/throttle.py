"""A limit on how many wrong credentials one client may try: a token bucket per client address.

Each wrong credential takes a token from its address's bucket, which refills at ``per_s`` tokens
a second up to ``burst``. An empty bucket means the address is over the limit: its unknown
credentials are answered 429 before anything is looked up (edge.py), while a credential the
server has already verified still gets in (a flood from a shared address, a NAT or loopback,
must not lock its real users out). The buckets kept are bounded: the least recently seen
address is forgotten first. An IPv6 client counts by its /64, the block one host is given.
Each refusal is held back ``hold_s`` before it is sent (a timer, no thread): a client that
fires again as soon as it is answered then sends one request a second per connection, rather
than as many as the server can refuse, which would slow everyone else's answers.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from typing import Callable

FAILED_BURST = 20  # wrong credentials one address may try at once
FAILED_PER_S = 1.0  # and then this many a second
TRACKED_CLIENTS = 4096  # addresses remembered at most (each a few hundred bytes)
HOLD_S = 1.0  # a refusal is answered this late: a flooding client waits instead of the server working


def client_key(address: str | None) -> str:
    """What one client is counted by: its address, or its /64 for IPv6."""
    if not address:
        return "?"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FailureLimiter:
    """Wrong credentials tried by each client address, as token buckets (thread-safe)."""

    def __init__(self, burst: float = FAILED_BURST, per_s: float = FAILED_PER_S, most_clients: int = TRACKED_CLIENTS,
                 hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.hold_s = hold_s
        self.per_s = per_s
        self.most_clients = most_clients
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, when counted)
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, since = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - since) * self.per_s)

    def retry_after(self, address: str | None) -> int:
        """0 while ``address`` may try another credential; else the whole seconds until it may."""
        key = client_key(address)
        with self._lock:
            if key not in self._buckets:
                return 0
            tokens = self._tokens(key, self.clock())
        return 0 if tokens >= 1 else max(1, math.ceil((1 - tokens) / self.per_s))

    def failed(self, address: str | None) -> None:
        """Count one wrong credential from ``address``."""
        key = client_key(address)
        with self._lock:
            now = self.clock()
            # into debt (down to -burst): failures that were already under way when the bucket
            # emptied are paid back by a longer wait, so the rate stays per_s however many race
            self._buckets[key] = (max(-self.burst, self._tokens(key, now) - 1), now)
            self._buckets.move_to_end(key)
            while len(self._buckets) > self.most_clients:
                self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)
