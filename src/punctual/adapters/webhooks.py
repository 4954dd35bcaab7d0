"""The webhook sender: one POST of a delivery over HTTP(S), with the network rules of
API.md "Notifications and webhooks".

Every send resolves the host again and checks every address it resolves to with the
domain's address policy, then connects to a checked address itself: the request goes to
the IP literal with the original ``Host`` header and, for https, the original name as TLS
server name, so the certificate is verified for the name while the socket goes where the
check said. A name that resolved to a public address at create and to a private one now
(DNS rebinding) is refused now.

Each connection is new (no pool): a pooled TLS connection keyed by address could carry one
name's session to another name on the same address. The whole attempt runs on a helper
thread that the caller waits for at most ``total_timeout`` seconds, so neither a slow
resolver nor a receiver that drips its answer holds a deliverer longer; the helper stops
by itself soon after (its own reads are bounded by the same deadline).
"""

from __future__ import annotations

import functools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import httpx

from punctual.domain.webhooks import (
    AddressPolicy,
    IPAddress,
    Target,
    WebhookUrlInvalid,
    parse_address,
    parse_target,
    safe_target,
)
from punctual.ports.webhooks import SendResult

log = logging.getLogger("punctual.webhooks")

# httpx logs every request line at INFO and httpcore every step at DEBUG, both with the full
# URL: a webhook's path is its credential (Slack, Mattermost), so neither may reach the logs.
for _chatty in ("httpx", "httpcore"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

_T = TypeVar("_T")

Resolver = Callable[[str, int], Sequence[str]]
"""``(host, port) -> addresses`` as text, in the order to try them."""

CONNECT_TIMEOUT_SECONDS = 5.0
TOTAL_TIMEOUT_SECONDS = 10.0
MAX_ANSWER_BYTES = 64 * 1024

LOCAL_ALLOWED_CIDRS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)
"""Loopback and private ranges: a receiver beside a one-machine install is the usual
case. Link-local stays refused (169.254.169.254 is where clouds serve credentials)."""


