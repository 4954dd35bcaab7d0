"""``punctual schedules`` over HTTP (SPEC IF-3, RS-9): create, read, pause, resume, delete,
occurrences, preview, trigger, backfill, and ``apply`` of a file of schedules
(``punctual.cli.apply``). The shared options, output and exit codes are in
``punctual.cli.remote``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli import apply
from punctual.cli.remote import (
    EXIT_INVALID,
    CursorOpt,
    KeyOpt,
    LimitOpt,
    Remote,
    VersionOpt,
    block,
    emit,
    emit_json,
    fail,
    last_error,
    mutation_key,
    parse_json,
    session,
    table,
    tenant_command,
    when,
)

if TYPE_CHECKING:
    from punctual.resources import (
        AuditItem,
        BusinessDaySpec,
        CronSpec,
        Fire,
        IntervalSpec,
        Occurrence,
        Schedule,
    )

schedules_app = typer.Typer(help="Recurring schedules (over HTTP).", no_args_is_help=True)

ScheduleIdArg = Annotated[str, typer.Argument(help="The schedule's id.", show_default=False)]


def spec_text(schedule: Schedule) -> str:
    """Each spec in words, numbered when there are several."""
    specs = schedule.specs or [schedule.spec]
    if len(specs) == 1:
        return _one_spec_text(specs[0])
    return "; ".join(f"[{index}] {_one_spec_text(spec)}" for index, spec in enumerate(specs))


def _one_spec_text(spec: CronSpec | IntervalSpec | BusinessDaySpec) -> str:
    from punctual.resources import BusinessDaySpec, CronSpec

    if isinstance(spec, CronSpec):
        return f"cron {spec.cron!r} in {spec.time_zone}"
    if isinstance(spec, BusinessDaySpec):
        n = spec.business_day
        nth = "last" if n == -1 else f"{n}th" if n > 0 else f"{-n}th from last"
        return f"the {nth} business day at {spec.at} in {spec.time_zone}"
    starts = f" from {when(spec.starts_at)}" if spec.starts_at else ""
    return f"every {spec.interval_ms} ms{starts}"


def calendar_text(schedule: Schedule) -> str | None:
    """Regions, weekend, extra dates and what a closed day does; None without one."""
    calendar = schedule.calendar
    if calendar is None:
        return None
    regions = [
        r.country + (f"-{r.subdivision}" if r.subdivision else "") for r in calendar.holidays
    ]
    parts = [
        f"holidays of {', '.join(regions)}" if regions else "no holidays",
        f"weekend {', '.join(calendar.weekend) or 'none'}",
    ]
    if calendar.extra_holidays:
        parts.append(f"also closed {', '.join(calendar.extra_holidays)}")
    if calendar.extra_workdays:
        parts.append(f"also open {', '.join(calendar.extra_workdays)}")
    parts.append(f"closed days: {calendar.on_closed_day.replace('_', ' ')}")
    return "; ".join(parts)


def schedule_line(schedule: Schedule) -> str:
    upcoming = schedule.next_fire_times[0] if schedule.next_fire_times else None
    return (
        f"{schedule.id}  {schedule.state:<7} {schedule.name:<24} next: {when(upcoming)}  "
        f"last: {schedule.last_status or '-'}"
    )


def schedule_block(schedule: Schedule) -> list[str]:
    return block(
        f"schedule {schedule.id} {schedule.name}",
        [
            ("state", schedule.state),
            ("version", schedule.version),
            ("revision", schedule.revision),
            ("workflow", schedule.workflow),
            ("spec", spec_text(schedule)),
            ("calendar", calendar_text(schedule)),
            ("overlap", schedule.overlap),
            ("missed", schedule.missed),
            ("max catch-up", schedule.max_catch_up),
            ("workload class", schedule.workload_class),
            ("end at", schedule.end_at),
            ("remaining", schedule.remaining_occurrences),
            ("jitter ms", schedule.jitter_ms or None),
            ("start deadline ms", schedule.start_deadline_ms),
            ("blackouts", blackouts_text(schedule)),
            ("paused until", schedule.paused_until),
            ("source", schedule.source),
            ("created by", schedule.created_by),
            ("last fired", schedule.last_fired_at),
            ("last status", schedule.last_status),
            ("next fire times", ", ".join(when(t) for t in schedule.next_fire_times) or "-"),
            ("temporal sync", sync_text(schedule)),
        ],
    )


def blackouts_text(schedule: Schedule) -> str | None:
    """Each window as ``from - to (reason)``; None without any."""
    shown = [
        f"{when(b.start)} - {when(b.end)}" + (f" ({b.reason})" if b.reason else "")
        for b in schedule.blackouts
    ]
    return "; ".join(shown) or None


def sync_text(schedule: Schedule) -> str | None:
    """Under the Temporal Schedules driver: how its Temporal copy stands, and since when."""
    sync = schedule.sync
    return None if sync is None else f"{sync.state} (checked {when(sync.checked_at)})"


def occurrence_line(occurrence: Occurrence) -> str:
    why = f" ({occurrence.reason})" if occurrence.reason else ""
    if occurrence.reason_detail:
        why = f" ({occurrence.reason}: {occurrence.reason_detail})"
    missed = occurrence.range
    span = f" {missed.count} missed up to {when(missed.last)}" if missed else ""
    adjusted = f" dst:{occurrence.dst_adjustment}" if occurrence.dst_adjustment else ""
    if occurrence.calendar_moved_from:
        adjusted += f" moved from {when(occurrence.calendar_moved_from)}"
    run = f" run {occurrence.run_id}" if occurrence.run_id else ""
    follow = occurrence.follow_through
    outcome = f" follow-through: {follow.status}" if follow else ""
    error = f" error {last_error(occurrence.last_error)}" if occurrence.last_error else ""
    return (
        f"{occurrence.id}  {when(occurrence.occurrence_at)}  {occurrence.state}{why}"
        f" [{occurrence.origin}]{span}{adjusted}{run}{outcome}{error}"
    )


def fire_line(fire: Fire) -> str:
    adjusted = f"  {fire.dst_adjustment}" if fire.dst_adjustment else ""
    if fire.calendar_moved_from is not None:
        adjusted += f"  moved from {when(fire.calendar_moved_from)}"
    return f"{when(fire.fire_at)}  {fire.local}  (nominal {fire.nominal}){adjusted}"


def spec_of(
    cron: str | None,
    time_zone: str | None,
    dst_gap: str | None,
    dst_overlap: str | None,
    interval_ms: int | None,
    starts_at: str | None,
    business_day: int | None = None,
    at: str | None = None,
) -> dict[str, Any] | None:
    """The ``spec`` of a create body from its options (at most one of cron, interval and
    business day); None when none is given (``--specs`` may say it)."""
    given = 3 - [cron, interval_ms, business_day].count(None)
    if given != 1:
        if given == 0:
            return None
        fail(EXIT_INVALID, "give exactly one of --cron, --interval-ms or --business-day")
    fields: dict[str, Any]
    if cron is not None or business_day is not None:
        when = {"cron": cron} if cron is not None else {"business_day": business_day, "at": at}
        fields = {**when, "time_zone": time_zone or "UTC"}
        optional = {"dst_gap": dst_gap, "dst_overlap": dst_overlap}
    else:
        fields = {"interval_ms": interval_ms}
        optional = {"starts_at": starts_at}
    return {**fields, **{name: value for name, value in optional.items() if value is not None}}


def timing_of(
    spec: dict[str, Any] | None, specs: str | None, calendar: str | None
) -> dict[str, Any]:
    """``spec`` or ``specs`` (JSON or @FILE), and ``calendar`` (JSON or @FILE), as a body
    or a preview takes them."""
    if not spec and not specs:
        fail(EXIT_INVALID, "give exactly one of --cron, --interval-ms, --business-day or --specs")
    fields: dict[str, Any] = {"specs": parse_json(specs, "--specs")} if specs else {"spec": spec}
    if calendar is not None:
        fields["calendar"] = parse_json(calendar, "--calendar")
    return fields


BusinessDayOpt = Annotated[
    int | None,
    typer.Option(
        help="The N-th business day of each month (1-23; -1 is the last); needs --calendar.",
        rich_help_panel="Spec",
    ),
]
AtOpt = Annotated[
    str | None,
    typer.Option(help="A business day's local time, HH:MM.", rich_help_panel="Spec"),
]
SpecsOpt = Annotated[
    str | None,
    typer.Option(
        help="Several specs as a JSON list (or @FILE), instead of one.", rich_help_panel="Spec"
    ),
]
CalendarOpt = Annotated[
    str | None,
    typer.Option(
        help='Business calendar as JSON (or @FILE): {"holidays": [{"country": "DE", '
        '"subdivision": "BY"}], "on_closed_day": "skip"}.',
        rich_help_panel="Spec",
    ),
]


CronOpt = Annotated[
    str | None, typer.Option(help="Five-field cron expression.", rich_help_panel="Spec")
]
TimeZoneOpt = Annotated[
    str | None,
    typer.Option(help="IANA zone of the cron expression (default UTC).", rich_help_panel="Spec"),
]
DstGapOpt = Annotated[
    str | None, typer.Option(help="shift_to_gap_end (default) or skip.", rich_help_panel="Spec")
]
DstOverlapOpt = Annotated[
    str | None, typer.Option(help="first (default), last or both.", rich_help_panel="Spec")
]
IntervalOpt = Annotated[
    int | None, typer.Option(help="Interval in milliseconds.", rich_help_panel="Spec")
]
StartsAtOpt = Annotated[
    str | None, typer.Option(help="First fire of an interval (RFC 3339).", rich_help_panel="Spec")
]


@tenant_command(schedules_app.command("create"))
def schedules_create(
    remote: Remote,
    as_json: bool,
    name: Annotated[str, typer.Option(help="Unique among the tenant's schedules.")],
    workflow: Annotated[str, typer.Option(help="Workflow name.")],
    overlap: Annotated[str, typer.Option(help="skip, buffer_one or allow_all (required).")],
    missed: Annotated[str, typer.Option(help="catch_up or skip (required).")],
    input_json: Annotated[
        str, typer.Option("--input", help="The input as JSON, or @FILE to read it from.")
    ] = "{}",
    cron: CronOpt = None,
    time_zone: TimeZoneOpt = None,
    dst_gap: DstGapOpt = None,
    dst_overlap: DstOverlapOpt = None,
    interval_ms: IntervalOpt = None,
    starts_at: StartsAtOpt = None,
    workload_class: Annotated[str | None, typer.Option(help="Host workload class.")] = None,
    max_catch_up: Annotated[int | None, typer.Option(help="1-100 per pass.")] = None,
    catch_up_window: Annotated[
        float | None, typer.Option(help="Seconds back that catch-up reaches.")
    ] = None,
    misfire_grace_ms: Annotated[int | None, typer.Option(help="Lateness still on time.")] = None,
    version_policy: Annotated[
        str | None, typer.Option(help="active_at_fire (default) or pinned.")
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    regression: Annotated[
        str | None, typer.Option(help="The regression policy as JSON (or @FILE).")
    ] = None,
    end_at: Annotated[
        str | None, typer.Option(help="No fire after this RFC 3339 instant.", show_default=False)
    ] = None,
    max_occurrences: Annotated[
        int | None, typer.Option(help="Stop after this many fires.", show_default=False)
    ] = None,
    jitter_ms: Annotated[
        int | None, typer.Option(help="Delay each fire by up to this much.", show_default=False)
    ] = None,
    business_day: BusinessDayOpt = None,
    at: AtOpt = None,
    specs: SpecsOpt = None,
    calendar: CalendarOpt = None,
    start_deadline_ms: Annotated[
        int | None,
        typer.Option(help="Never start a fire's body this long after it was due (>= 1000)."),
    ] = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Create a recurring schedule (cron in a time zone, an interval, a business day, or
    several specs, with an optional business calendar); you are its creator."""
    spec = spec_of(cron, time_zone, dst_gap, dst_overlap, interval_ms, starts_at, business_day, at)
    timing = timing_of(spec, specs, calendar)
    if start_deadline_ms is not None:
        timing["start_deadline_ms"] = start_deadline_ms
    payload = parse_json(input_json, "--input")
    policy = parse_json(regression, "--regression") if regression is not None else None
    with session(remote, as_json) as client:
        schedule = client.create_schedule(
            name=name,
            workflow=workflow,
            input=payload,
            overlap=overlap,
            missed=missed,
            max_catch_up=max_catch_up,
            catch_up_window=catch_up_window,
            misfire_grace_ms=misfire_grace_ms,
            enabled=False if paused else None,
            version_policy=version_policy,
            workload_class=workload_class,
            regression=policy,
            end_at=end_at,
            max_occurrences=max_occurrences,
            jitter_ms=jitter_ms,
            idempotency_key=mutation_key(idempotency_key),
            **timing,
        )
    emit(schedule, as_json, schedule_block(schedule))


