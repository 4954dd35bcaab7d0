"""Webhook rules (CR-4): which URLs and addresses a delivery may reach, how a URL is shown,
how a body is signed, and when a failed delivery is tried again or given up.

URL rules. Only ``http`` and ``https``; a host is required; a URL carrying a user name or
password is refused, because the credential would travel as basic authentication to
whoever answers and would show wherever the URL is shown (put a token in the path, which
stays encrypted, or set the webhook's secret). A fragment is never sent. Whitespace and
control characters are refused rather than quietly escaped.

Address rules. A destination is judged by the addresses its host resolves to, at every
delivery: loopback, private (RFC 1918), shared (CGNAT), link-local, unique-local,
multicast, unspecified, documentation and other reserved ranges are refused unless the
host allows a network that holds the address. An IPv4-mapped IPv6 address is refused as
such (it reaches an IPv4 host behind an IPv6 name) unless its IPv4 address is allowed; a
NAT64 address (64:ff9b::/96) is judged by the IPv4 address it carries, so an IPv6-only
host can still reach public receivers; 6to4 (2002::/16, deprecated) is refused.

Nothing here reads the network or the clock: resolving and time are the caller's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = {"http": 80, "https": 443}
MAX_URL_LENGTH = 2048

FIRST_DELAY = timedelta(seconds=5)
MAX_DELAY = timedelta(hours=1)
GIVE_UP_AFTER = timedelta(hours=24)
"""A delivery is failed once its next attempt would come later than this after it was
created (API.md: retried for up to 24 h)."""

_MAX_DOUBLINGS = 20  # 5 s * 2**20 is far past the cap; bounds the arithmetic

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

_REFUSED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "an unspecified address"),
    (_V4("10.0.0.0/8"), "a private address (RFC 1918)"),
    (_V4("100.64.0.0/10"), "a shared address (CGNAT)"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("169.254.0.0/16"), "a link-local address"),
    (_V4("172.16.0.0/12"), "a private address (RFC 1918)"),
    (_V4("192.0.0.0/24"), "a reserved address"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a reserved address"),
    (_V4("192.168.0.0/16"), "a private address (RFC 1918)"),
    (_V4("198.18.0.0/15"), "a reserved address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
)

_IPV4_MAPPED = _V6("::ffff:0:0/96")
_NAT64 = _V6("64:ff9b::/96")
_GLOBAL_UNICAST = _V6("2000::/3")

_REFUSED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "an unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    (_V6("fc00::/7"), "a unique-local address (ULA)"),
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("ff00::/8"), "a multicast address"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("3fff::/20"), "a documentation address"),
    (_V6("2002::/16"), "a 6to4 address"),
    (_V6("2001::/23"), "a reserved address"),
)


@dataclass(frozen=True)
class Target:
    """A webhook URL taken apart. ``request_target`` (path and query) is the part that
    may be a credential: it is sent, never shown or logged."""

    scheme: str
    host: str
    """Lower-case; an IPv6 literal without brackets; a name in its ASCII (IDNA) form."""
    port: int
    explicit_port: bool
    request_target: str

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the name the receiver expects, not the address dialled."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.explicit_port else host

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: safe to show and to log."""
        return f"{self.scheme}://{self.host_header}"


class WebhookUrlInvalid(ValueError):
    """The URL cannot be a webhook's; the message never repeats any part of the URL."""


