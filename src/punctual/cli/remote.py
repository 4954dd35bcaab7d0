"""What every tenant command shares (SPEC IF-3, API.md "The CLI over HTTP"): the server
and token it talks to, idempotency keys, output, and exit codes.

Tenant commands act through the HTTP API with the typed client, never on a database, so an
operator of a remote deployment needs a URL and a token and nothing else. The options are
the same on every command: ``--url`` (``PUNCTUAL_URL``, default ``http://127.0.0.1:8080``),
``--token`` (``PUNCTUAL_TOKEN``), ``--tenant`` (default ``default``) and ``--json``, which
prints the JSON the route answered, exactly. Mutations take ``--idempotency-key``; without
it a new key is made and printed to stderr *before* the request, so whatever happens next
the same request can be sent again with the same key and acts at most once.

Exit codes (API.md): 0 success, 1 the health report is unhealthy, 2 usage or validation
(400, 413, 422), 3 not found, 4 conflict, 5 unavailable or undecided (no answer, 5xx, 429,
202), 6 not authenticated or not allowed (401, 403).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn
from urllib.parse import urlsplit

import typer

from punctual.cli.options import shared_options

if TYPE_CHECKING:
    # The typed client and its models load when a command talks to a server, not when the
    # CLI starts: ``serve``, the host commands and the fork server of every worker import
    # this module, and the client is most of what the CLI would cost them.
    from punctual.client import ApiError, ClientError, PunctualClient
    from punctual.resources import Resource

DEFAULT_URL = "http://127.0.0.1:8080"

EXIT_UNHEALTHY = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_UNAVAILABLE = 5
EXIT_NOT_ALLOWED = 6

UrlOpt = Annotated[
    str,
    typer.Option(
        "--url", envvar="PUNCTUAL_URL", help="The punctual server.", rich_help_panel="Server"
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="PUNCTUAL_TOKEN",
        help="Bearer token of a tenant member.",
        show_default=False,
        rich_help_panel="Server",
    ),
]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant.", rich_help_panel="Server")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the route's JSON answer.")]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Reuse the key of an earlier try to retry it (default: a new key, printed).",
        show_default=False,
    ),
]
VersionOpt = Annotated[
    int | None,
    typer.Option(
        "--version",
        help="The version you read (default: the current one, read first).",
        show_default=False,
    ),
]
LimitOpt = Annotated[int | None, typer.Option(help="At most this many (1-100).")]
CursorOpt = Annotated[str | None, typer.Option(help="The next_cursor of the page before.")]


class ListOrder(StrEnum):
    """A list's order (API.md "Lists")."""

    NEWEST = "newest"
    OLDEST = "oldest"


OrderOpt = Annotated[
    ListOrder | None,
    typer.Option(
        help="newest first (the default) or oldest first; a --cursor keeps its page's order.",
        show_default=False,
    ),
]


def order_of(order: ListOrder | None) -> Literal["newest", "oldest"] | None:
    """The ``order`` a list call sends: as given, or the server's default."""
    if order is None:
        return None
    return "oldest" if order is ListOrder.OLDEST else "newest"


@dataclass(frozen=True)
class Remote:
    """The server, token and tenant a command acts on: the options every tenant command
    shares."""

    url: UrlOpt = DEFAULT_URL
    token: TokenOpt = None
    tenant: TenantOpt = "default"

    def client(self) -> PunctualClient:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            fail(EXIT_INVALID, f"--url must be an http:// or https:// address, not {self.url!r}")
        if not self.token:
            fail(EXIT_NOT_ALLOWED, "not authenticated: pass --token or set PUNCTUAL_TOKEN")
        from punctual.client import PunctualClient

        return PunctualClient(self.url, self.token, self.tenant)


tenant_command = shared_options(Remote, JsonOpt)
"""Registers a tenant command with ``app.command(name)`` or ``app.callback()``, adding the
options every tenant command shares: ``--json``, ``--url``, ``--token`` and ``--tenant``. The
command itself takes ``remote: Remote`` and ``as_json: bool`` in their place (a command may
declare its own ``--json`` option instead, to say what it prints)."""


def fail(code: int, message: str) -> NoReturn:
    """Stop with ``message`` on stderr and exit ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def exit_code(error: ClientError) -> int:
    """API.md's exit code for what the client raised."""
    from punctual.client import (
        AuthenticationError,
        ConflictError,
        InProgress,
        NotFoundError,
        PermissionDeniedError,
        ServerUnreachable,
        UnavailableError,
    )

    if isinstance(error, AuthenticationError | PermissionDeniedError):
        return EXIT_NOT_ALLOWED
    if isinstance(error, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, ConflictError):
        return EXIT_CONFLICT
    if isinstance(error, UnavailableError | InProgress | ServerUnreachable):
        return EXIT_UNAVAILABLE
    return EXIT_INVALID


