"""What every command's start shares (SPEC OP-1, API.md "The CLI over HTTP").

* ``Commands``, the root command group, is the one place where a ``PunctualError`` a
  command raised becomes one line on stderr and its exit code: a refused operation, a
  configuration the host cannot start with, a database, file, extra or server that is not
  there, a port in use. No command repeats that translation, and a user's mistake never
  shows a traceback.
* ``listen`` binds a listening socket before anything else starts, so a port in use is
  that one line (exit 7) instead of uvicorn's log and exit 1.
* ``importable_from_cwd`` lets ``--app module:attr`` name a module of the current
  directory, as uvicorn and celery do.

Exit codes: 0 success, 1 the health report is unhealthy, 2 usage, validation or
configuration, 3 not found, 4 conflict (a refusal), 5 unavailable (a database, server,
file or extra that is not there) or undecided, 6 not authenticated or not allowed, 7 the
address to listen on is in use.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from punctual.errors import (
    AddressInUse,
    BadRequest,
    ConfigurationError,
    Conflict,
    Forbidden,
    HostUnavailable,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PunctualError,
    QuotaExceeded,
    Unauthenticated,
    Unavailable,
)

EXIT_CODES: tuple[tuple[tuple[type[PunctualError], ...], int], ...] = (
    ((ConfigurationError, BadRequest, InvalidRequest, PayloadTooLarge), 2),
    ((NotFound,), 3),
    ((Conflict,), 4),
    ((QuotaExceeded, Unavailable), 5),
    ((Unauthenticated, Forbidden), 6),
    ((AddressInUse,), 7),
)
"""A command's exit code for what it raised (as its HTTP status would map)."""


def exit_code(exc: PunctualError) -> int:
    return next((code for kinds, code in EXIT_CODES if isinstance(exc, kinds)), 5)


def error_line(exc: PunctualError) -> str:
    """``error: CODE: message`` (a configuration error names its key instead of a code),
    on one line whatever the message: a driver's text may span several."""
    message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    prefix = "" if isinstance(exc, ConfigurationError) else f"{exc.code}: "
    return f"error: {prefix}{message}"


def fail(exc: PunctualError) -> NoReturn:
    typer.echo(error_line(exc), err=True)
    raise typer.Exit(exit_code(exc)) from exc


class Commands(TyperGroup):
    """The ``punctual`` group: every subcommand runs inside its ``invoke``."""

    def invoke(self, ctx: Any) -> Any:  # a Context of the click that typer vendors
        try:
            return super().invoke(ctx)
        except PunctualError as exc:
            fail(exc)


def listen(host: str, port: int, setting: str) -> socket.socket:
    """A socket bound to ``host:port`` and listening, as uvicorn binds its own
    (SO_REUSEADDR, IPv6 for an address with a colon), or ``AddressInUse`` naming
    ``setting``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening now, not when the server starts: two sockets of this process bound to
        # one address with SO_REUSEADDR (``--metrics-port`` equal to ``--port``) both bind,
        # and only the second ``listen`` says the address is in use.
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(
                f"{host}:{port} is already in use by another process; stop it, or choose "
                f"another {setting}",
                host=host,
                port=port,
            ) from exc
        raise HostUnavailable(
            f"cannot listen on {host}:{port} ({exc.strerror or type(exc).__name__}); "
            f"choose another {setting}",
            code="address_unavailable",
        ) from exc
    sock.set_inheritable(True)  # API processes (--workers) serve it too
    return sock


def importable_from_cwd(app_ref: str) -> str:
    """The ``--app`` callback: the current directory goes first on ``sys.path`` (once), so
    ``--app mymod:app`` imports ``./mymod.py``; the worker's slot processes inherit the
    path."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    return app_ref