def parse_target(url: str) -> Target:
    """Take a webhook URL apart under the URL rules above, or raise ``WebhookUrlInvalid``."""
    if len(url) > MAX_URL_LENGTH:
        raise WebhookUrlInvalid(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise WebhookUrlInvalid("the URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError:
        raise WebhookUrlInvalid("the URL cannot be parsed (look at its host and port)") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise WebhookUrlInvalid("the URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlInvalid(
            "the URL carries a user name or password; put a token in the path or set "
            "the webhook's secret instead"
        )
    if not hostname:
        raise WebhookUrlInvalid("the URL has no host")
    if port == 0:
        raise WebhookUrlInvalid("the URL's port must be between 1 and 65535")
    host = _ascii_host(hostname)
    if "[" in parts.netloc and ":" not in host:
        raise WebhookUrlInvalid("the URL's host is bracketed but is not an IPv6 address")
    request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(
        scheme=scheme,
        host=host,
        port=port if port is not None else SCHEMES[scheme],
        explicit_port=port is not None,
        request_target=request_target,
    )


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook's (without resolving it), or None."""
    try:
        parse_target(url)
    except WebhookUrlInvalid as exc:
        return str(exc)
    return None


def display_url(url: str) -> str:
    """The URL cut after its host, ``https://hooks.example.com/…``: what reads show (a
    Slack URL's path is its credential). Raises ``WebhookUrlInvalid`` like ``parse_target``."""
    return f"{parse_target(url).origin}/…"


def safe_target(url: str) -> str:
    """``scheme://host[:port]`` for logs and errors; never the path or query, never raises."""
    try:
        return parse_target(url).origin
    except WebhookUrlInvalid:
        return "an unusable URL"


def _ascii_host(hostname: str) -> str:
    if "%" in hostname:
        raise WebhookUrlInvalid("the URL's host carries an IPv6 zone; use an address or a name")
    try:
        return ipaddress.ip_address(hostname).compressed
    except ValueError:
        pass
    try:
        ascii_host = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise WebhookUrlInvalid("the URL's host is not a valid name") from None
    if not ascii_host or any(not (char.isalnum() or char in "-._") for char in ascii_host):
        raise WebhookUrlInvalid("the URL's host is not a valid name")
    return ascii_host.lower().rstrip(".")


class AddressPolicy:
    """Which resolved addresses deliveries may reach: anything public, plus what the host
    allows (``[webhooks] allowed_cidrs``)."""

    def __init__(self, allowed: Iterable[IPNetwork] = ()) -> None:
        self.allowed: tuple[IPNetwork, ...] = tuple(allowed)

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> AddressPolicy:
        """Networks written like ``10.0.0.0/8``; host bits are ignored (``10.1.2.3/8``)."""
        return cls(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)

    def refusal(self, address: IPAddress) -> str | None:
        """What kind of refused address ``address`` is (``a loopback address``), or None
        when deliveries may reach it."""
        if self._allows(address):
            return None
        if isinstance(address, ipaddress.IPv4Address):
            return _refused_v4(address)
        mapped = address.ipv4_mapped
        if mapped is not None:
            if self._allows(mapped):
                return None
            return "an IPv4-mapped address"
        if address in _NAT64:
            return self.refusal(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        return _refused_v6(address)

    def first_refusal(self, addresses: Sequence[IPAddress]) -> tuple[IPAddress, str] | None:
        """The first refused address with its kind: one refused address refuses the host
        (the connection could go to any of them)."""
        for address in addresses:
            kind = self.refusal(address)
            if kind is not None:
                return address, kind
        return None

    def _allows(self, address: IPAddress) -> bool:
        return any(
            address.version == network.version and address in network for network in self.allowed
        )


def _refused_v4(address: ipaddress.IPv4Address) -> str | None:
    for network, kind in _REFUSED_V4:
        if address in network:
            return kind
    return None


def _refused_v6(address: ipaddress.IPv6Address) -> str | None:
    for network, kind in _REFUSED_V6:
        if address in network:
            return kind
    if address not in _GLOBAL_UNICAST:
        return "a reserved address"
    return None


def parse_address(text: str) -> IPAddress:
    """An address as a resolver returns it; an IPv6 zone (``fe80::1%eth0``) is dropped."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def signature(secret: bytes | str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of the raw body, what ``X-Punctual-Signature`` carries."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def retry_delay(attempt: int, rng: random.Random) -> timedelta:
    """Exponential from 5 s to 1 h, jittered so that many deliveries to one receiver that
    came back spread out.

    ``attempt`` is the number of the attempt that just failed (1 for the first). The
    nominal delay doubles from 5 s and is capped at 1 h; the delay is drawn between half of
    it (never below 5 s) and all of it, so every delay lies within [5 s, 1 h].
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    nominal = min(FIRST_DELAY * (2 ** min(attempt - 1, _MAX_DOUBLINGS)), MAX_DELAY)
    lowest = max(FIRST_DELAY, nominal / 2)
    spread: timedelta = nominal - lowest
    delay: timedelta = lowest + spread * rng.random()
    return delay


def next_attempt_at(
    created_at: datetime, attempt: int, now: datetime, rng: random.Random
) -> datetime | None:
    """When to try again after attempt ``attempt`` failed at ``now``; None once that would
    be more than 24 h after the delivery was created (it is given up: ``failed``)."""
    following = now + retry_delay(attempt, rng)
    if following > created_at + GIVE_UP_AFTER:
        return None
    return following
