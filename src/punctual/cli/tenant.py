"""Tenant commands over HTTP (SPEC IF-3): ``starts``, ``runs``, ``health``, ``members`` and
``tokens issue|list|revoke``. ``schedules`` has its own module; the shared options, output
and exit codes are in ``punctual.cli.remote``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.remote import (
    EXIT_UNHEALTHY,
    CursorOpt,
    KeyOpt,
    LimitOpt,
    OrderOpt,
    Remote,
    VersionOpt,
    block,
    emit,
    last_error,
    mutation_key,
    order_of,
    pairs,
    parse_json,
    session,
    table,
    tenant_command,
)
from punctual.cli.schedules import schedule_id_of

if TYPE_CHECKING:
    from punctual.resources import Finding, Health, Run, Start

starts_app = typer.Typer(help="Scheduled starts (over HTTP).", no_args_is_help=True)
runs_app = typer.Typer(help="Runs (over HTTP).", no_args_is_help=True)
members_app = typer.Typer(help="Tenant members (over HTTP, admins).", no_args_is_help=True)
tokens_app = typer.Typer(
    help="Bearer tokens: issue, list, revoke over HTTP (admins); create on the host.",
    no_args_is_help=True,
)
health_app = typer.Typer(
    help="The tenant's health report (exit 1 when degraded), and acknowledging findings.",
    invoke_without_command=True,
)

StartIdArg = Annotated[str, typer.Argument(help="The start's id.", show_default=False)]
RunIdArg = Annotated[str, typer.Argument(help="The run's id.", show_default=False)]


# --------------------------------------------------------------------------- starts


START_COLUMNS = ("ID", "STATE", "START AT", "WORKFLOW", "REQUEST")


def start_row(start: Start) -> tuple[Any, ...]:
    return (start.id, start.state, start.start_at, start.workflow, start.business_request_id)


def start_block(start: Start) -> list[str]:
    dispatch = start.dispatch
    definition = f"{dispatch.definition_version} {dispatch.artifact}" if dispatch else None
    return block(
        f"start {start.id}",
        [
            ("state", start.state),
            ("version", start.version),
            ("workflow", start.workflow),
            ("start at", start.start_at),
            ("time zone", start.time_zone),
            ("business request", start.business_request_id),
            ("workload class", start.workload_class),
            ("attributes", start.attributes or None),
            ("attempts", start.attempts),
            ("next attempt", start.next_attempt_at),
            ("last error", last_error(start.last_error) if start.last_error else None),
            ("reason", start.reason),
            ("run", dispatch.run_id if dispatch else None),
            ("definition", definition),
            ("created by", start.created_by),
            ("created at", start.created_at),
        ],
    )


@tenant_command(starts_app.command("create"))
def starts_create(
    remote: Remote,
    as_json: bool,
    workflow: Annotated[str, typer.Option(help="Workflow name.", show_default=False)],
    start_at: Annotated[
        str, typer.Option(help="RFC 3339 instant with its UTC offset.", show_default=False)
    ],
    business_request_id: Annotated[
        str, typer.Option(help="Your id of the request this start serves.", show_default=False)
    ],
    input_json: Annotated[
        str, typer.Option("--input", help="The input as JSON, or @FILE to read it from.")
    ] = "{}",
    time_zone: Annotated[
        str | None, typer.Option(help="IANA zone start_at was meant in (kept for display).")
    ] = None,
    workload_class: Annotated[str, typer.Option(help="Host workload class.")] = "standard",
    attribute: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE, repeatable.", show_default=False)
    ] = None,
    traceparent: Annotated[str | None, typer.Option(help="W3C trace context.")] = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Schedule one run of a workflow at an instant."""
    payload = parse_json(input_json, "--input")
    attributes = pairs(attribute, "--attribute")
    with session(remote, as_json) as client:
        start = client.create_start(
            workflow=workflow,
            input=payload,
            business_request_id=business_request_id,
            start_at=start_at,
            workload_class=workload_class,
            time_zone=time_zone,
            attributes=attributes,
            traceparent=traceparent,
            idempotency_key=mutation_key(idempotency_key),
        )
    emit(start, as_json, start_block(start))


