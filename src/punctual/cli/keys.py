"""``punctual keys``: the codec key lifecycle (SPEC RT-2), a host command.

The safe order is create → distribute → activate → rewrap → retire (docs/operations.md,
"Keys"). ``create`` and ``retire`` edit one key file; ``activate``, ``check`` and
``retire`` read or write the store without needing any key; ``rewrap`` needs a ring that
holds the active key and the keys it moves off.

Exit codes (API.md, "The CLI over HTTP"; ``punctual.cli.startup`` prints the one line): 0
success, 2 usage, validation or configuration, 3 not found, 4 conflict (a refusal: a live
process lacks the key, the key is still needed), 5 the database or a key file is
unavailable.

The store and the composition root are imported inside the commands that use them (see
``punctual.cli.main``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.host import Host, JsonOpt, emit, host_command
from punctual.errors import InvalidRequest, NotFound, PunctualError

if TYPE_CHECKING:
    from punctual.ports.store import Store
    from punctual.settings import Settings

keys_app = typer.Typer(
    help="Codec keys: create, activate, check, rewrap, retire.", no_args_is_help=True
)

KeyFileOpt = Annotated[Path, typer.Option("--key-file", help="The key ring file.")]
KeyIdOpt = Annotated[str, typer.Option("--id", help="The key id.")]


@contextmanager
def _json_error(as_json: bool) -> Iterator[None]:
    """With ``--json`` a refusal is also its error envelope on stdout; the one line on
    stderr and the exit code come from the root group, as for every command."""
    try:
        yield
    except PunctualError as exc:
        if as_json:
            error = {"code": exc.code, "message": str(exc), "details": exc.details}
            typer.echo(json.dumps({"error": error}, indent=2))
        raise


@contextmanager
def _store(settings: Settings) -> Iterator[Store]:
    """The store alone, at the current schema: activation and checks need no key ring."""
    from punctual import bootstrap

    with bootstrap.current_store(settings) as store:
        yield store


@keys_app.command("create")
def create(
    key_file: KeyFileOpt,
    key_id: Annotated[
        str | None, typer.Option("--id", help="The new key's id; default k<N+1>.")
    ] = None,
    copy_from: Annotated[
        Path | None,
        typer.Option("--from", help="Copy the key with this id from another key file."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a new key ring, or add a key (not active) to an existing one."""
    from punctual.adapters import crypto

    with _json_error(as_json):
        existed = key_file.exists()
        material = None
        if copy_from is not None:
            if key_id is None:
                raise InvalidRequest("--from needs --id: the id of the key to copy")
            material = crypto.key_material(copy_from, crypto.check_key_id(key_id))
        created = crypto.add_key(key_file, key_id, material)
        ring = crypto.read_ring(key_file)
    action = "added to" if existed else "written as a new ring in"
    human = f"codec key {created} {action} {key_file}"
    if existed:
        human += f" (not active; the file's active key stays {ring.active})"
    emit(
        {"key_id": created, "key_file": str(key_file), "active": ring.active == created},
        as_json,
        human,
    )


@host_command(keys_app.command("activate"))
def activate(host: Host, as_json: bool, key_id: KeyIdOpt) -> None:
    """Make KEY the active key, recorded in the store; refused while a live process lacks it."""
    from punctual.adapters import crypto
    from punctual.adapters.clock import SystemClock
    from punctual.usecases.tenancy import keys

    with _json_error(as_json):
        settings = host.settings()
        crypto.check_key_id(key_id)
        with _store(settings) as store:
            done = keys.activate(
                store, key_id, settings.codec.liveness_seconds, SystemClock().now()
            )
    if done.previous == done.key_id:
        human = f"codec key {done.key_id} was already the active key"
    else:
        human = (
            f"codec key {done.key_id} is the active key (was {done.previous or 'not recorded'}); "
            f"{len(done.live)} live process(es) switch within "
            f"{settings.codec.refresh_seconds:g} s"
        )
    emit(
        {
            "key_id": done.key_id,
            "previous": done.previous,
            "live_processes": [keys.process_view(p) for p in done.live],
        },
        as_json,
        human,
    )


