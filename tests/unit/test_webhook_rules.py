"""The pure webhook rules (CR-4, API.md "Notifications and webhooks"): which addresses a
delivery may reach, which URLs a webhook may have, how a URL is shown and logged, the
body's signature, and the retry schedule (5 s doubling to 1 h, given up after 24 h)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.domain.webhooks import (
    FIRST_DELAY,
    GIVE_UP_AFTER,
    MAX_DELAY,
    AddressPolicy,
    WebhookUrlInvalid,
    display_url,
    next_attempt_at,
    parse_address,
    parse_target,
    retry_delay,
    safe_target,
    signature,
    url_problem,
)

DEFAULT = AddressPolicy()
CREATED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


# --- addresses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        pytest.param("127.0.0.1", "a loopback address", id="v4_loopback"),
        pytest.param("127.255.255.254", "a loopback address", id="v4_loopback_range"),
        pytest.param("10.0.0.1", "a private address (RFC 1918)", id="rfc1918_10"),
        pytest.param("172.16.0.1", "a private address (RFC 1918)", id="rfc1918_172_low"),
        pytest.param("172.31.255.255", "a private address (RFC 1918)", id="rfc1918_172_high"),
        pytest.param("192.168.1.1", "a private address (RFC 1918)", id="rfc1918_192"),
        pytest.param("169.254.169.254", "a link-local address", id="cloud_metadata"),
        pytest.param("100.64.0.1", "a shared address (CGNAT)", id="cgnat_low"),
        pytest.param("100.127.255.255", "a shared address (CGNAT)", id="cgnat_high"),
        pytest.param("0.0.0.0", "an unspecified address", id="v4_unspecified"),
        pytest.param("224.0.0.1", "a multicast address", id="v4_multicast"),
        pytest.param("255.255.255.255", "a reserved address", id="v4_broadcast"),
        pytest.param("192.0.2.10", "a documentation address", id="v4_documentation"),
        pytest.param("198.18.0.1", "a reserved address", id="benchmarking"),
        pytest.param("::1", "a loopback address", id="v6_loopback"),
        pytest.param("::", "an unspecified address", id="v6_unspecified"),
        pytest.param("fc00::1", "a unique-local address (ULA)", id="ula_fc"),
        pytest.param("fd12:3456::1", "a unique-local address (ULA)", id="ula_fd"),
        pytest.param("fe80::1", "a link-local address", id="v6_link_local"),
        pytest.param("febf:ffff::1", "a link-local address", id="v6_link_local_high"),
        pytest.param("ff02::1", "a multicast address", id="v6_multicast"),
        pytest.param("::ffff:127.0.0.1", "an IPv4-mapped address", id="mapped_loopback"),
        pytest.param("::ffff:10.0.0.1", "an IPv4-mapped address", id="mapped_private"),
        pytest.param("::ffff:8.8.8.8", "an IPv4-mapped address", id="mapped_public"),
        pytest.param("64:ff9b::7f00:1", "a loopback address", id="nat64_of_loopback"),
        pytest.param("64:ff9b::a9fe:a9fe", "a link-local address", id="nat64_of_metadata"),
        pytest.param("2002:7f00:1::1", "a 6to4 address", id="six_to_four"),
        pytest.param("2001:db8::1", "a documentation address", id="v6_documentation"),
        pytest.param("2001::1", "a reserved address", id="teredo"),
        pytest.param("100::1", "a reserved address", id="discard_only"),
        pytest.param("4000::1", "a reserved address", id="outside_global_unicast"),
    ],
)
def test_refused_addresses_name_their_kind(address: str, kind: str) -> None:
    assert DEFAULT.refusal(_ip(address)) == kind


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "64:ff9b::808:808"],
    ids=["google_dns", "cloudflare_dns", "example_org", "v6_public", "nat64_of_public"],
)
def test_public_addresses_are_reachable(address: str) -> None:
    assert DEFAULT.refusal(_ip(address)) is None


def test_an_allowed_network_opens_only_itself() -> None:
    policy = AddressPolicy.from_cidrs(["127.0.0.0/8", "10.1.0.0/16"])
    assert policy.refusal(_ip("127.0.0.1")) is None
    assert policy.refusal(_ip("10.1.200.3")) is None
    assert policy.refusal(_ip("10.2.0.1")) == "a private address (RFC 1918)"
    assert policy.refusal(_ip("::1")) == "a loopback address"  # another family, another rule
    assert policy.refusal(_ip("169.254.169.254")) == "a link-local address"


def test_a_mapped_address_is_allowed_only_through_its_ipv4_network() -> None:
    policy = AddressPolicy.from_cidrs(["127.0.0.0/8"])
    assert policy.refusal(_ip("::ffff:127.0.0.1")) is None
    assert policy.refusal(_ip("::ffff:10.0.0.1")) == "an IPv4-mapped address"


def test_host_bits_of_an_allowed_network_are_ignored() -> None:
    assert AddressPolicy.from_cidrs(["192.168.7.9/24"]).refusal(_ip("192.168.7.200")) is None


def test_one_refused_address_refuses_the_host() -> None:
    addresses = [_ip("93.184.216.34"), _ip("10.0.0.5"), _ip("8.8.8.8")]
    assert DEFAULT.first_refusal(addresses) == (_ip("10.0.0.5"), "a private address (RFC 1918)")
    assert DEFAULT.first_refusal([_ip("93.184.216.34"), _ip("8.8.8.8")]) is None


def test_resolver_addresses_lose_their_zone() -> None:
    assert parse_address("fe80::1%eth0") == _ip("fe80::1")
    assert parse_address("203.0.113.7") == _ip("203.0.113.7")


v4_addresses = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
v6_addresses = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)
special_v6 = st.one_of(
    v4_addresses.map(lambda v4: ipaddress.IPv6Address(f"::ffff:{v4}")),
    v4_addresses.map(lambda v4: ipaddress.IPv6Address(int(_ip("64:ff9b::")) | int(v4))),
    st.integers(0, 2**121 - 1).map(lambda low: ipaddress.IPv6Address((0x7E << 121) | low)),
    st.integers(0, 2**118 - 1).map(lambda low: ipaddress.IPv6Address((0x3FA << 118) | low)),
)
any_address = st.one_of(v4_addresses, v6_addresses, special_v6)


@given(any_address)
def test_a_reachable_address_is_global_for_the_standard_library_too(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    """The policy is at least as strict as ``ipaddress``'s own idea of a global address."""
    if DEFAULT.refusal(address) is None:
        assert address.is_global


