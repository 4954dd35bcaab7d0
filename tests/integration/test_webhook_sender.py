"""The webhook sender against real HTTP servers on 127.0.0.1 (API.md "Notifications and
webhooks"): a 2xx delivers, anything else does not, redirects are not followed, a
receiver that hangs costs at most the total budget, at most 64 KiB of an answer is read,
private destinations are refused unless allowed, the address is resolved and checked at
every send and the connection goes to the checked address, and no error text carries the
URL's path or query."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from punctual.adapters.webhooks import (
    LOCAL_ALLOWED_CIDRS,
    MAX_ANSWER_BYTES,
    HttpWebhookSender,
    default_allowed_cidrs,
    read_capped,
)
from punctual.ports.webhooks import SendResult
from tests.support.server import free_port
from tests.support.webhook_receiver import REDIRECT_PATH, receiving

SECRET_PATH = "/services/T0SECRETPATH/B0SECRET"
SECRET_QUERY = "token=QUERYSECRET123"
LOOPBACK = ["127.0.0.0/8"]
BODY = b'{"text":"hello","event":"test"}'
HEADERS = {"Content-Type": "application/json", "X-Punctual-Event-Id": "evt_1"}


def _secret_free(result: SendResult) -> None:
    assert result.error is not None
    for piece in ("T0SECRETPATH", "B0SECRET", "QUERYSECRET123", "services"):
        assert piece not in result.error


def _resolver(table: dict[str, Sequence[str]]) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


# --- answers ----------------------------------------------------------------------------


def test_a_2xx_answer_delivers_the_exact_body_and_headers() -> None:
    sender = HttpWebhookSender(LOOPBACK)
    with receiving((204,)) as receiver:
        result = sender.send(receiver.url(f"{SECRET_PATH}?{SECRET_QUERY}"), BODY, HEADERS)
    assert result == SendResult(True, 204, None)
    [request] = receiver.received
    assert request.path == f"{SECRET_PATH}?{SECRET_QUERY}"
    assert request.body == BODY
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-punctual-event-id"] == "evt_1"
    assert request.headers["host"] == f"127.0.0.1:{receiver.port}"


@pytest.mark.parametrize("status", [400, 404, 429, 500, 503])
def test_any_other_answer_is_not_delivered_and_keeps_its_status(status: int) -> None:
    sender = HttpWebhookSender(LOOPBACK)
    with receiving((status,)) as receiver:
        result = sender.send(receiver.url(f"{SECRET_PATH}?{SECRET_QUERY}"), BODY, HEADERS)
    assert not result.delivered
    assert result.status_code == status
    assert result.error == f"http://127.0.0.1:{receiver.port} answered {status}"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_failure_and_is_not_followed(status: int) -> None:
    sender = HttpWebhookSender(LOOPBACK)
    with receiving((status, 200)) as receiver:
        result = sender.send(receiver.url(f"{SECRET_PATH}?{SECRET_QUERY}"), BODY, HEADERS)
    assert not result.delivered
    assert result.status_code == status
    assert result.error is not None and "redirect" in result.error
    _secret_free(result)
    assert [request.path for request in receiver.received] == [f"{SECRET_PATH}?{SECRET_QUERY}"]
    assert REDIRECT_PATH not in {request.path for request in receiver.received}


def test_a_receiver_that_is_down_is_a_connection_failure() -> None:
    port = free_port()
    result = HttpWebhookSender(LOOPBACK).send(
        f"http://127.0.0.1:{port}{SECRET_PATH}?{SECRET_QUERY}", BODY, HEADERS
    )
    assert not result.delivered and result.status_code is None
    assert result.error is not None and result.error.startswith(
        f"could not connect to http://127.0.0.1:{port} (127.0.0.1)"
    )
    _secret_free(result)


# --- misbehaving receivers ------------------------------------------------------------


@dataclass
class _RawServer:
    """A TCP server on 127.0.0.1 whose one connection ``behave`` handles."""

    behave: Callable[[socket.socket, _RawServer], None]
    port: int = 0
    written: int = 0
    hung_up: bool = False
    done: threading.Event = field(default_factory=threading.Event)


@contextmanager
def _raw_server(behave: Callable[[socket.socket, _RawServer], None]) -> Iterator[_RawServer]:
    state = _RawServer(behave)
    listener = socket.create_server(("127.0.0.1", 0))
    state.port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)  # how soon the loop sees ``stop``
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(30)
                try:
                    behave(conn, state)
                except OSError:
                    state.hung_up = True
                finally:
                    state.done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(40)
        listener.close()


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += conn.recv(65536)


def _hang(conn: socket.socket, state: _RawServer) -> None:
    _read_request(conn)
    conn.recv(1)  # waits until the client gives up and closes


def test_a_hanging_receiver_costs_at_most_the_total_budget() -> None:
    sender = HttpWebhookSender(LOOPBACK)  # the default budget: 10 s in all
    with _raw_server(_hang) as server:
        began = time.monotonic()
        result = sender.send(
            f"http://127.0.0.1:{server.port}{SECRET_PATH}?{SECRET_QUERY}", BODY, HEADERS
        )
        took = time.monotonic() - began
    assert not result.delivered and result.status_code is None
    assert result.error == f"no complete answer from http://127.0.0.1:{server.port} within 10 s"
    assert 9.0 <= took < 12.0


def _drip(conn: socket.socket, state: _RawServer) -> None:
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b".")
        time.sleep(0.2)


def test_a_receiver_that_drips_its_answer_is_judged_by_its_status_within_the_budget() -> None:
    sender = HttpWebhookSender(LOOPBACK, total_timeout=1.5)
    with _raw_server(_drip) as server:
        began = time.monotonic()
        result = sender.send(f"http://127.0.0.1:{server.port}/hook", BODY, HEADERS)
        took = time.monotonic() - began
    assert result == SendResult(True, 200, None)
    assert took < 5.0  # the 200 s answer was not waited for


def _endless(conn: socket.socket, state: _RawServer) -> None:
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (16384, b"x" * 16384)
    while state.written < 50 * 1024 * 1024:
        conn.sendall(chunk)
        state.written += len(chunk)
    conn.sendall(b"0\r\n\r\n")


def test_only_64_kib_of_an_answer_is_read() -> None:
    sender = HttpWebhookSender(LOOPBACK, total_timeout=60)
    with _raw_server(_endless) as server:
        result = sender.send(f"http://127.0.0.1:{server.port}/hook", BODY, HEADERS)
        assert server.done.wait(30)
    assert result == SendResult(True, 200, None)
    # The client hung up long before the 50 MiB answer ended: what the server got out
    # is 64 KiB plus what the two sockets' buffers held.
    assert server.hung_up
    assert server.written < 50 * 1024 * 1024


def test_the_capped_read_stops_asking_once_the_limit_came() -> None:
    asked = 0

    def endless() -> Iterator[bytes]:
        nonlocal asked
        while True:
            asked += 1
            yield b"x" * 1000

    taken = read_capped(endless(), MAX_ANSWER_BYTES, time.monotonic() + 60)
    assert taken == MAX_ANSWER_BYTES
    assert asked == -(-MAX_ANSWER_BYTES // 1000)


# --- destinations -----------------------------------------------------------------------


def test_loopback_is_refused_unless_its_network_is_allowed() -> None:
    with receiving() as receiver:
        url = receiver.url(f"{SECRET_PATH}?{SECRET_QUERY}")
        refused = HttpWebhookSender().send(url, BODY, HEADERS)
        problem = HttpWebhookSender().destination_problem(url)
        assert receiver.received == []
        allowed = HttpWebhookSender(LOOPBACK).send(url, BODY, HEADERS)
        assert HttpWebhookSender(LOOPBACK).destination_problem(url) is None
    assert not refused.delivered and refused.status_code is None
    assert refused.error == (
        f"http://127.0.0.1:{receiver.port} resolves to 127.0.0.1, a loopback address, which "
        "deliveries may not reach; the host can allow its network in [webhooks] allowed_cidrs"
    )
    _secret_free(refused)
    assert problem == refused.error
    assert allowed.delivered
    assert len(receiver.received) == 1


def test_the_local_profile_allows_loopback_and_private_ranges_and_production_none() -> None:
    assert default_allowed_cidrs("local") == list(LOCAL_ALLOWED_CIDRS)
    assert default_allowed_cidrs("production") == []
    local = HttpWebhookSender(default_allowed_cidrs("local"), resolver=_resolver({}))
    for url in ("http://127.0.0.1/", "http://10.0.0.8/", "http://192.168.1.2/", "http://[::1]/"):
        assert local.destination_problem(url) is None, url
    assert local.destination_problem("http://169.254.169.254/latest") == (
        "http://169.254.169.254 resolves to 169.254.169.254, a link-local address, which "
        "deliveries may not reach; the host can allow its network in [webhooks] allowed_cidrs"
    )
    production = HttpWebhookSender(default_allowed_cidrs("production"))
    assert production.destination_problem("http://10.0.0.8/") is not None


def test_the_request_goes_to_the_resolved_address_with_the_original_host() -> None:
    sender = HttpWebhookSender(LOOPBACK, resolver=_resolver({"hooks.test": ["127.0.0.1"]}))
    with receiving() as receiver:
        result = sender.send(
            f"http://hooks.test:{receiver.port}{SECRET_PATH}?{SECRET_QUERY}", BODY, HEADERS
        )
    assert result.delivered
    [request] = receiver.received
    assert request.headers["host"] == f"hooks.test:{receiver.port}"
    assert request.path == f"{SECRET_PATH}?{SECRET_QUERY}"


def test_a_name_that_now_resolves_to_a_refused_address_is_refused_at_send() -> None:
    """DNS rebinding: fine when the webhook was created, private when it is used."""
    table: dict[str, Sequence[str]] = {"hooks.test": ["93.184.216.34"]}
    sender = HttpWebhookSender(resolver=_resolver(table))
    with receiving() as receiver:
        url = f"http://hooks.test:{receiver.port}{SECRET_PATH}?{SECRET_QUERY}"
        assert sender.destination_problem(url) is None
        table["hooks.test"] = ["127.0.0.1"]
        result = sender.send(url, BODY, HEADERS)
        assert receiver.received == []
    assert not result.delivered
    assert result.error is not None and "resolves to 127.0.0.1, a loopback address" in result.error
    _secret_free(result)


def test_one_refused_address_among_several_refuses_the_send() -> None:
    table = {"hooks.test": ["93.184.216.34", "::ffff:127.0.0.1"]}
    result = HttpWebhookSender(resolver=_resolver(table)).send(
        f"https://hooks.test{SECRET_PATH}", BODY, HEADERS
    )
    assert result.error == (
        "https://hooks.test resolves to ::ffff:7f00:1, an IPv4-mapped address, which "
        "deliveries may not reach; the host can allow its network in [webhooks] allowed_cidrs"
    )


def test_an_address_that_refuses_the_connection_gives_way_to_the_next() -> None:
    table = {"hooks.test": ["127.0.0.2", "127.0.0.1"]}  # the receiver listens on .1 only
    sender = HttpWebhookSender(LOOPBACK, resolver=_resolver(table))
    with receiving() as receiver:
        result = sender.send(f"http://hooks.test:{receiver.port}/hook", BODY, HEADERS)
    assert result.delivered
    assert len(receiver.received) == 1


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://hooks.test/x", "the URL must start with http:// or https://"),
        (
            "https://user:pw@hooks.test/x",
            "the URL carries a user name or password; put a token in the path or set the "
            "webhook's secret instead",
        ),
        (
            f"https://unknown.test{SECRET_PATH}",
            "the name of https://unknown.test could not be resolved",
        ),
    ],
    ids=["scheme", "userinfo", "unresolvable"],
)
def test_unusable_destinations_are_refused_at_create_and_at_send(url: str, error: str) -> None:
    sender = HttpWebhookSender(resolver=_resolver({"hooks.test": ["93.184.216.34"]}))
    assert sender.destination_problem(url) == error
    assert sender.send(url, BODY, HEADERS) == SendResult(False, None, error)


def test_a_resolver_that_hangs_costs_at_most_the_budget() -> None:
    release = threading.Event()

    def stuck(host: str, port: int) -> Sequence[str]:
        release.wait(30)
        return ["93.184.216.34"]

    sender = HttpWebhookSender(resolver=stuck, total_timeout=0.5)
    try:
        result = sender.send(f"https://hooks.test{SECRET_PATH}", BODY, HEADERS)
        problem = sender.destination_problem(f"https://hooks.test{SECRET_PATH}")
    finally:
        release.set()
    assert result == SendResult(
        False, None, "no complete answer from https://hooks.test within 0.5 s"
    )
    assert problem == "resolving the name of https://hooks.test took longer than 0.5 s"


# --- TLS --------------------------------------------------------------------------------


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path, cert_pem


def _server_context(cert: Path, key: Path, server_names: list[str | None]) -> ssl.SSLContext:
    """Records the server name (SNI) each client asks for."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def note(sock: ssl.SSLSocket, name: str | None, ctx: ssl.SSLContext) -> None:
        server_names.append(name)

    context.sni_callback = note
    return context


