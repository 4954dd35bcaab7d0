"""The ``punctual`` command line (SPEC IF-3).

Host commands act on this host's configuration and database: ``serve``, ``worker``,
``db``, ``keys``, ``retention``, ``definitions`` and ``tokens create`` (the bootstrap
token). Tenant commands (``starts``, ``schedules``, ``runs``, ``health``, ``members``,
``tokens issue|list|revoke``) act through a server's HTTP API with a token
(``punctual.cli.remote``), so they need no database.

Exit codes (API.md "The CLI over HTTP"), the same for every command: 0 success, 1 the
health report is unhealthy, 2 usage, validation or configuration error, 3 not found,
4 conflict (a refusal), 5 unavailable or undecided, 6 not authenticated or not allowed,
7 a port in use. What a command raises becomes its one line and exit code in one place,
the root group (``punctual.cli.startup``).

Host commands import the composition root (``bootstrap``: SQLAlchemy, FastAPI, Alembic,
about a second) inside the command, so a tenant command, which speaks only HTTP, starts
without it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.host import ConfigOpt, DbOpt, Host, assembled, emit, host_command, host_settings
from punctual.cli.keys import keys_app
from punctual.cli.options import Command
from punctual.cli.outbound import notifications_app, webhooks_app
from punctual.cli.records import audit_app, holds_app
from punctual.cli.retention import retention_app
from punctual.cli.schedules import schedules_app
from punctual.cli.startup import Commands, importable_from_cwd, listen
from punctual.cli.tenant import health_app, members_app, runs_app, starts_app, tokens_app
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState

if TYPE_CHECKING:
    from punctual.bootstrap import Punctual
    from punctual.settings import Settings

app = typer.Typer(
    cls=Commands,
    name="punctual",
    help="A durable scheduler for workflow runs.",
    no_args_is_help=True,
)
db_app = typer.Typer(help="Database schema (host).", no_args_is_help=True)
definitions_app = typer.Typer(help="Host-global workflow definitions (host).", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(tokens_app, name="tokens")
app.add_typer(definitions_app, name="definitions")
app.add_typer(starts_app, name="starts")
app.add_typer(schedules_app, name="schedules")
app.add_typer(runs_app, name="runs")
app.add_typer(health_app, name="health")
app.add_typer(members_app, name="members")
app.add_typer(notifications_app, name="notifications")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(holds_app, name="holds")
app.add_typer(audit_app, name="audit")
app.add_typer(keys_app, name="keys")
app.add_typer(retention_app, name="retention")


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        typer.echo(f"punctual {version('punctual')}")
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print punctual's version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """A durable scheduler for workflow runs. Tenant commands act through a server's HTTP
    API (PUNCTUAL_URL, PUNCTUAL_TOKEN); host commands on this host's database."""


AppHelp = "The workflows, as module:attr (a module of the current directory works too)."

log = logging.getLogger("punctual")


def _configure_logging(config: str | None, database_url: str | None) -> Settings:
    """The host's settings, and the process's logging as their ``[logging]`` says (SPEC
    OP-4). A line logged while the settings load (a deprecated key) is held and written
    after, in the configured format; if they cannot load, it goes to stderr as it is."""
    held = logging.handlers.BufferingHandler(capacity=1000)
    root = logging.getLogger()
    root.addHandler(held)
    try:
        settings = host_settings(config, database_url)
        root.removeHandler(held)
        from punctual.adapters.observability import configure_logging

        configure_logging(**settings.logging.model_dump())
        return settings
    finally:
        root.removeHandler(held)
        for record in held.buffer:
            logging.getLogger(record.name).handle(record)


def _uvicorn_logging(settings: Settings) -> dict[str, Any]:
    """uvicorn writes through the handler ``_configure_logging`` set (no configuration of
    its own), its access log as ``[logging] access_log`` says."""
    return {"log_config": None, "log_level": None, "access_log": settings.logging.access_log}


MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve this process's Prometheus metrics on this port (/metrics); default: off.",
        show_default=False,
    ),
]
MetricsHostOpt = Annotated[str, typer.Option("--metrics-host", help="Address of --metrics-port.")]


def _listen_metrics(host: str, port: int | None) -> socket.socket | None:
    """The socket of ``--metrics-port``, bound before anything starts (a port in use is
    one line and exit 7, as ``--port``)."""
    return None if port is None else listen(host, port, "--metrics-port")


def _serve_metrics(system: Punctual, sock: socket.socket | None, stack: ExitStack) -> None:
    """This process's registry on its own port, stopped before the system is closed."""
    if sock is None:
        return
    from punctual.adapters.observability import MetricsServer

    server = MetricsServer(sock, system.metrics.registry)
    server.start()
    stack.callback(server.stop)
    host, port = server.address
    typer.echo(f"metrics on http://{_url_host(host)}:{port}/metrics")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@app.command()
def serve(
    config: ConfigOpt = None,
    database_url: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    app_ref: Annotated[
        str, typer.Option("--app", help=AppHelp, callback=importable_from_cwd)
    ] = "punctual.demo:app",
    dev_token: Annotated[
        str | None, typer.Option("--dev-token", help="Use this admin token for tenant 'default'.")
    ] = None,
    components: Annotated[
        str, typer.Option(help="Any of api,runner,worker (comma-separated).")
    ] = "api,runner,worker",
    workers: Annotated[
        int, typer.Option(help="API processes (with --components api only); one per core.")
    ] = 1,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Run the API, the runner and a worker in one process (or the chosen components)."""
    wanted = {c.strip() for c in components.split(",") if c.strip()}
    unknown = wanted - {"api", "runner", "worker"}
    if unknown or not wanted:
        typer.echo(f"error: unknown component(s): {', '.join(sorted(unknown))}", err=True)
        raise typer.Exit(2)
    if workers > 1 and metrics_port is not None:
        typer.echo(
            "error: --metrics-port serves one process's metrics; with --workers each API "
            "process serves its own on --port (/metrics)",
            err=True,
        )
        raise typer.Exit(2)
    settings = _configure_logging(config, database_url)
    if workers > 1:
        _serve_api_processes(settings, config, database_url, host, port, workers, wanted, dev_token)
        return
    with ExitStack() as sockets:
        # The configuration, the ports and the engine are checked before the database is
        # touched, the cheapest first; each refusal is one line (SPEC OP-1).
        api = sockets.enter_context(listen(host, port, "--port")) if "api" in wanted else None
        internal = _listen_internal(settings) if api is not None else None
        if internal is not None:
            sockets.enter_context(internal)
        metrics = _listen_metrics(metrics_host, metrics_port)
        if metrics is not None:
            sockets.enter_context(metrics)
        from punctual import bootstrap

        if wanted & {"runner", "worker"}:
            bootstrap.check_engine(settings)
        system = sockets.enter_context(assembled(settings))
        _bootstrap_default_tenant(system, dev_token)
        if "worker" in wanted:
            system.start_worker(app_ref)
        if "runner" in wanted:
            system.start_runner()
        _serve_metrics(system, metrics, sockets)
        if api is not None:
            import uvicorn

            # uvicorn re-raises SIGTERM after its own shutdown; exit normally instead,
            # so the runner and workers below are stopped and recorded as stopped.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            if internal is not None:
                _serve_internal(system, internal)
            typer.echo(f"punctual is serving on http://{host}:{port}")
            server = uvicorn.Server(
                uvicorn.Config(
                    system.http_app(), host=host, port=port, **_uvicorn_logging(settings)
                )
            )
            server.run(sockets=[api])
            if not server.started:  # the app's own startup failed (uvicorn logged it)
                raise typer.Exit(1)
        else:
            _wait_for_signal()


def _serve_api_processes(
    settings: Settings,
    config: str | None,
    database_url: str | None,
    host: str,
    port: int,
    workers: int,
    wanted: set[str],
    dev_token: str | None,
) -> None:
    """Several API processes behind one port; runners and workers run as their own
    processes (``--components runner,worker``)."""
    if wanted != {"api"}:
        typer.echo("error: --workers needs --components api", err=True)
        raise typer.Exit(2)
    with ExitStack() as sockets:
        api = sockets.enter_context(listen(host, port, "--port"))
        internal = _listen_internal(settings)
        if internal is not None:
            sockets.enter_context(internal)
        import uvicorn
        from uvicorn.supervisors import Multiprocess

        from punctual import bootstrap
        from punctual.cli import asgi

        system = bootstrap.build(settings)  # validate and migrate once, before forking
        try:
            _bootstrap_default_tenant(system, dev_token)
            # With internal_listen, this supervising process serves the /internal tree.
            if internal is not None:
                _serve_internal(system, internal)
        finally:
            if internal is None:
                system.close()
        if config is not None:
            os.environ[asgi.CONFIG_FILE_VARIABLE] = config
        if database_url is not None:
            os.environ["PUNCTUAL_DATABASE_URL"] = database_url
        typer.echo(f"punctual is serving on http://{host}:{port} with {workers} API processes")
        processes = uvicorn.Config(
            "punctual.cli.asgi:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **_uvicorn_logging(settings),
        )
        Multiprocess(processes, sockets=[api]).run()


def _listen_internal(settings: Settings) -> socket.socket | None:
    """The socket of ``internal_listen`` (SEC-3) when the ``/internal`` tree has an address
    of its own; None when it shares the API's (or does not exist)."""
    address = settings.internal_address()
    if address is None or settings.internal_token is None:
        return None
    return listen(*address, "internal_listen")


def _serve_internal(system: Punctual, sock: socket.socket) -> None:
    """Serve the ``/internal`` tree on ``internal_listen``'s socket, in a thread beside the
    API."""
    import uvicorn

    internal = system.internal_app()
    assert internal is not None, "internal_listen is set, so is internal_token"
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(
        uvicorn.Config(internal, host=host, port=port, **_uvicorn_logging(system.settings))
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="punctual-internal", daemon=True
    )
    thread.start()
    while not server.started:
        if not thread.is_alive():
            typer.echo(f"error: cannot serve internal_listen on {host}:{port}", err=True)
            raise typer.Exit(2)
        time.sleep(0.02)
    typer.echo(f"internal routes on http://{host}:{port}/internal/")


def _bootstrap_default_tenant(system: Punctual, dev_token: str | None) -> None:
    """First start: tenant ``default`` with an admin token (``--dev-token`` or a new one)."""
    from punctual.usecases.tenancy import identity

    issued = identity.bootstrap_default_tenant(system.services, dev_token)
    if issued is not None:
        typer.echo(f"admin token: {issued.token}")
    else:
        typer.echo(
            "tenant 'default' already exists; for a new token run: punctual tokens create "
            "--tenant default --subject admin --role admin"
        )


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


@app.command()
def worker(
    app_ref: Annotated[str, typer.Option("--app", help=AppHelp, callback=importable_from_cwd)],
    config: ConfigOpt = None,
    database_url: DbOpt = None,
    engine: Annotated[
        str | None, typer.Option(help="local or temporal; default: the configured engine.")
    ] = None,
    task_queue: Annotated[
        list[str] | None, typer.Option("--task-queue", help="Queue(s) to serve; default all.")
    ] = None,
    slots: Annotated[int | None, typer.Option(help="Runs executed at once.")] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Run a worker alone: it registers its definitions and executes runs."""
    if engine not in (None, "local", "temporal"):
        typer.echo(f"error: --engine must be local or temporal, not {engine!r}", err=True)
        raise typer.Exit(2)
    settings = _configure_logging(config, database_url)
    if engine is not None and engine != settings.engine:
        settings = settings.model_copy(update={"engine": engine})
    from punctual import bootstrap

    with ExitStack() as stack:
        metrics = _listen_metrics(metrics_host, metrics_port)
        if metrics is not None:
            stack.enter_context(metrics)
        bootstrap.check_engine(settings)
        system = stack.enter_context(assembled(settings))
        system.start_worker(app_ref, task_queue, slots)
        _serve_metrics(system, metrics, stack)
        typer.echo(f"worker {system.workers[0].id} started")
        _wait_for_signal()


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None, database_url: DbOpt = None) -> None:
    """Migrate the database to this version's schema."""
    settings = host_settings(config, database_url)
    from punctual import bootstrap

    before, after = bootstrap.upgrade_schema(settings)
    typer.echo(f"schema: {before or 'empty'} -> {after}")


@host_command(tokens_app.command("create"))
def tokens_create(
    host: Host,
    as_json: bool,
    tenant: Annotated[str, typer.Option(help="Tenant (created if absent).")],
    subject: Annotated[str, typer.Option(help="Member subject (created if absent).")],
    role: Annotated[Role, typer.Option(help="admin, member or viewer.")],
) -> None:
    """Create a tenant member if needed and print a new token for it."""
    from punctual.usecases.tenancy import identity

    with host.system() as system:
        issued = identity.ensure_member_token(system.services, tenant, subject, role)
    emit(
        {"token": issued.token, "id": issued.id, "tenant": tenant, "subject": subject},
        as_json,
        issued.token,
    )


@host_command(definitions_app.command("list"))
def definitions_list(host: Host, as_json: bool) -> None:
    """List every workflow version, its state and whether a live worker has it loaded."""
    from punctual.usecases.running import definitions

    with host.system() as system:
        items = definitions.list_definitions(system.services)
    lines = [
        f"{d['name']:<24} {d['version']:<10} {d['state']:<11} "
        f"{'loaded' if d['loaded'] else '-':<7} {d['artifact']}"
        for d in items
    ]
    emit(items, as_json, "\n".join(lines) or "no definitions yet")


_LIFECYCLE = {
    "activate": (
        DefinitionState.ACTIVE,
        "Make VERSION the active version of NAME (the previous one is deprecated).",
    ),
    "deprecate": (
        DefinitionState.DEPRECATED,
        "Stop using VERSION for new dispatches, keeping it for what still needs it.",
    ),
    "retire": (DefinitionState.RETIRED, "Retire VERSION; refused while anything still needs it."),
}
"""The commands that move a definition version through its lifecycle: the state each sets,
and its help."""


def _lifecycle_command(state: DefinitionState) -> Command:
    """``definitions <command> NAME VERSION``: VERSION of NAME takes ``state``."""

    def set_lifecycle(host: Host, as_json: bool, name: str, version: str) -> None:
        from punctual.usecases.running import definitions

        with host.system() as system:
            updated = definitions.set_lifecycle(system.services, name, version, state)
        emit(
            {"name": updated.name, "version": updated.version, "state": updated.state},
            as_json,
            f"{updated.name} {updated.version} is {updated.state}",
        )

    return set_lifecycle


for _command, (_state, _help) in _LIFECYCLE.items():
    host_command(definitions_app.command(_command, help=_help))(_lifecycle_command(_state))


@host_command(definitions_app.command("check"))
def definitions_check(host: Host, as_json: bool) -> None:
    """Deployment preflight: what each version is still needed by."""
    from punctual.usecases.running import definitions

    with host.system() as system:
        report = definitions.check(system.services)
        keys = definitions.key_report(system.services)
    lines = [
        f"{item['name']} {item['version']} ({item['state']}): "
        f"{'; '.join(item['needed_by']) or 'not needed'}"
        for item in report
    ]
    lines += [
        f"codec key {key['key_id']}{' (active)' if key['active'] else ''}: "
        f"{'; '.join(key['needed_by']) or 'not needed'}"
        for key in keys
    ]
    emit({"definitions": report, "codec_keys": keys}, as_json, "\n".join(lines))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