@given(v4_addresses)
def test_a_mapped_address_is_never_more_reachable_than_its_ipv4(
    v4: ipaddress.IPv4Address,
) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    assert DEFAULT.refusal(mapped) is not None
    opened = AddressPolicy.from_cidrs([f"{v4}/32"])
    assert opened.refusal(v4) is None
    assert opened.refusal(mapped) is None


def _carried_v4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in ipaddress.ip_network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


@given(any_address, any_address, st.integers(0, 32))
def test_allowing_a_network_changes_only_the_addresses_that_reach_it(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    anchor: ipaddress.IPv4Address | ipaddress.IPv6Address,
    prefix: int,
) -> None:
    network = ipaddress.ip_network(f"{anchor}/{prefix * anchor.max_prefixlen // 32}", strict=False)
    opened = AddressPolicy([network])
    carried = _carried_v4(address)
    if address in network or (carried is not None and carried in network):
        assert opened.refusal(address) is None
    else:
        assert opened.refusal(address) == DEFAULT.refusal(address)


# --- URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("ftp://hooks.example.com/x", id="other_scheme"),
        pytest.param("file:///etc/passwd", id="file_scheme"),
        pytest.param("hooks.example.com/x", id="no_scheme"),
        pytest.param("https:///x", id="no_host"),
        pytest.param("https://user:pw@hooks.example.com/x", id="userinfo"),
        pytest.param("https://user@hooks.example.com/x", id="user_only"),
        pytest.param("https://@hooks.example.com/x", id="empty_userinfo"),
        pytest.param("https://hooks.example.com:0/x", id="port_zero"),
        pytest.param("https://hooks.example.com:65536/x", id="port_too_big"),
        pytest.param("https://hooks.example.com:https/x", id="port_not_a_number"),
        pytest.param("https://hooks.example.com/a b", id="space"),
        pytest.param("https://hooks.example.com/a\nb", id="newline"),
        pytest.param("https://hooks.example.com/a\x7fb", id="delete_char"),
        pytest.param("https://hooks..example.com/x", id="empty_label"),
        pytest.param("https://[fe80::1%25eth0]/x", id="ipv6_zone"),
        pytest.param("https://[hooks.example.com]/x", id="bracketed_name"),
        pytest.param("https://hooks.example.com/" + "a" * 2048, id="too_long"),
    ],
)
def test_unusable_urls_are_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(WebhookUrlInvalid) as raised:
        parse_target(url)
    message = str(raised.value)
    assert "hooks.example.com" not in message and "passwd" not in message
    assert url_problem(url) == message


