"""What the host commands share (``serve``, ``worker``, ``runner``, ``db``, ``keys``,
``retention``, ``tokens create``, ``definitions``): the options that say which
configuration and database they act on, ``--json``, and the settings they load.

The settings, the stores and the composition root are imported when a host command runs,
never when the CLI starts: the tenant commands (the CLI over HTTP) load only the client.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
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


def emit(data: Any, as_json: bool, human: str) -> None:
    typer.echo(json.dumps(data, indent=2) if as_json else human)
