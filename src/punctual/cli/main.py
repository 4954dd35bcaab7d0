"""The ``punctual`` command line (IF-3): serve, worker, db, tokens, definitions, starts, health.

Exit codes: 0 success, 1 an operation was refused (the message says why), 2 usage or
configuration error.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from punctual import bootstrap
from punctual.adapters.stores.sql import migrate
from punctual.adapters.stores.sql.store import SqlStore
from punctual.cli import asgi
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import DefinitionState
from punctual.errors import ConfigurationError, PunctualError
from punctual.settings import Settings, load_settings
from punctual.usecases import definitions, health, identity, schedules, starts

app = typer.Typer(
    name="punctual",
    help="A durable scheduler for workflow runs.",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
tokens_app = typer.Typer(help="Bearer tokens.", no_args_is_help=True)
definitions_app = typer.Typer(help="Host-global workflow definitions.", no_args_is_help=True)
starts_app = typer.Typer(help="Scheduled starts.", no_args_is_help=True)
schedules_app = typer.Typer(help="Recurring schedules.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(tokens_app, name="tokens")
app.add_typer(definitions_app, name="definitions")
app.add_typer(starts_app, name="starts")
app.add_typer(schedules_app, name="schedules")

ConfigOpt = Annotated[str | None, typer.Option("--config", help="TOML configuration file.")]
DbOpt = Annotated[
    str | None, typer.Option("--database-url", help="Overrides database_url.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

log = logging.getLogger("punctual")


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _settings(config: str | None, database_url: str | None, **extra: Any) -> Settings:
    return load_settings(config, database_url=database_url, **extra)


@contextmanager
def _handled() -> Iterator[None]:
    try:
        yield
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except PunctualError as exc:
        typer.echo(f"error: {exc.code}: {exc}", err=True)
        raise typer.Exit(1) from exc


def _emit(data: Any, as_json: bool, human: str) -> None:
    typer.echo(json.dumps(data, indent=2) if as_json else human)


@app.command()
def serve(
    config: ConfigOpt = None,
    database_url: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    app_ref: Annotated[
        str, typer.Option("--app", help="The workflows to run, as module:attr.")
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
) -> None:
    """Run the API, the runner and a worker in one process (or the chosen components)."""
    _configure_logging()
    wanted = {c.strip() for c in components.split(",") if c.strip()}
    unknown = wanted - {"api", "runner", "worker"}
    if unknown or not wanted:
        typer.echo(f"error: unknown component(s): {', '.join(sorted(unknown))}", err=True)
        raise typer.Exit(2)
    if workers > 1:
        _serve_api_processes(config, database_url, host, port, workers, wanted, dev_token)
        return
    with _handled():
        settings = _settings(config, database_url)
        system = bootstrap.build(settings)
    try:
        _bootstrap_default_tenant(system, dev_token)
        if "worker" in wanted:
            with _handled():
                system.start_worker(app_ref)
        if "runner" in wanted:
            system.start_runner()
        if "api" in wanted:
            import uvicorn

            # uvicorn re-raises SIGTERM after its own shutdown; exit normally instead, so
            # the runner and workers below are stopped and recorded as stopped.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            typer.echo(f"punctual is serving on http://{host}:{port}")
            uvicorn.run(system.http_app(), host=host, port=port, log_level="warning")
        else:
            _wait_for_signal()
    finally:
        system.close()


def _serve_api_processes(
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
    import uvicorn

    if wanted != {"api"}:
        typer.echo("error: --workers needs --components api", err=True)
        raise typer.Exit(2)
    with _handled():
        settings = _settings(config, database_url)
        system = bootstrap.build(settings)  # validate and migrate once, before forking
    try:
        _bootstrap_default_tenant(system, dev_token)
    finally:
        system.close()
    if config is not None:
        os.environ[asgi.CONFIG_FILE_VARIABLE] = config
    if database_url is not None:
        os.environ["PUNCTUAL_DATABASE_URL"] = database_url
    typer.echo(f"punctual is serving on http://{host}:{port} with {workers} API processes")
    uvicorn.run(
        "punctual.cli.asgi:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
    )


def _bootstrap_default_tenant(system: bootstrap.Punctual, dev_token: str | None) -> None:
    """First start: tenant ``default`` with an admin token (``--dev-token`` or a new one)."""
    with _handled():
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
    app_ref: Annotated[str, typer.Option("--app", help="The workflows, as module:attr.")],
    config: ConfigOpt = None,
    database_url: DbOpt = None,
    engine: Annotated[
        str | None, typer.Option(help="local or temporal; default: the configured engine.")
    ] = None,
    task_queue: Annotated[
        list[str] | None, typer.Option("--task-queue", help="Queue(s) to serve; default all.")
    ] = None,
    slots: Annotated[int | None, typer.Option(help="Runs executed at once.")] = None,
) -> None:
    """Run a worker alone: it registers its definitions and executes runs."""
    _configure_logging()
    if engine not in (None, "local", "temporal"):
        typer.echo(f"error: --engine must be local or temporal, not {engine!r}", err=True)
        raise typer.Exit(2)
    with _handled():
        settings = _settings(config, database_url)
        if engine is not None and engine != settings.engine:
            settings = settings.model_copy(update={"engine": engine})
        system = bootstrap.build(settings)
    try:
        with _handled():
            system.start_worker(app_ref, task_queue, slots)
        typer.echo(f"worker {system.workers[0].id} started")
        _wait_for_signal()
    finally:
        system.close()


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None, database_url: DbOpt = None) -> None:
    """Migrate the database to this version's schema."""
    with _handled():
        settings = _settings(config, database_url)
        store = SqlStore(settings.database_url)
        before, after = migrate.upgrade(store)
        store.dispose()
    typer.echo(f"schema: {before or 'empty'} -> {after}")


