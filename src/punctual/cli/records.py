"""``punctual holds`` and ``punctual audit`` over HTTP (SPEC RT-1, API.md "Retention and
holds"): what retention must keep, and who changed what. Both are for a tenant's admins.
The shared options, output and exit codes are in ``punctual.cli.remote``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.remote import (
    CursorOpt,
    KeyOpt,
    LimitOpt,
    OrderOpt,
    Remote,
    block,
    emit,
    mutation_key,
    order_of,
    session,
    table,
    tenant_command,
)

if TYPE_CHECKING:
    from punctual.resources import AuditEntry, Hold

holds_app = typer.Typer(
    help="Holds that keep records from retention (over HTTP, admins).", no_args_is_help=True
)
audit_app = typer.Typer(help="The tenant's audit log (over HTTP, admins).", no_args_is_help=True)

SUBJECT_KINDS = ("start", "schedule", "run", "tenant")


def hold_block(hold: Hold) -> list[str]:
    subject = hold.subject_kind + (f" {hold.subject_id}" if hold.subject_id else "")
    return block(
        f"hold {hold.id}",
        [
            ("subject", subject),
            ("reason", hold.reason),
            ("placed by", "the host" if hold.placed_by_host else hold.created_by),
            ("placed at", hold.created_at),
            ("released at", hold.released_at),
            ("released by", hold.released_by),
        ],
    )


@tenant_command(holds_app.command("place"))
def holds_place(
    remote: Remote,
    as_json: bool,
    kind: Annotated[
        str,
        typer.Option(
            "--kind", help=f"What to keep: {', '.join(SUBJECT_KINDS)}.", show_default=False
        ),
    ],
    reason: Annotated[str, typer.Option(help="Why, for the record.", show_default=False)],
    subject_id: Annotated[
        str | None,
        typer.Option(help="The start, schedule or run (not for tenant).", show_default=False),
    ] = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Keep a start, a schedule (with its occurrences and runs), a run or the whole tenant
    from retention until the hold is released."""
    with session(remote, as_json) as client:
        hold = client.place_hold(
            subject_kind=kind,
            subject_id=subject_id,
            reason=reason,
            idempotency_key=mutation_key(idempotency_key),
        )
    emit(hold, as_json, hold_block(hold))


@tenant_command(holds_app.command("list"))
def holds_list(
    remote: Remote,
    as_json: bool,
    active: Annotated[bool, typer.Option("--active", help="Only those not released.")] = False,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """The tenant's holds, newest first."""
    with session(remote, as_json) as client:
        page = client.list_holds(active=active, limit=limit, cursor=cursor, order=order_of(order))
    rows = [hold_row(h) for h in page.items]
    headers = ("ID", "PLACED", "SUBJECT", "ID OF SUBJECT", "BY", "RELEASED", "REASON")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no holds"))


def hold_row(hold: Hold) -> tuple[Any, ...]:
    by = "host" if hold.placed_by_host else hold.created_by
    return (
        hold.id,
        hold.created_at,
        hold.subject_kind,
        hold.subject_id,
        by,
        hold.released_at,
        hold.reason,
    )


@tenant_command(holds_app.command("release"))
def holds_release(
    remote: Remote,
    as_json: bool,
    hold_id: Annotated[str, typer.Argument(help="The hold's id.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Release a hold: what it kept is removed by a later sweep once old enough."""
    with session(remote, as_json) as client:
        hold = client.release_hold(hold_id, idempotency_key=mutation_key(idempotency_key))
    emit(hold, as_json, hold_block(hold))


@tenant_command(audit_app.command("list"))
def audit_list(
    remote: Remote,
    as_json: bool,
    subject_id: Annotated[
        str | None, typer.Option(help="Only changes to this id.", show_default=False)
    ] = None,
    actor: Annotated[
        str | None, typer.Option(help="Only changes by this member.", show_default=False)
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """Who changed what, newest first: one entry per decided change, never its body."""
    with session(remote, as_json) as client:
        page = client.list_audit_entries(
            subject_id=subject_id, actor=actor, limit=limit, cursor=cursor, order=order_of(order)
        )
    rows = [audit_entry_row(e) for e in page.items]
    headers = ("AT", "ACTOR", "ACTION", "STATUS", "SUBJECT", "REQUEST")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no audit entries"))


def audit_entry_row(entry: AuditEntry) -> tuple[Any, ...]:
    subject = f"{entry.subject_kind} {entry.subject_id}" if entry.subject_kind else None
    return (
        entry.at,
        entry.actor,
        entry.action,
        entry.status,
        subject,
        f"{entry.method} {entry.path}",
    )
