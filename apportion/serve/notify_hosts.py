"""Where a job's ``notify:`` URL may point: the URL's checks at submit, and the operator's rule
(``--notify-hosts``) for the addresses the server may connect to.

The URL is chosen by whoever submits the job, so it is a request the server makes on their
behalf (SSRF). By default the server refuses addresses no notification needs and an attacker
wants: link-local (169.254.169.254, a cloud's metadata service), loopback (the server's own
machine), multicast, unspecified and reserved ones. An operator's list replaces that rule: a
host name (``hooks.example.com``, or ``*.example.com`` for its subdomains) allows that name
wherever it resolves except link-local addresses, an address or network (``10.1.0.0/16``,
``127.0.0.1``) allows those addresses, link-local ones included when named.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from apportion.core.errors import InputError
from apportion.serve.bounds import MAX_URL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class NotifyTarget:
    """A checked ``notify:`` URL, split: what a POST to it needs."""

    url: str
    scheme: str  # http or https
    host: str  # a name, or an address without brackets
    port: int
    path: str  # with its query, at least "/"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def notify_target(value: object, source: str, field: str = "notify") -> NotifyTarget:
    """``value`` as a notification URL; InputError naming ``field`` unless it is an http(s) URL
    with a host, no user or password, and at most MAX_URL characters of printable ASCII."""
    if not isinstance(value, str):
        raise InputError(source, f"must be an http:// or https:// URL, got {type(value).__name__}", field=field)
    if len(value) > MAX_URL:
        raise InputError(source, f"must be at most {MAX_URL} characters, got {len(value):,}", field=field)
    if not value.isascii() or not value.isprintable() or " " in value:
        raise InputError(source, "must be a URL of printable ASCII without spaces (percent-encode the rest)",
                         field=field)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as err:
        raise InputError(source, f"is not a URL: {err}", field=field) from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InputError(source, f"must be an http:// or https:// URL, got scheme {parts.scheme or 'none'!r}",
                         field=field)
    if not parts.hostname:
        raise InputError(source, "names no host", field=field)
    if parts.username is not None or parts.password is not None:
        raise InputError(source, "must not carry a user or password (use a token in the path instead)", field=field)
    if port == 0:
        raise InputError(source, "names port 0", field=field)
    scheme = parts.scheme.lower()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    port = port if port is not None else 443 if scheme == "https" else 80
    return NotifyTarget(value, scheme, parts.hostname.rstrip(".").lower(), port, path)


@dataclass(frozen=True)
class NotifyHosts:
    """The operator's rule for notification destinations; ``names`` and ``networks`` None: the default
    rule (no link-local, loopback, multicast, unspecified or reserved address); ``off``: none at all."""

    names: tuple[str, ...] | None = None  # exact names, and "*.domain" for any name under domain
    networks: tuple[Network, ...] | None = None
    off: bool = False

    @classmethod
    def parse(cls, text: str | None, source: str = "--notify-hosts") -> NotifyHosts:
        """``None``: the default rule; ``"none"``: no notifications; else comma-separated host names,
        ``*.domain`` patterns, addresses and networks (InputError naming the bad entry)."""
        if text is None:
            return cls()
        entries = [entry.strip().lower() for entry in text.split(",") if entry.strip()]
        if entries == ["none"]:
            return cls(off=True)
        if not entries:
            raise InputError(source, "is empty: give host names, addresses or networks, or 'none'")
        names: list[str] = []
        networks: list[Network] = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            bare = entry.removeprefix("*.")
            if not bare or len(entry) > 253 or not all(c.isalnum() or c in "-." for c in bare):
                raise InputError(source, f"{entry!r} is not a host name, *.domain, address or network")
            names.append(entry.rstrip("."))
        return cls(tuple(names), tuple(networks))

    def refusal(self, target: NotifyTarget) -> str | None:
        """Why ``target`` is refused before anything is resolved (at submit); None: it may be tried."""
        if self.off:
            return "this server sends no notifications"
        address = _address(target.host)
        if address is not None:
            return self.address_refusal(target.host, address)
        if self.names is None:
            return None
        if self._name_allowed(target.host):
            return None
        return f"{target.host} is not among the hosts this server notifies (its --notify-hosts)"

    def address_refusal(self, host: str, address: Address) -> str | None:
        """Why connecting to ``address`` (what ``host`` resolved to) is refused; None: allowed."""
        if self.off:
            return "this server sends no notifications"
        address = _unmapped(address)
        if self.networks is not None or self.names is not None:
            if any(address in network for network in self.networks or ()):
                return None
            if self._name_allowed(host) and not address.is_link_local:
                return None
            return f"{address} ({host}) is not among the hosts this server notifies (its --notify-hosts)"
        if address.is_link_local or address.is_loopback or address.is_multicast or address.is_unspecified \
                or address.is_reserved:
            return f"{address} ({host}) is a link-local, loopback, multicast or reserved address"
        return None

    def _name_allowed(self, host: str) -> bool:
        for name in self.names or ():
            if name.startswith("*.") and host.endswith(name[1:]) and len(host) > len(name) - 1:
                return True
            if host == name:
                return True
        return False


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _unmapped(address: Address) -> Address:
    """An IPv4-mapped IPv6 address (::ffff:169.254.169.254) as the IPv4 address it is."""
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address
