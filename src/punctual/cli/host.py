"""What the host commands share (``serve``, ``worker``, ``runner``, ``db``, ``keys``,
``retention``, ``tokens create``, ``definitions``): the options that say which
configuration and database they act on, ``--json``, the settings they load and the system
they assemble.

The settings, the stores and the composition root are imported when a host command runs,
never when the CLI starts: the tenant commands (the CLI over HTTP) load only the client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.options import shared_options

if TYPE_CHECKING:
    from punctual.bootstrap import Punctual
    from punctual.settings import Settings

ConfigOpt = Annotated[str | None, typer.Option("--config", help="TOML configuration file.")]
DbOpt = Annotated[
    str | None, typer.Option("--database-url", help="Overrides database_url.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def host_settings(config: str | None, database_url: str | None, **extra: Any) -> Settings:
    """The host's settings: the file, then the environment, then ``--database-url``."""
    from punctual.settings import load_settings

    return load_settings(config, database_url=database_url, **extra)


@contextmanager
def assembled(settings: Settings) -> Iterator[Punctual]:
    """The system these settings assemble, closed when the command is done."""
    from punctual import bootstrap

    system = bootstrap.build(settings)
    try:
        yield system
    finally:
        system.close()


@dataclass(frozen=True)
class Host:
    """The configuration and database a host command acts on: the options every host
    command with ``--json`` shares."""

    config: ConfigOpt = None
    database_url: DbOpt = None

    def settings(self) -> Settings:
        return host_settings(self.config, self.database_url)

    def system(self) -> AbstractContextManager[Punctual]:
        """The assembled system (the settings are loaded first: a configuration error costs
        no assembly)."""
        return assembled(self.settings())


host_command = shared_options(Host, JsonOpt)
"""Registers a host command with ``app.command(name)``, adding ``--json``, ``--config`` and
``--database-url`` after its own options; the command takes ``host: Host`` and
``as_json: bool`` in their place."""


def emit(data: Any, as_json: bool, human: str) -> None:
    typer.echo(json.dumps(data, indent=2) if as_json else human)