@host_command(keys_app.command("check"))
def check(
    host: Host,
    as_json: bool,
    key_file: Annotated[
        Path | None, typer.Option("--key-file", help="Also say which keys this file holds.")
    ] = None,
) -> None:
    """Each key id: what stored values still need it and which live processes hold it."""
    from punctual.adapters import crypto
    from punctual.adapters.clock import SystemClock
    from punctual.usecases.tenancy import keys

    with _json_error(as_json):
        settings = host.settings()
        ring = list(crypto.read_ring(key_file).keys) if key_file is not None else None
        with _store(settings) as store:
            report = keys.key_check(
                store, settings.codec.liveness_seconds, SystemClock().now(), ring
            )
    emit(report, as_json, _check_text(report))


def _check_text(report: dict[str, Any]) -> str:
    from punctual.usecases.tenancy import keys

    active = report["active_key_id"]
    lines = [f"active key: {active}" if active else "active key: none recorded in the store"]
    for key in report["keys"]:
        needed = keys.needed_by(key["needed_by"])
        parts = [
            f"needed by {', '.join(needed)}" if needed else "not needed",
            f"held by {len(key['held_by'])} live process(es)",
        ]
        if key["in_key_file"] is not None:
            parts.append("in the key file" if key["in_key_file"] else "not in the key file")
        lines.append(f"{key['key_id']}{' (active)' if key['active'] else ''}: {'; '.join(parts)}")
    lines.append(f"live processes: {len(report['processes'])}")
    for process in report["processes"]:
        sealing = process["active_key_id"] or "nothing (it lacks the active key)"
        lines.append(
            f"  {process['id']} ({','.join(process['components']) or 'command'} on "
            f"{process['host']}, pid {process['pid']}): holds {','.join(process['key_ids'])}; "
            f"seals with {sealing}"
        )
    return "\n".join(lines)


@host_command(keys_app.command("rewrap"))
def rewrap(
    host: Host,
    as_json: bool,
    batch: Annotated[int, typer.Option("--batch", help="Rows per transaction.")] = 500,
) -> None:
    """Seal stored input and webhook URLs and secrets again with the active key."""
    from punctual.usecases.tenancy import keys

    with _json_error(as_json), host.system() as system:
        report = keys.rewrap(system.services, batch)
    lines = [f"rewrapped with {report.active_key_id}:"]
    lines += [f"  {keys.NEEDED_BY[kind]}: {count}" for kind, count in report.rewrapped.items()]
    if not report.rewrapped:
        lines.append("  nothing needed it")
    if report.changed:
        lines.append(
            "changed meanwhile and left as the change wrote them: "
            + ", ".join(keys.needed_by(report.changed))
        )
    if report.unreadable:
        lines.append(
            "not readable with this key ring (add the keys, or they fail on their own): "
            + ", ".join(keys.needed_by(report.unreadable))
        )
    for key_id, counts in report.still_needed.items():
        lines.append(
            f"{key_id} is still needed by {', '.join(keys.needed_by(counts))}; run rewrap again"
        )
    emit(report.view(), as_json, "\n".join(lines))


@host_command(keys_app.command("retire"))
def retire(host: Host, as_json: bool, key_file: KeyFileOpt, key_id: KeyIdOpt) -> None:
    """Remove KEY from the key file; refused while it is active or anything needs it."""
    from punctual.adapters import crypto
    from punctual.adapters.clock import SystemClock
    from punctual.usecases.tenancy import keys

    with _json_error(as_json):
        settings = host.settings()
        crypto.check_key_id(key_id)
        if key_id not in crypto.read_ring(key_file).keys:
            raise NotFound(f"codec key {key_id!r} is not in {key_file}")
        with _store(settings) as store:
            store_active = keys.check_retirement(
                store, key_id, settings.codec.liveness_seconds, SystemClock().now()
            )
        crypto.remove_key(key_file, key_id, store_active)
    emit(
        {"key_id": key_id, "key_file": str(key_file), "retired": True},
        as_json,
        f"codec key {key_id} removed from {key_file}; remove it from every other key file "
        "too (nothing stored needs it)",
    )