@tenant_command(starts_app.command("get"))
def starts_get(
    remote: Remote,
    as_json: bool,
    start_id: StartIdArg,
) -> None:
    """Show one scheduled start."""
    with session(remote, as_json) as client:
        start = client.get_start(start_id)
    emit(start, as_json, start_block(start))


@tenant_command(starts_app.command("list"))
def starts_list(
    remote: Remote,
    as_json: bool,
    state: Annotated[str | None, typer.Option(help="Only this state.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Only this workflow.")] = None,
    business_request_id: Annotated[str | None, typer.Option(help="Only this request.")] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """List the tenant's scheduled starts, a page at a time."""
    with session(remote, as_json) as client:
        page = client.list_starts(
            state=state,
            workflow=workflow,
            business_request_id=business_request_id,
            limit=limit,
            cursor=cursor,
            order=order_of(order),
        )
    rows = [start_row(s) for s in page.items]
    emit(page, as_json, table(START_COLUMNS, rows, page.next_cursor, "no starts"))


@tenant_command(starts_app.command("cancel"))
def starts_cancel(
    remote: Remote,
    as_json: bool,
    start_id: StartIdArg,
    version: VersionOpt = None,
    reason: Annotated[str | None, typer.Option(help="Why, for the record.")] = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Cancel a start that has not been dispatched."""
    with session(remote, as_json) as client:
        current = version if version is not None else client.get_start(start_id).version
        start = client.cancel_start(
            start_id,
            version=current,
            reason=reason,
            idempotency_key=mutation_key(idempotency_key, current),
        )
    emit(start, as_json, start_block(start))


@tenant_command(starts_app.command("reschedule"))
def starts_reschedule(
    remote: Remote,
    as_json: bool,
    start_id: StartIdArg,
    start_at: Annotated[
        str, typer.Option(help="The new RFC 3339 instant with its offset.", show_default=False)
    ],
    time_zone: Annotated[str | None, typer.Option(help="IANA zone, kept for display.")] = None,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Move a start that has not been dispatched to another instant."""
    with session(remote, as_json) as client:
        current = version if version is not None else client.get_start(start_id).version
        start = client.reschedule_start(
            start_id,
            version=current,
            start_at=start_at,
            time_zone=time_zone,
            idempotency_key=mutation_key(idempotency_key, current),
        )
    emit(start, as_json, start_block(start))


# --------------------------------------------------------------------------- runs


RUN_COLUMNS = ("ID", "STATE", "WORKFLOW", "VERSION", "ORIGIN", "CREATED", "ENDED", "ERROR")


def run_row(run: Run) -> tuple[Any, ...]:
    origin = f"{run.origin.source} {run.origin.id}"
    error = run.error.code if run.error else None
    return (
        run.id,
        run.state,
        run.workflow,
        run.definition_version,
        origin,
        run.created_at,
        run.ended_at,
        error,
    )


def run_block(run: Run) -> list[str]:
    origin = run.origin
    return block(
        f"run {run.id}",
        [
            ("state", run.state),
            ("workflow", f"{run.workflow} {run.definition_version} ({run.artifact})"),
            ("origin", f"{origin.source} {origin.id}"),
            ("schedule", origin.schedule_id),
            ("occurrence at", origin.occurrence_at),
            ("started by", run.started_by),
            ("attempts", run.attempts),
            ("cancel requested", run.cancel_requested or None),
            ("result", run.result),
            ("error", last_error(run.error) if run.error else None),
            ("traceparent", run.traceparent),
            ("created at", run.created_at),
            ("claimed at", run.claimed_at),
            ("started at", run.started_at),
            ("ended at", run.ended_at),
        ],
    )


@tenant_command(runs_app.command("get"))
def runs_get(
    remote: Remote,
    as_json: bool,
    run_id: RunIdArg,
) -> None:
    """Show one run: its state, result or error."""
    with session(remote, as_json) as client:
        run = client.get_run(run_id)
    emit(run, as_json, run_block(run))


@tenant_command(runs_app.command("list"))
def runs_list(
    remote: Remote,
    as_json: bool,
    workflow: Annotated[str | None, typer.Option(help="Only this workflow.")] = None,
    state: Annotated[str | None, typer.Option(help="Only this state.")] = None,
    schedule: Annotated[
        str | None,
        typer.Option(help="Only runs of this schedule (its id or name).", show_default=False),
    ] = None,
    origin: Annotated[
        str | None,
        typer.Option(
            help="Only runs of this start or occurrence (its id), or of this kind of origin: "
            "scheduled_start or schedule.",
            show_default=False,
        ),
    ] = None,
    origin_id: Annotated[
        str | None, typer.Option(help="Only runs of this start or occurrence.", hidden=True)
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """List the tenant's runs, newest first, a page at a time."""
    with session(remote, as_json) as client:
        schedule_id = schedule_id_of(client, schedule) if schedule is not None else None
        page = client.list_runs(
            workflow=workflow,
            state=state,
            schedule_id=schedule_id,
            origin=origin,
            origin_id=origin_id,
            limit=limit,
            cursor=cursor,
            order=order_of(order),
        )
    rows = [run_row(r) for r in page.items]
    emit(page, as_json, table(RUN_COLUMNS, rows, page.next_cursor, "no runs"))


@tenant_command(runs_app.command("cancel"))
def runs_cancel(
    remote: Remote,
    as_json: bool,
    run_id: RunIdArg,
    idempotency_key: KeyOpt = None,
) -> None:
    """Ask a run to stop (cooperative: the workflow sees the request)."""
    with session(remote, as_json) as client:
        run = client.cancel_run(run_id, idempotency_key=mutation_key(idempotency_key))
    emit(run, as_json, run_block(run))


@tenant_command(runs_app.command("terminate"))
def runs_terminate(
    remote: Remote,
    as_json: bool,
    run_id: RunIdArg,
    idempotency_key: KeyOpt = None,
) -> None:
    """Stop a run at once; it is recorded terminated."""
    with session(remote, as_json) as client:
        run = client.terminate_run(run_id, idempotency_key=mutation_key(idempotency_key))
    emit(run, as_json, run_block(run))


# --------------------------------------------------------------------------- health


def finding_line(finding: Finding) -> str:
    seen = f" (acknowledged by {finding.acknowledged_by})" if finding.acknowledged else ""
    return f"finding {finding.id} [{finding.kind}]{seen} {finding.message}"


def health_lines(report: Health) -> list[str]:
    lines = [
        f"status: {report.status}",
        f"open findings: {report.open_findings_count}",
        f"failed starts: {report.starts.failed_count}",
        f"stalled dispatches: {report.starts.stalled_count}",
        f"engine available: {'yes' if report.engine.available else 'no'} ({report.engine.name})",
        f"live workers: {len(report.workers)}",
        f"tzdata: {report.tzdata_version}",
        f"holidays: {report.holidays_version}",
    ]
    lines += [
        f"schedule {s.id} {s.name}: {s.failed_count} failed, {s.skipped_count} skipped, "
        f"{s.missed_count} missed"
        for s in report.schedules
        if s.failed_count or s.skipped_count or s.missed_count
    ]
    return lines + [finding_line(f) for f in report.findings]


@tenant_command(health_app.callback())
def health_report(
    remote: Remote,
    as_json: bool,
    ctx: typer.Context,
) -> None:
    """The tenant's health report; exits 1 when it is degraded."""
    if ctx.invoked_subcommand is not None:
        return
    with session(remote, as_json) as client:
        report = client.health()
    emit(report, as_json, health_lines(report))
    if report.status != "ok":
        raise typer.Exit(EXIT_UNHEALTHY)


@tenant_command(health_app.command("acknowledge"))
def health_acknowledge(
    remote: Remote,
    as_json: bool,
    finding_id: Annotated[str, typer.Argument(help="The finding's id.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Acknowledge a finding: it stays listed and no longer degrades the report."""
    with session(remote, as_json) as client:
        finding = client.acknowledge_finding(
            finding_id, idempotency_key=mutation_key(idempotency_key)
        )
    emit(finding, as_json, finding_line(finding))


# --------------------------------------------------------------------------- members


@tenant_command(members_app.command("add"))
def members_add(
    remote: Remote,
    as_json: bool,
    subject: Annotated[str, typer.Option(help="The member's name.", show_default=False)],
    role: Annotated[str, typer.Option(help="admin, member or viewer.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Add a member to the tenant, or change its role."""
    with session(remote, as_json) as client:
        member = client.add_member(
            subject=subject, role=role, idempotency_key=mutation_key(idempotency_key)
        )
    emit(member, as_json, f"{member.subject} is {member.role} of {member.tenant}")


@tenant_command(members_app.command("list"))
def members_list(
    remote: Remote,
    as_json: bool,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """The tenant's members and their roles, the latest to join first."""
    with session(remote, as_json) as client:
        page = client.list_members(limit=limit, cursor=cursor, order=order_of(order))
    rows = [(m.subject, m.role, m.created_at) for m in page.items]
    emit(page, as_json, table(("SUBJECT", "ROLE", "JOINED"), rows, page.next_cursor, "no members"))


@tenant_command(members_app.command("remove"))
def members_remove(
    remote: Remote,
    as_json: bool,
    subject: Annotated[str, typer.Argument(help="The member's name.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Remove a member: revokes its tokens and auto-disables the schedules it created."""
    with session(remote, as_json) as client:
        client.remove_member(subject, idempotency_key=mutation_key(idempotency_key))
    emit(None, as_json, f"{subject} removed from {remote.tenant}")


# --------------------------------------------------------------------------- tokens


@tenant_command(tokens_app.command("issue"))
def tokens_issue(
    remote: Remote,
    as_json: bool,
    subject: Annotated[str, typer.Option(help="A member of the tenant.", show_default=False)],
    expires_at: Annotated[
        str | None, typer.Option(help="RFC 3339 instant; default: never.", show_default=False)
    ] = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Issue a token for a member and print it (it is shown this once)."""
    with session(remote, as_json) as client:
        issued = client.create_token(
            subject=subject, expires_at=expires_at, idempotency_key=mutation_key(idempotency_key)
        )
    if issued.token is None and not as_json:
        typer.echo(
            f"token {issued.id} was issued by an earlier try of this request; its secret was "
            "shown only then",
            err=True,
        )
        return
    emit(issued, as_json, issued.token or "")


@tenant_command(tokens_app.command("list"))
def tokens_list(
    remote: Remote,
    as_json: bool,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """List the tenant's tokens (never their secrets)."""
    with session(remote, as_json) as client:
        page = client.list_tokens(limit=limit, cursor=cursor, order=order_of(order))
    rows = [
        (t.id, t.subject, "revoked" if t.revoked else "active", t.created_at, t.expires_at)
        for t in page.items
    ]
    headers = ("ID", "SUBJECT", "STATE", "CREATED", "EXPIRES")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no tokens"))


@tenant_command(tokens_app.command("revoke"))
def tokens_revoke(
    remote: Remote,
    as_json: bool,
    token_id: Annotated[str, typer.Argument(help="The token's id.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Revoke a token: it is refused from now on."""
    with session(remote, as_json) as client:
        client.revoke_token(token_id, idempotency_key=mutation_key(idempotency_key))
    emit(None, as_json, f"token {token_id} revoked")