@tenant_command(schedules_app.command("get"))
def schedules_get(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
) -> None:
    """Show one schedule with its next fire times."""
    with session(remote, as_json) as client:
        schedule = client.get_schedule(schedule_id)
    emit(schedule, as_json, schedule_block(schedule))


@tenant_command(schedules_app.command("list"))
def schedules_list(
    remote: Remote,
    as_json: bool,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
) -> None:
    """List the tenant's schedules with their next fire times."""
    with session(remote, as_json) as client:
        page = client.list_schedules(limit=limit, cursor=cursor)
    lines = [schedule_line(s) for s in page.items]
    emit(page, as_json, table(lines, page.next_cursor, "no schedules"))


def _toggle(
    schedule_id: str,
    enabled: bool,
    version: int | None,
    idempotency_key: str | None,
    as_json: bool,
    remote: Remote,
) -> None:
    with session(remote, as_json) as client:
        current = version if version is not None else client.get_schedule(schedule_id).version
        toggle = client.resume_schedule if enabled else client.pause_schedule
        schedule = toggle(
            schedule_id, version=current, idempotency_key=mutation_key(idempotency_key, current)
        )
    emit(schedule, as_json, f"{schedule.name} is {schedule.state} (version {schedule.version})")


@tenant_command(schedules_app.command("pause"))
def schedules_pause(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Stop generating occurrences (queued ones still run); the cursor is kept."""
    _toggle(schedule_id, False, version, idempotency_key, as_json, remote)


@tenant_command(schedules_app.command("resume"))
def schedules_resume(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Generate again; what was missed while paused follows the schedule's missed policy."""
    _toggle(schedule_id, True, version, idempotency_key, as_json, remote)


@tenant_command(schedules_app.command("delete"))
def schedules_delete(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Delete a schedule: its unstarted occurrences are canceled, runs are left alone."""
    with session(remote, as_json) as client:
        current = version if version is not None else client.get_schedule(schedule_id).version
        client.delete_schedule(
            schedule_id, version=current, idempotency_key=mutation_key(idempotency_key, current)
        )
    emit(None, as_json, f"schedule {schedule_id} deleted")


@tenant_command(schedules_app.command("occurrences"))
def schedules_occurrences(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    state: Annotated[str | None, typer.Option(help="Only this state.")] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
) -> None:
    """A schedule's occurrences and skipped ranges, in generation order."""
    with session(remote, as_json) as client:
        page = client.list_occurrences(schedule_id, state=state, limit=limit, cursor=cursor)
    lines = [occurrence_line(o) for o in page.items]
    emit(page, as_json, table(lines, page.next_cursor, "no occurrences"))


@tenant_command(schedules_app.command("audit"))
def schedules_audit(
    remote: Remote,
    as_json: bool,
    schedule: Annotated[str, typer.Argument(help="The schedule's id or name.", show_default=False)],
    after: Annotated[
        str, typer.Option("--from", help="From this instant, included.", show_default=False)
    ],
    to: Annotated[str, typer.Option(help="To this instant, excluded.", show_default=False)],
) -> None:
    """Every instant the schedule's specs yielded in [from, to) and what became of it:
    fired, skipped (why), not generated (why, with the pause), or missing (a defect)."""
    with session(remote, as_json) as client:
        schedule_id = schedule
        if not re.fullmatch(r"sch_[0-9a-f]{24}", schedule):
            schedule_id = client.get_schedule_by_name(schedule).id
        answer = client.audit_schedule(schedule_id, after=after, to=to)
    lines = [audit_line(item) for item in answer.items]
    lines += [f"paused {when(p.start)} - {when(p.end)} by {p.by}" for p in answer.paused]
    emit(answer, as_json, table(lines, None, "no instants in the range"))


def audit_line(item: AuditItem) -> str:
    why = f" ({item.reason})" if item.reason else ""
    run = f" run {item.run_id} {item.run_state or ''}".rstrip() if item.run_id else ""
    specs = ",".join(str(i) for i in item.spec_indexes)
    return f"{when(item.instant)}  [{specs}]  {item.outcome}{why}{run}"


@tenant_command(schedules_app.command("preview"))
def schedules_preview(
    remote: Remote,
    as_json: bool,
    cron: CronOpt = None,
    time_zone: TimeZoneOpt = None,
    dst_gap: DstGapOpt = None,
    dst_overlap: DstOverlapOpt = None,
    interval_ms: IntervalOpt = None,
    starts_at: StartsAtOpt = None,
    after: Annotated[
        str | None,
        typer.Option("--from", help="Fire times strictly after this instant (default now)."),
    ] = None,
    count: Annotated[int | None, typer.Option(help="How many, 1-100 (default 10).")] = None,
    business_day: BusinessDayOpt = None,
    at: AtOpt = None,
    specs: SpecsOpt = None,
    calendar: CalendarOpt = None,
) -> None:
    """The fire times a spec (or several, with a calendar) gives, with DST adjustments and
    the closed days skipped or moved, before creating it."""
    spec = spec_of(cron, time_zone, dst_gap, dst_overlap, interval_ms, starts_at, business_day, at)
    timing = timing_of(spec, specs, calendar)
    one = timing.pop("spec", None) or {}
    with session(remote, as_json) as client:
        preview = client.preview_schedule(**one, **timing, after=after, count=count)
    lines = [fire_line(f) for f in preview.items]
    lines += [f"skipped {when(s.at)}  {s.reason}: {s.detail or '-'}" for s in preview.skipped]
    emit(preview, as_json, table(lines, None, "no fire times"))


OverlapOpt = Annotated[
    str | None,
    typer.Option(help="skip, buffer_one or allow_all (default: the schedule's own policy)."),
]


@tenant_command(schedules_app.command("trigger"))
def schedules_trigger(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    overlap: OverlapOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Fire once now (also while paused or ended); the schedule's version stays."""
    with session(remote, as_json) as client:
        occurrence = client.trigger_schedule(
            schedule_id, overlap=overlap, idempotency_key=mutation_key(idempotency_key)
        )
    emit(occurrence, as_json, occurrence_line(occurrence))


@tenant_command(schedules_app.command("backfill"))
def schedules_backfill(
    remote: Remote,
    as_json: bool,
    schedule_id: ScheduleIdArg,
    after: Annotated[
        str,
        typer.Option("--from", help="Fire times strictly after this instant.", show_default=False),
    ],
    to: Annotated[str, typer.Option(help="...up to this instant, included.", show_default=False)],
    overlap: OverlapOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Generate the fire times of (from, to] that have no live or finished occurrence."""
    with session(remote, as_json) as client:
        result = client.backfill_schedule(
            schedule_id,
            after=after,
            to=to,
            overlap=overlap,
            idempotency_key=mutation_key(idempotency_key),
        )
    lines = [f"{result.generated} generated, {result.existing} existing"]
    emit(result, as_json, lines + [occurrence_line(o) for o in result.items])


@tenant_command(schedules_app.command("apply"))
def schedules_apply(
    remote: Remote,
    path: Annotated[
        Path, typer.Argument(metavar="FILE", help="A TOML file of schedules.", show_default=False)
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan only.")] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune", help="Delete schedules of the same source that the file no longer names."
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the deletes of --prune.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Make the tenant's schedules match a file: create, update, leave alone, and with
    --prune --yes delete. Applying the same file twice changes nothing the second time."""
    schedule_file = apply.read_file(path)
    with session(remote, as_json) as client:
        steps = apply.plan(client, schedule_file, prune)
        confirmed = dry_run or not prune or yes
        if not as_json:
            typer.echo(f"plan for source {schedule_file.source!r}: {apply.summary(steps)}")
            typer.echo("\n".join(step.line() for step in steps) or "  (no schedules)")
        if dry_run and not as_json:
            typer.echo("dry run: nothing applied")
        if not dry_run and confirmed:
            for step in apply.apply(client, schedule_file, steps):
                if not as_json:
                    typer.echo(f"applied {step.action} {step.name}")
    if as_json:
        emit_json(
            {
                "source": schedule_file.source,
                "dry_run": dry_run,
                "items": [step.view() for step in steps],
            }
        )
    if not confirmed:
        fail(EXIT_INVALID, "nothing applied: --prune deletes schedules; add --yes to apply")