@contextmanager
def session(remote: Remote, as_json: bool) -> Iterator[PunctualClient]:
    """A client for the command's requests; what they raise becomes output and exit code."""
    with answering(as_json), remote.client() as client:
        yield client


@contextmanager
def answering(as_json: bool) -> Iterator[None]:
    """A client error becomes stderr lines, the route's JSON (``--json``) and an exit code."""
    from punctual.client import ApiError, ClientError, InProgress

    try:
        yield
    except ClientError as error:
        if as_json and isinstance(error, ApiError):
            emit_json(error.envelope)
        elif as_json and isinstance(error, InProgress):
            emit_json({"status": "in_progress"})
        for line in describe(error):
            typer.echo(line, err=True)
        raise typer.Exit(exit_code(error)) from error


def describe(error: ClientError) -> list[str]:
    """What stderr says about a failure: the error, and how to retry an undecided one."""
    from punctual.client import ApiError, InProgress, ServerUnreachable, UnavailableError

    if isinstance(error, ApiError):
        lines = [f"error: {error.status} {error.code}: {error.message}"]
        lines += [f"  {refusal}" for refusal in validation_errors(error)]
    else:
        lines = [f"error: {error}"]
    undecided = isinstance(error, UnavailableError | InProgress | ServerUnreachable)
    if undecided and error.idempotency_key is not None:
        lines.append(
            "the outcome is not decided yet; send the same command again with "
            f"--idempotency-key {error.idempotency_key}"
        )
    return lines


def validation_errors(error: ApiError) -> list[str]:
    """Each field a validation error refused, as ``where: why``."""
    return [
        f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
        for item in error.details.get("errors") or []
        if isinstance(item, dict)
    ]


def mutation_key(given: str | None, version: int | None = None) -> str:
    """``given``, or a new key printed to stderr first, with the flags a retry needs."""
    if given is not None:
        return given
    from punctual.client import new_idempotency_key

    key = new_idempotency_key()
    retry = f"--idempotency-key {key}" + (f" --version {version}" if version is not None else "")
    typer.echo(f"idempotency key: {key} (to retry this request: {retry})", err=True)
    return key


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def emit(answer: Resource | None, as_json: bool, human: str | Iterable[str]) -> None:
    """The route's JSON with ``--json`` (nothing for a ``204``), else lines for people."""
    if as_json:
        if answer is not None:
            emit_json(answer.raw)
        return
    typer.echo(human if isinstance(human, str) else "\n".join(human))


def parse_json(value: str, option: str) -> Any:
    """A JSON option's value; ``@FILE`` reads it from a file."""
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {value[1:]}: {exc}", param_hint=option) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=option) from exc


def pairs(values: Sequence[str] | None, option: str) -> dict[str, str] | None:
    """``KEY=VALUE`` options as a mapping (``None`` when none were given)."""
    if not values:
        return None
    result: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint=option)
        result[name] = text
    return result


# --------------------------------------------------------------------------- human output


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shown(value: Any) -> str:
    from punctual.resources import Resource

    if value is None:
        return "-"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Resource):
        return json.dumps(value.raw)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def block(title: str, rows: Iterable[tuple[str, Any]]) -> list[str]:
    """A title and aligned ``label: value`` lines; rows without a value are left out."""
    listed = [(label, value) for label, value in rows if value is not None]
    width = max((len(label) for label, _ in listed), default=0)
    return [title, *(f"  {label + ':':<{width + 1}} {shown(value)}" for label, value in listed)]


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    next_cursor: str | None,
    empty: str,
) -> list[str]:
    """A list as people read it: a header line and aligned columns (the last one is left
    ragged, so a long message does not pad every line), then how to get the next page
    when there is one (a value's line breaks and tabs become spaces, so a row stays one
    line). ``--json`` prints the route's page instead."""
    cells = [[" ".join(shown(value).split()) for value in row] for row in rows]
    if not cells:
        lines = [empty]
    else:
        every = [list(headers), *cells]
        widths = [max(len(line[i]) for line in every) for i in range(len(headers) - 1)]
        lines = [
            "  ".join(
                [*(text.ljust(w) for text, w in zip(line, widths, strict=False)), line[-1]]
            ).rstrip()
            for line in every
        ]
    if next_cursor is not None:
        lines.append(f"(more: --cursor {next_cursor})")
    return lines


def last_error(error: Any) -> str:
    if error is None:
        return "-"
    return f"{error.code}: {error.message}"