@tokens_app.command("create")
def tokens_create(
    tenant: Annotated[str, typer.Option(help="Tenant (created if absent).")],
    subject: Annotated[str, typer.Option(help="Member subject (created if absent).")],
    role: Annotated[Role, typer.Option(help="admin, member or viewer.")],
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Create a tenant member if needed and print a new token for it."""
    with _handled():
        system = bootstrap.build(_settings(config, database_url))
        try:
            issued = identity.ensure_member_token(system.services, tenant, subject, role)
        finally:
            system.close()
    _emit(
        {"token": issued.token, "id": issued.id, "tenant": tenant, "subject": subject},
        as_json,
        issued.token,
    )


def _system(config: str | None, database_url: str | None) -> bootstrap.Punctual:
    return bootstrap.build(_settings(config, database_url))


@definitions_app.command("list")
def definitions_list(
    as_json: JsonOpt = False, config: ConfigOpt = None, database_url: DbOpt = None
) -> None:
    """List every workflow version, its state and whether a live worker has it loaded."""
    with _handled():
        system = _system(config, database_url)
        try:
            items = definitions.list_definitions(system.services)
        finally:
            system.close()
    lines = [
        f"{d['name']:<24} {d['version']:<10} {d['state']:<11} "
        f"{'loaded' if d['loaded'] else '-':<7} {d['artifact']}"
        for d in items
    ]
    _emit(items, as_json, "\n".join(lines) or "no definitions yet")


def _lifecycle(
    name: str,
    version: str,
    state: DefinitionState,
    config: str | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    with _handled():
        system = _system(config, database_url)
        try:
            updated = definitions.set_lifecycle(system.services, name, version, state)
        finally:
            system.close()
    _emit(
        {"name": updated.name, "version": updated.version, "state": updated.state},
        as_json,
        f"{updated.name} {updated.version} is {updated.state}",
    )


@definitions_app.command("activate")
def definitions_activate(
    name: str,
    version: str,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Make VERSION the active version of NAME (the previous one is deprecated)."""
    _lifecycle(name, version, DefinitionState.ACTIVE, config, database_url, as_json)


@definitions_app.command("deprecate")
def definitions_deprecate(
    name: str,
    version: str,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Stop using VERSION for new dispatches, keeping it for what still needs it."""
    _lifecycle(name, version, DefinitionState.DEPRECATED, config, database_url, as_json)


@definitions_app.command("retire")
def definitions_retire(
    name: str,
    version: str,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Retire VERSION; refused while anything still needs it."""
    _lifecycle(name, version, DefinitionState.RETIRED, config, database_url, as_json)


@definitions_app.command("check")
def definitions_check(
    as_json: JsonOpt = False, config: ConfigOpt = None, database_url: DbOpt = None
) -> None:
    """Deployment preflight: what each version is still needed by."""
    with _handled():
        system = _system(config, database_url)
        try:
            report = definitions.check(system.services)
            keys = definitions.key_report(system.services)
        finally:
            system.close()
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
    _emit({"definitions": report, "codec_keys": keys}, as_json, "\n".join(lines))


def _operator(tenant: str) -> Principal:
    """The CLI acts as the host operator: an admin of the tenant it names."""
    return Principal(tenant=tenant, subject="operator", role=Role.ADMIN)


@starts_app.command("list")
def starts_list(
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    state: Annotated[str | None, typer.Option(help="Only this state.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-100).")] = 50,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """List a tenant's scheduled starts."""
    with _handled():
        system = _system(config, database_url)
        try:
            result = starts.list_starts(
                system.services, _operator(tenant), starts.ListStarts(state=state, limit=limit)
            )
        finally:
            system.close()
    lines = [
        f"{s['id']}  {s['state']:<11} {s['start_at']}  {s['workflow']}  {s['business_request_id']}"
        for s in result["items"]
    ]
    _emit(result, as_json, "\n".join(lines) or "no starts")


@starts_app.command("get")
def starts_get(
    start_id: str,
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Show one scheduled start as JSON."""
    with _handled():
        system = _system(config, database_url)
        try:
            start = starts.get(system.services, _operator(tenant), start_id)
        finally:
            system.close()
    typer.echo(json.dumps(start, indent=2))


@schedules_app.command("list")
def schedules_list(
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    limit: Annotated[int, typer.Option(help="At most this many (1-100).")] = 50,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """List a tenant's schedules with their next fire times."""
    with _handled():
        system = _system(config, database_url)
        try:
            result = schedules.list_schedules(system.services, _operator(tenant), limit, None)
        finally:
            system.close()
    lines = [
        f"{s['id']}  {'enabled ' if s['enabled'] else 'paused  '} {s['name']:<24} "
        f"next: {(s['next_fire_times'] or ['-'])[0]}  last: {s['last_status'] or '-'}"
        for s in result["items"]
    ]
    _emit(result, as_json, "\n".join(lines) or "no schedules")


@schedules_app.command("create")
def schedules_create(
    name: Annotated[str, typer.Option(help="Unique among the tenant's schedules.")],
    workflow: Annotated[str, typer.Option(help="Workflow name.")],
    overlap: Annotated[str, typer.Option(help="skip, buffer_one or allow_all (required).")],
    missed: Annotated[str, typer.Option(help="catch_up or skip (required).")],
    input_json: Annotated[str, typer.Option("--input", help="Input as JSON.")] = "{}",
    cron: Annotated[str | None, typer.Option(help="Five-field cron expression.")] = None,
    time_zone: Annotated[str, typer.Option(help="IANA zone of the cron expression.")] = "UTC",
    interval_ms: Annotated[int | None, typer.Option(help="Interval in milliseconds.")] = None,
    workload_class: Annotated[str, typer.Option(help="Host workload class.")] = "standard",
    max_catch_up: Annotated[int, typer.Option(help="1-100 per pass.")] = 10,
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    subject: Annotated[str, typer.Option(help="Creator identity of the runs.")] = "operator",
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Create a recurring schedule (cron in a time zone, or an interval)."""
    if (cron is None) == (interval_ms is None):
        typer.echo("error: give exactly one of --cron or --interval-ms", err=True)
        raise typer.Exit(2)
    try:
        payload = json.loads(input_json)
    except ValueError as exc:
        typer.echo(f"error: --input is not valid JSON: {exc}", err=True)
        raise typer.Exit(2) from exc
    spec: dict[str, Any] = (
        {"cron": cron, "time_zone": time_zone} if cron is not None else {"interval_ms": interval_ms}
    )
    command = schedules.CreateSchedule(
        name, workflow, payload, spec, overlap, missed, workload_class, max_catch_up=max_catch_up
    )
    with _handled():
        system = _system(config, database_url)
        try:
            principal = Principal(tenant=tenant, subject=subject, role=Role.ADMIN)
            now = system.services.clock.now()
            with system.store.transaction() as tx:
                tx.identity.ensure_tenant(tenant, now)
                if tx.identity.member_role(tenant, subject) is None:
                    tx.identity.upsert_member(tenant, subject, Role.ADMIN, now)
            created = system.mutations.run(
                None, schedules.create(system.services, principal, command)
            ).body
        finally:
            system.close()
    human = f"{created['id']} {created['name']}: next {', '.join(created['next_fire_times'][:3])}"
    _emit(created, as_json, human)


def _toggle_schedule(
    schedule_id: str, enabled: bool, tenant: str, config: str | None, database_url: str | None
) -> None:
    with _handled():
        system = _system(config, database_url)
        try:
            operator = _operator(tenant)
            current = schedules.get(system.services, operator, schedule_id)
            mutation = schedules.set_enabled(
                system.services, operator, schedule_id, current["version"], enabled
            )
            updated = system.mutations.run(None, mutation).body
        finally:
            system.close()
    typer.echo(f"{updated['name']} is {'enabled' if updated['enabled'] else 'paused'}")


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: str,
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Stop generating occurrences (queued ones still run); the cursor is kept."""
    _toggle_schedule(schedule_id, False, tenant, config, database_url)


@schedules_app.command("resume")
def schedules_resume(
    schedule_id: str,
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Generate again; what was missed while paused follows the schedule's missed policy."""
    _toggle_schedule(schedule_id, True, tenant, config, database_url)


@app.command("health")
def health_command(
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    database_url: DbOpt = None,
) -> None:
    """The tenant's health report; exits 1 when degraded."""
    with _handled():
        system = _system(config, database_url)
        try:
            report = health.report(system.services, _operator(tenant))
        finally:
            system.close()
    human = [f"status: {report['status']}", f"failed starts: {report['starts']['failed_count']}"]
    human += [f"stalled dispatches: {report['starts']['stalled_count']}"]
    human += [f"engine available: {report['engine']['available']}"]
    human += [f"live workers: {len(report['workers'])}", f"tzdata: {report['tzdata_version']}"]
    human += [
        f"finding {f['id']} [{f['kind']}] {'(acknowledged) ' if f['acknowledged'] else ''}"
        f"{f['message']}"
        for f in report["findings"]
    ]
    _emit(report, as_json, "\n".join(human))
    if report["status"] != "ok":
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
