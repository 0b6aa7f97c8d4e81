"""Where a job's ``notify:`` URL may point: the URL's checks at submit, and the operator's rule
(``--notify-hosts``) for the addresses the server may connect to.

The URL is chosen by whoever submits the job, so it is a request the server makes on their
behalf (SSRF). By default the server notifies public addresses only: it refuses loopback,
link-local, private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), multicast,
reserved and documentation ranges, the clouds' metadata services (169.254.169.254,
100.100.100.200, fd00:ec2::254, 192.0.0.192, ``metadata.google.internal`` and the other names
in ``METADATA_NAMES``), local names (``localhost``, ``*.internal``, ...), and each of these
inside an IPv6 form (IPv4-mapped, -compatible, NAT64, 6to4). An operator's list replaces that
rule: a host name (``hooks.example.com``, or ``*.example.com`` for its subdomains) allows that
name wherever it resolves except link-local and metadata addresses, an address or network
(``10.1.0.0/16``, ``127.0.0.1``) allows those addresses, link-local ones included when named.

A URL whose text alone is refused is refused at submit: numeric host forms that resolvers read
as addresses (``2130706433``, ``0177.0.0.1``, ``127.1``, ``0x7f.1``), zone ids, characters no
host name has, a user or password.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from apportion.core.errors import InputError
from apportion.serve.base.bounds import MAX_URL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Hetzner, Oracle (v1)
    "169.254.170.2",  # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud
    "fd00:ec2::254",  # AWS over IPv6
    "169.254.170.23", "fd00:ec2::23",  # AWS EKS Pod Identity (credentials)
))
METADATA_NAMES = frozenset((  # documented names of the clouds' metadata services
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
    "metadata.tencentyun.com", "metadata.platformequinix.com", "metadata.packet.net", "metadata.azure.com",
))
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".arpa")  # never public names
# Refused by the default rule, each with what it is (checked after an IPv6 form is unwrapped to its IPv4 address)
REFUSED_NETWORKS: tuple[tuple[Network, str], ...] = tuple((ipaddress.ip_network(net), what) for net, what in (
    ("0.0.0.0/8", "an unspecified address"), ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private address"), ("172.16.0.0/12", "a private address"), ("192.168.0.0/16", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"), ("169.254.0.0/16", "a link-local address"),
    ("192.0.0.0/24", "an IETF protocol address"), ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"), ("203.0.113.0/24", "a documentation address"),
    ("198.18.0.0/15", "a benchmarking address"), ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "an unspecified address"), ("::1/128", "a loopback address"), ("100::/64", "a discard address"),
    ("64:ff9b:1::/48", "a local NAT64 address"), ("2001::/32", "a Teredo address"),
    ("2001:db8::/32", "a documentation address"), ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"), ("fec0::/10", "a site-local address"), ("ff00::/8", "a multicast address"),
    ("::/8", "a reserved address"),
))
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
_NUMBER_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")  # what resolvers (inet_aton) read as part of an address
_DOTTED_QUAD = re.compile(r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}")


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
    host_problem = _host_problem(parts.hostname, bracketed="[" in parts.netloc)
    if host_problem:
        raise InputError(source, host_problem, field=field)
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
        if self.names is None and self.networks is None:
            return _name_refusal(target.host)
        if self.names is None:
            return None
        if self._name_allowed(target.host):
            return None
        return f"{target.host} is not among the hosts this server notifies (its --notify-hosts)"

    def address_refusal(self, host: str, address: Address) -> str | None:
        """Why connecting to ``address`` (what ``host`` resolved to) is refused; None: allowed."""
        if self.off:
            return "this server sends no notifications"
        inner = _unwrapped(address)
        if self.networks is not None or self.names is not None:
            if any(a in network for network in self.networks or () for a in {address, inner}):
                return None
            if self._name_allowed(host) and not inner.is_link_local and inner not in METADATA_ADDRESSES:
                return None
            return f"{address} ({host}) is not among the hosts this server notifies (its --notify-hosts)"
        what = _refused_as(inner)
        return None if what is None else f"{address} ({host}) is {what}: not notified (--notify-hosts opens it)"

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


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")


def _unwrapped(address: Address) -> Address:
    """The IPv4 address an IPv6 form carries (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64
    64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::), which is where a connection to it may go; else ``address``."""
    if address.version == 4:
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _refused_as(address: Address) -> str | None:
    """What ``address`` (unwrapped) is when the default rule refuses it; None: a public address."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata service"
    for network, what in REFUSED_NETWORKS:
        if address.version == network.version and address in network:
            return what
    if address.is_link_local or address.is_loopback or address.is_multicast or address.is_unspecified \
            or address.is_reserved or address.is_private or not address.is_global:
        return "not a public address"
    return None


def _name_refusal(host: str) -> str | None:
    """Why the default rule refuses host name ``host`` by its text (a metadata or local name)."""
    name = host.rstrip(".")
    if name in METADATA_NAMES:
        return f"{name} is a cloud metadata service: not notified (--notify-hosts opens it)"
    if name == "localhost" or name.endswith(LOCAL_SUFFIXES) or "." not in name:
        return f"{name} is a local name, not a public one: not notified (--notify-hosts opens it)"
    return None


def _host_problem(host: str, bracketed: bool) -> str | None:
    """What is wrong with a URL's host by its text: None for a DNS name, a dotted-quad IPv4
    address or a bracketed IPv6 address; else the problem, naming the host."""
    if bracketed:
        if "%" in host:
            return f"names a zone in its address ({host}): give an address without one"
        return None if _address(host) is not None else f"has {host!r} in brackets, which is no IPv6 address"
    if not _HOST_NAME.fullmatch(host):
        return f"has host {host!r}: a host is a DNS name (letters, digits, '-', '.'), a.b.c.d or [IPv6]"
    last = host.rstrip(".").rsplit(".", 1)[-1]
    if _NUMBER_LABEL.fullmatch(last) and not _DOTTED_QUAD.fullmatch(host):
        return (f"writes its host as a number ({host}), which resolvers read as an address: write an address as "
                "four decimal parts, a.b.c.d")
    return None