def test_https_verifies_the_name_while_connecting_to_the_checked_address(tmp_path: Path) -> None:
    cert, key, pem = _certificate(tmp_path, "hooks.test")
    server_names: list[str | None] = []
    trusting = ssl.create_default_context(cadata=pem.decode())
    sender = HttpWebhookSender(
        LOOPBACK, resolver=_resolver({"hooks.test": ["127.0.0.1"]}), tls=trusting
    )
    with receiving(tls=_server_context(cert, key, server_names)) as receiver:
        result = sender.send(f"https://hooks.test:{receiver.port}{SECRET_PATH}", BODY, HEADERS)
    assert result == SendResult(True, 200, None)
    assert server_names == ["hooks.test"]
    [request] = receiver.received
    assert request.headers["host"] == f"hooks.test:{receiver.port}"


def test_https_refuses_a_certificate_for_another_name(tmp_path: Path) -> None:
    cert, key, pem = _certificate(tmp_path, "other.test")
    trusting = ssl.create_default_context(cadata=pem.decode())
    sender = HttpWebhookSender(
        LOOPBACK, resolver=_resolver({"hooks.test": ["127.0.0.1"]}), tls=trusting
    )
    with receiving(tls=_server_context(cert, key, [])) as receiver:
        result = sender.send(
            f"https://hooks.test:{receiver.port}{SECRET_PATH}?{SECRET_QUERY}", BODY, HEADERS
        )
        assert receiver.received == []
    assert not result.delivered and result.status_code is None
    assert result.error is not None
    assert result.error.startswith(f"could not connect to https://hooks.test:{receiver.port}")
    assert "certificate" in result.error.lower()
    _secret_free(result)