@pytest.mark.parametrize(
    ("url", "origin", "request_target", "host_header"),
    [
        (
            "https://Hooks.Example.COM/services/T0/B0/secret?x=1#frag",
            "https://hooks.example.com",
            "/services/T0/B0/secret?x=1",
            "hooks.example.com",
        ),
        ("HTTP://hooks.example.com", "http://hooks.example.com", "/", "hooks.example.com"),
        ("http://hooks.example.com?x=1", "http://hooks.example.com", "/?x=1", "hooks.example.com"),
        (
            "http://hooks.example.com:8080/h",
            "http://hooks.example.com:8080",
            "/h",
            "hooks.example.com:8080",
        ),
        ("https://[2001:DB8::1]:8443/h", "https://[2001:db8::1]:8443", "/h", "[2001:db8::1]:8443"),
        ("http://bücher.example/h", "http://xn--bcher-kva.example", "/h", "xn--bcher-kva.example"),
        ("http://hooks.example.com./h", "http://hooks.example.com", "/h", "hooks.example.com"),
    ],
    ids=["https_path_query", "bare_host", "query_only", "port", "ipv6", "idna", "trailing_dot"],
)
def test_a_url_is_taken_apart(url: str, origin: str, request_target: str, host_header: str) -> None:
    target = parse_target(url)
    assert target.origin == origin
    assert target.request_target == request_target
    assert target.host_header == host_header
    assert display_url(url) == f"{origin}/…"
    assert safe_target(url) == origin


def test_default_ports_follow_the_scheme() -> None:
    assert parse_target("http://hooks.example.com/").port == 80
    assert parse_target("https://hooks.example.com/").port == 443
    assert parse_target("https://hooks.example.com:443/").explicit_port


def test_safe_target_of_an_unusable_url_says_so_and_never_raises() -> None:
    assert safe_target("ftp://user:pw@hooks.example.com/secret") == "an unusable URL"


secret_parts = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_~", min_size=8, max_size=40)


@given(secret_parts, secret_parts, st.sampled_from(["http", "https"]))
def test_shown_and_logged_forms_never_hold_the_path_or_query(
    path: str, query: str, scheme: str
) -> None:
    url = f"{scheme}://hooks.example.com/services/{path}?token={query}"
    for shown in (display_url(url), safe_target(url), parse_target(url).origin):
        assert path not in shown
        assert query not in shown
    assert parse_target(url).request_target == f"/services/{path}?token={query}"


# --- signature --------------------------------------------------------------------------


def test_signature_matches_the_hmac_sha256_test_vector() -> None:
    # RFC 4231, test case 2.
    assert signature("Jefe", b"what do ya want for nothing?") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


@given(st.text(min_size=1), st.binary())
def test_a_receiver_checks_the_signature_with_the_secret(secret: str, body: bytes) -> None:
    sent = signature(secret, body)
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(sent, expected)
    assert signature(secret.encode(), body) == sent
    assert signature(secret + "x", body) != sent


# --- retries ----------------------------------------------------------------------------


class _NoJitter(random.Random):
    """Always draws the top of the range: the nominal delay."""

    def random(self) -> float:
        return 1.0


def test_the_first_retry_comes_after_five_seconds_and_delays_double() -> None:
    never_jittered = _NoJitter()
    delays = [retry_delay(attempt, never_jittered) for attempt in range(1, 13)]
    assert delays[:4] == [timedelta(seconds=s) for s in (5, 10, 20, 40)]
    assert delays[-1] == MAX_DELAY
    with pytest.raises(ValueError, match="start at 1"):
        retry_delay(0, never_jittered)


@given(st.integers(1, 10_000), st.integers(0, 2**32))
def test_every_delay_lies_between_five_seconds_and_an_hour(attempt: int, seed: int) -> None:
    delay = retry_delay(attempt, random.Random(seed))
    assert FIRST_DELAY <= delay <= MAX_DELAY
    nominal = min(FIRST_DELAY * 2 ** min(attempt - 1, 20), MAX_DELAY)
    assert delay >= max(FIRST_DELAY, nominal / 2)


@given(st.integers(0, 2**32), st.floats(0, 600))
def test_a_failing_receiver_is_retried_for_a_day_then_given_up(
    seed: int, first_answer_seconds: float
) -> None:
    rng = random.Random(seed)
    attempted_at = CREATED + timedelta(seconds=first_answer_seconds)
    attempt = 1
    times = [attempted_at]
    while (following := next_attempt_at(CREATED, attempt, attempted_at, rng)) is not None:
        assert FIRST_DELAY <= following - attempted_at <= MAX_DELAY
        attempted_at, attempt = following, attempt + 1
        times.append(attempted_at)
    assert times[-1] <= CREATED + GIVE_UP_AFTER
    # Given up only when one more delay (at most an hour) would pass the day.
    assert times[-1] > CREATED + GIVE_UP_AFTER - MAX_DELAY
    assert 20 <= len(times) <= 100


def test_the_give_up_counts_from_the_delivery_creation() -> None:
    rng = random.Random(7)
    late = CREATED + GIVE_UP_AFTER - timedelta(seconds=1)
    assert next_attempt_at(CREATED, 30, late, rng) is None
    early = CREATED + timedelta(hours=1)
    following = next_attempt_at(CREATED, 30, early, rng)
    assert following is not None and following <= early + MAX_DELAY