def default_allowed_cidrs(profile: str) -> list[str]:
    """The networks deliveries may reach when ``[webhooks] allowed_cidrs`` is not set: the
    local profile allows loopback and private ranges, production none."""
    return list(LOCAL_ALLOWED_CIDRS) if profile == "local" else []


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``getaddrinfo`` gives for a TCP connection, first occurrence first."""
    addresses: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """The system's trust store, loaded once per process: loading it costs some 15 ms,
    and one client context serves every sender and thread."""
    return httpx.create_ssl_context(trust_env=False)


@dataclass(frozen=True)
class _Checked:
    target: Target
    addresses: list[IPAddress]


@dataclass
class _Progress:
    """What an attempt has learnt so far, for a caller whose wait ran out."""

    answered: tuple[int, Target] | None = None


class _Refused(Exception):
    """A destination that must not be sent to; the message is safe to record."""


class HttpWebhookSender:
    """``WebhookSender`` over httpx; ``allowed_cidrs`` are the private networks the host
    lets deliveries reach (``default_allowed_cidrs`` when the host set none)."""

    def __init__(
        self,
        allowed_cidrs: Iterable[str] = (),
        *,
        resolver: Resolver = system_resolver,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
        total_timeout: float = TOTAL_TIMEOUT_SECONDS,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._policy = AddressPolicy.from_cidrs(allowed_cidrs)
        self._resolver = resolver
        self._connect_timeout = connect_timeout
        self._total_timeout = total_timeout
        self._max_answer_bytes = max_answer_bytes
        self._tls = tls or _default_tls()

    def destination_problem(self, url: str) -> str | None:
        deadline = time.monotonic() + self._total_timeout
        try:
            _within(deadline, lambda: self._check(url))
        except _Refused as exc:
            return str(exc)
        except TimeoutError:
            return (
                f"resolving the name of {safe_target(url)} took longer than "
                f"{self._total_timeout:g} s"
            )
        return None

    def send(self, url: str, body: bytes, headers: dict[str, str]) -> SendResult:
        deadline = time.monotonic() + self._total_timeout
        progress = _Progress()
        try:
            return _within(deadline, lambda: self._attempt(url, body, headers, deadline, progress))
        except TimeoutError:
            if progress.answered is not None:
                # The status came in time; only the rest of the answer was slow.
                return _judge(*progress.answered)
            return SendResult(False, None, self._too_slow(safe_target(url)))
        except Exception as exc:
            # The port never raises for a send. The type is enough to look further; the
            # message could hold the URL.
            log.error(
                "event=webhook_send_error target=%s error=%s",
                safe_target(url),
                type(exc).__name__,
            )
            return SendResult(
                False, None, f"sending to {safe_target(url)} failed ({type(exc).__name__})"
            )

    def _attempt(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        deadline: float,
        progress: _Progress,
    ) -> SendResult:
        try:
            checked = self._check(url)
        except _Refused as exc:
            return SendResult(False, None, str(exc))
        problem = "no address to connect to"
        for address in checked.addresses:
            try:
                return self._exchange(checked.target, address, body, headers, deadline, progress)
            except httpx.ConnectTimeout:
                problem = (
                    f"connecting to {checked.target.origin} ({address}) took longer than "
                    f"{self._connect_timeout:g} s"
                )
            except httpx.ConnectError as exc:
                problem = (
                    f"could not connect to {checked.target.origin} ({address}): "
                    f"{_scrub(str(exc), checked.target)}"
                )
            except httpx.TimeoutException:
                return SendResult(False, None, self._too_slow(checked.target.origin))
            except httpx.HTTPError as exc:
                return SendResult(
                    False,
                    None,
                    f"{checked.target.origin} broke off the exchange ({type(exc).__name__})",
                )
            if time.monotonic() >= deadline:
                break
        return SendResult(False, None, problem)

    def _check(self, url: str) -> _Checked:
        try:
            target = parse_target(url)
        except WebhookUrlInvalid as exc:
            raise _Refused(str(exc)) from None
        try:
            addresses = [parse_address(text) for text in self._resolve(target)]
        except (OSError, UnicodeError, ValueError):
            raise _Refused(f"the name of {target.origin} could not be resolved") from None
        if not addresses:
            raise _Refused(f"the name of {target.origin} resolves to no address")
        refused = self._policy.first_refusal(addresses)
        if refused is not None:
            address, kind = refused
            raise _Refused(
                f"{target.origin} resolves to {address}, {kind}, which deliveries may not "
                "reach; the host can allow its network in [webhooks] allowed_cidrs"
            )
        return _Checked(target, addresses)

    def _resolve(self, target: Target) -> Sequence[str]:
        """An address literal is its own answer; a name asks the resolver."""
        try:
            return [parse_address(target.host).compressed]
        except ValueError:
            return self._resolver(target.host, target.port)

    def _exchange(
        self,
        target: Target,
        address: IPAddress,
        body: bytes,
        headers: dict[str, str],
        deadline: float,
        progress: _Progress,
    ) -> SendResult:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return SendResult(False, None, self._too_slow(target.origin))
        timeout = httpx.Timeout(
            remaining, connect=min(self._connect_timeout, remaining), pool=remaining
        )
        literal = f"[{address.compressed}]" if address.version == 6 else address.compressed
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else None
        with httpx.Client(
            verify=self._tls, trust_env=False, follow_redirects=False, timeout=timeout
        ) as client:
            request = client.build_request(
                "POST",
                f"{target.scheme}://{literal}:{target.port}{target.request_target}",
                content=body,
                headers={**headers, "Host": target.host_header},
                extensions=extensions,
            )
            response = client.send(request, stream=True)
            progress.answered = (response.status_code, target)
            try:
                read_capped(response.iter_raw(), self._max_answer_bytes, deadline)
            except httpx.HTTPError:
                pass  # the status decides; an answer cut off after it changes nothing
            finally:
                response.close()
        return _judge(response.status_code, target)

    def _too_slow(self, origin: str) -> str:
        return f"no complete answer from {origin} within {self._total_timeout:g} s"


def read_capped(chunks: Iterable[bytes], limit: int, deadline: float) -> int:
    """Read an answer until ``limit`` bytes came, it ended or ``deadline`` passed; the
    number of bytes taken. No read is asked for once the limit came: an endless answer is
    cut off there (the answer itself is not kept: only its status counts)."""
    taken = 0
    for chunk in chunks:
        taken += len(chunk)
        if taken >= limit or time.monotonic() >= deadline:
            break
    return min(taken, limit)


def _judge(status: int, target: Target) -> SendResult:
    if 200 <= status < 300:
        return SendResult(True, status, None)
    if 300 <= status < 400:
        return SendResult(
            False,
            status,
            f"{target.origin} answered {status}, a redirect; deliveries do not follow "
            "redirects, so set the webhook to the final URL",
        )
    return SendResult(False, status, f"{target.origin} answered {status}")


def _within(deadline: float, work: Callable[[], _T]) -> _T:
    """``work()`` on a helper thread, waited for until ``deadline``; ``TimeoutError`` when
    it has not finished by then (it goes on alone and ends by its own bounds)."""
    answer: list[_T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(work())
        except BaseException as exc:
            failure.append(exc)

    helper = threading.Thread(target=run, name="webhook-send", daemon=True)
    helper.start()
    helper.join(max(0.0, deadline - time.monotonic()))
    if failure:
        raise failure[0]
    if not answer:
        raise TimeoutError
    return answer[0]


def _scrub(text: str, target: Target) -> str:
    """A network error's text without any piece of the URL's path or query, kept short."""
    path, _, query = target.request_target.partition("?")
    for secret in (target.request_target, query, path):
        if len(secret) > 1:
            text = text.replace(secret, "…")
    return text[:200]
