"""``punctual schedules`` over HTTP (SPEC IF-3, RS-9): create, read, pause, resume, delete,
occurrences, preview, trigger, backfill, and ``apply`` of a file of schedules
(``punctual.cli.apply``). The shared options, output and exit codes are in
``punctual.cli.remote``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli import apply
from punctual.cli.remote import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    CursorOpt,
    KeyOpt,
    LimitOpt,
    OrderOpt,
    Remote,
    VersionOpt,
    block,
    emit,
    emit_json,
    fail,
    last_error,
    mutation_key,
    order_of,
    parse_json,
    session,
    table,
    tenant_command,
    when,
)

if TYPE_CHECKING:
    from punctual.client import PunctualClient
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

ScheduleArg = Annotated[
    str, typer.Argument(metavar="SCHEDULE", help="The schedule's id or name.", show_default=False)
]
SCHEDULE_ID = re.compile(r"sch_[0-9a-f]{24}")


def schedule_id_of(client: PunctualClient, schedule: str) -> str:
    """The id of the schedule named by ``schedule``: its id as given, or the id of the
    schedule of that name (people name schedules; ids are for scripts)."""
    if SCHEDULE_ID.fullmatch(schedule):
        return schedule
    return client.get_schedule_by_name(schedule).id


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


def fire_row(fire: Fire) -> tuple[Any, ...]:
    notes: list[str] = [fire.dst_adjustment] if fire.dst_adjustment else []
    if fire.calendar_moved_from is not None:
        notes.append(f"moved from {when(fire.calendar_moved_from)}")
    return (fire.fire_at, fire.local, fire.nominal, "; ".join(notes) or None)


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


WorkloadClassOpt = Annotated[str | None, typer.Option(help="Host workload class.")]
MaxCatchUpOpt = Annotated[int | None, typer.Option(help="1-100 per pass.")]
CatchUpWindowOpt = Annotated[float | None, typer.Option(help="Seconds back that catch-up reaches.")]
MisfireGraceOpt = Annotated[int | None, typer.Option(help="Lateness still on time.")]
VersionPolicyOpt = Annotated[str | None, typer.Option(help="active_at_fire (default) or pinned.")]
RegressionOpt = Annotated[
    str | None, typer.Option(help="The regression policy as JSON (or @FILE).")
]
EndAtOpt = Annotated[
    str | None, typer.Option(help="No fire after this RFC 3339 instant.", show_default=False)
]
MaxOccurrencesOpt = Annotated[
    int | None, typer.Option(help="Stop after this many fires.", show_default=False)
]
JitterOpt = Annotated[
    int | None, typer.Option(help="Delay each fire by up to this much.", show_default=False)
]
StartDeadlineOpt = Annotated[
    int | None,
    typer.Option(help="Never start a fire's body this long after it was due (>= 1000)."),
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
    workload_class: WorkloadClassOpt = None,
    max_catch_up: MaxCatchUpOpt = None,
    catch_up_window: CatchUpWindowOpt = None,
    misfire_grace_ms: MisfireGraceOpt = None,
    version_policy: VersionPolicyOpt = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    regression: RegressionOpt = None,
    end_at: EndAtOpt = None,
    max_occurrences: MaxOccurrencesOpt = None,
    jitter_ms: JitterOpt = None,
    business_day: BusinessDayOpt = None,
    at: AtOpt = None,
    specs: SpecsOpt = None,
    calendar: CalendarOpt = None,
    start_deadline_ms: StartDeadlineOpt = None,
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


CLEARABLE = (
    "calendar",
    "catch_up_window",
    "regression",
    "end_at",
    "max_occurrences",
    "start_deadline_ms",
    "pause_until",
)
"""The fields ``--clear`` sends as ``null``: the ones whose absence means something (no
calendar, no end, no deadline...). The others take a value (``--jitter-ms 0``)."""


@tenant_command(schedules_app.command("update"))
def schedules_update(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    name: Annotated[str | None, typer.Option(help="A new name.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Another workflow.")] = None,
    input_json: Annotated[
        str | None, typer.Option("--input", help="New input as JSON, or @FILE.")
    ] = None,
    cron: CronOpt = None,
    time_zone: TimeZoneOpt = None,
    dst_gap: DstGapOpt = None,
    dst_overlap: DstOverlapOpt = None,
    interval_ms: IntervalOpt = None,
    starts_at: StartsAtOpt = None,
    business_day: BusinessDayOpt = None,
    at: AtOpt = None,
    specs: SpecsOpt = None,
    calendar: CalendarOpt = None,
    overlap: Annotated[str | None, typer.Option(help="skip, buffer_one or allow_all.")] = None,
    missed: Annotated[str | None, typer.Option(help="catch_up or skip.")] = None,
    max_catch_up: MaxCatchUpOpt = None,
    catch_up_window: CatchUpWindowOpt = None,
    misfire_grace_ms: MisfireGraceOpt = None,
    version_policy: VersionPolicyOpt = None,
    workload_class: WorkloadClassOpt = None,
    regression: RegressionOpt = None,
    end_at: EndAtOpt = None,
    max_occurrences: MaxOccurrencesOpt = None,
    jitter_ms: JitterOpt = None,
    start_deadline_ms: StartDeadlineOpt = None,
    blackouts: Annotated[
        str | None,
        typer.Option(help='Blackout windows as JSON (or @FILE): [{"from", "to", "reason"?}].'),
    ] = None,
    pause_until: Annotated[
        str | None, typer.Option(help="Pause until this instant, then resume by itself.")
    ] = None,
    clear: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Send FIELD as null, back to its default; repeatable: {', '.join(CLEARABLE)}.",
            show_default=False,
        ),
    ] = None,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Change the given fields of a schedule, by id or name; the others stay. A new spec
    replaces the old one whole (give its time zone again)."""
    changes: dict[str, Any] = {
        name_: value
        for name_, value in {
            "name": name,
            "workflow": workflow,
            "overlap": overlap,
            "missed": missed,
            "max_catch_up": max_catch_up,
            "catch_up_window": catch_up_window,
            "misfire_grace_ms": misfire_grace_ms,
            "version_policy": version_policy,
            "workload_class": workload_class,
            "end_at": end_at,
            "max_occurrences": max_occurrences,
            "jitter_ms": jitter_ms,
            "start_deadline_ms": start_deadline_ms,
            "pause_until": pause_until,
        }.items()
        if value is not None
    }
    if input_json is not None:
        changes["input"] = parse_json(input_json, "--input")
    if regression is not None:
        changes["regression"] = parse_json(regression, "--regression")
    if blackouts is not None:
        changes["blackouts"] = parse_json(blackouts, "--blackouts")
    if (cron is not None or business_day is not None) and time_zone is None:
        # The spec is replaced whole: without its zone it would quietly become UTC.
        fail(EXIT_INVALID, "a new --cron or --business-day needs its --time-zone")
    spec = spec_of(cron, time_zone, dst_gap, dst_overlap, interval_ms, starts_at, business_day, at)
    if spec is not None or specs is not None:
        changes.update(timing_of(spec, specs, None))
    elif any(v is not None for v in (time_zone, dst_gap, dst_overlap, starts_at, at)):
        fail(
            EXIT_INVALID,
            "a spec option needs its spec: give --cron, --interval-ms or --business-day",
        )
    if calendar is not None:
        changes["calendar"] = parse_json(calendar, "--calendar")
    for field in clear or []:
        if field not in CLEARABLE:
            fail(EXIT_INVALID, f"--clear takes one of {', '.join(CLEARABLE)}, not {field!r}")
        if field in changes:
            fail(EXIT_INVALID, f"--clear {field} and a new {field} contradict each other")
        changes[field] = None
    if not changes:
        fail(EXIT_INVALID, "nothing to change: give at least one field option or --clear")
    with session(remote, as_json) as client:
        schedule_id, current = version_of(client, schedule, version)
        updated = client.update_schedule(
            schedule_id,
            version=current,
            idempotency_key=mutation_key(idempotency_key, current),
            **changes,
        )
    emit(updated, as_json, schedule_block(updated))


@tenant_command(schedules_app.command("get"))
def schedules_get(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
) -> None:
    """Show one schedule with its next fire times."""
    with session(remote, as_json) as client:
        found = read_schedule(client, schedule)
    emit(found, as_json, schedule_block(found))


def read_schedule(client: PunctualClient, schedule: str) -> Schedule:
    """The schedule named by id or name, as it is now."""
    if SCHEDULE_ID.fullmatch(schedule):
        return client.get_schedule(schedule)
    return client.get_schedule_by_name(schedule)


def version_of(client: PunctualClient, schedule: str, given: int | None) -> tuple[str, int]:
    """The schedule's id and the version a mutation sends: the one given (it then fails
    with a conflict if the schedule changed since it was read), else the current one."""
    if given is not None:
        return schedule_id_of(client, schedule), given
    current = read_schedule(client, schedule)
    return current.id, current.version


SCHEDULE_COLUMNS = ("ID", "NAME", "STATE", "WORKFLOW", "NEXT FIRE", "LAST STATUS")


def schedule_row(schedule: Schedule) -> tuple[Any, ...]:
    upcoming = schedule.next_fire_times[0] if schedule.next_fire_times else None
    return (
        schedule.id,
        schedule.name,
        schedule.state,
        schedule.workflow,
        upcoming,
        schedule.last_status,
    )


@tenant_command(schedules_app.command("list"))
def schedules_list(
    remote: Remote,
    as_json: bool,
    source: Annotated[
        str | None, typer.Option(help="Only the schedules applied from this source.")
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """List the tenant's schedules with their next fire times."""
    with session(remote, as_json) as client:
        page = client.list_schedules(
            source=source, limit=limit, cursor=cursor, order=order_of(order)
        )
    rows = [schedule_row(s) for s in page.items]
    emit(page, as_json, table(SCHEDULE_COLUMNS, rows, page.next_cursor, "no schedules"))


def _toggle(
    schedule: str,
    enabled: bool,
    version: int | None,
    idempotency_key: str | None,
    as_json: bool,
    remote: Remote,
) -> None:
    with session(remote, as_json) as client:
        schedule_id, current = version_of(client, schedule, version)
        toggle = client.resume_schedule if enabled else client.pause_schedule
        changed = toggle(
            schedule_id, version=current, idempotency_key=mutation_key(idempotency_key, current)
        )
    emit(changed, as_json, f"{changed.name} is {changed.state} (version {changed.version})")


@tenant_command(schedules_app.command("pause"))
def schedules_pause(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Stop generating occurrences (queued ones still run); the cursor is kept."""
    _toggle(schedule, False, version, idempotency_key, as_json, remote)


@tenant_command(schedules_app.command("resume"))
def schedules_resume(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Generate again; what was missed while paused follows the schedule's missed policy."""
    _toggle(schedule, True, version, idempotency_key, as_json, remote)


@tenant_command(schedules_app.command("delete"))
def schedules_delete(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Delete a schedule: its unstarted occurrences are canceled, runs are left alone."""
    with session(remote, as_json) as client:
        schedule_id, current = version_of(client, schedule, version)
        client.delete_schedule(
            schedule_id, version=current, idempotency_key=mutation_key(idempotency_key, current)
        )
    emit(None, as_json, f"schedule {schedule} deleted")


@tenant_command(schedules_app.command("transfer"))
def schedules_transfer(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    to: Annotated[str, typer.Option(help="The member who becomes its creator.")],
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Make another member the schedule's creator (admins): its notifications go there."""
    with session(remote, as_json) as client:
        schedule_id, current = version_of(client, schedule, version)
        moved = client.transfer_schedule(
            schedule_id,
            version=current,
            to=to,
            idempotency_key=mutation_key(idempotency_key, current),
        )
    emit(moved, as_json, f"{moved.name} now belongs to {moved.created_by}")


OCCURRENCE_COLUMNS = ("ID", "AT", "STATE", "REASON", "ORIGIN", "RUN", "FOLLOW-THROUGH", "NOTE")


def occurrence_row(occurrence: Occurrence) -> tuple[Any, ...]:
    reason = occurrence.reason
    if reason and occurrence.reason_detail:
        reason = f"{reason}: {occurrence.reason_detail}"
    follow = occurrence.follow_through
    return (
        occurrence.id,
        occurrence.occurrence_at,
        occurrence.state,
        reason,
        occurrence.origin,
        occurrence.run_id,
        follow.status if follow else None,
        occurrence_note(occurrence) or None,
    )


def occurrence_note(occurrence: Occurrence) -> str:
    """What else there is to know about one occurrence: a missed stretch it stands for,
    a DST adjustment, a move off a closed day, the last error."""
    notes = []
    if occurrence.range:
        notes.append(f"{occurrence.range.count} missed up to {when(occurrence.range.last)}")
    if occurrence.dst_adjustment:
        notes.append(f"dst:{occurrence.dst_adjustment}")
    if occurrence.calendar_moved_from:
        notes.append(f"moved from {when(occurrence.calendar_moved_from)}")
    if occurrence.last_error:
        notes.append(f"error {last_error(occurrence.last_error)}")
    return "; ".join(notes)


@tenant_command(schedules_app.command("occurrences"))
def schedules_occurrences(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    state: Annotated[str | None, typer.Option(help="Only this state.")] = None,
    origin: Annotated[
        str | None, typer.Option(help="Only schedule, trigger or backfill.", show_default=False)
    ] = None,
    after: Annotated[
        str | None,
        typer.Option("--from", help="Only instants from this one, included.", show_default=False),
    ] = None,
    to: Annotated[
        str | None, typer.Option(help="Only instants before this one.", show_default=False)
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """A schedule's occurrences and skipped ranges, newest first."""
    with session(remote, as_json) as client:
        page = client.list_occurrences(
            schedule_id_of(client, schedule),
            state=state,
            origin=origin,
            after=after,
            to=to,
            limit=limit,
            cursor=cursor,
            order=order_of(order),
        )
    rows = [occurrence_row(o) for o in page.items]
    emit(page, as_json, table(OCCURRENCE_COLUMNS, rows, page.next_cursor, "no occurrences"))


@tenant_command(schedules_app.command("cancel-occurrence"))
def schedules_cancel_occurrence(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    occurrence_id: Annotated[str, typer.Argument(help="The occurrence's id.", show_default=False)],
    version: VersionOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Cancel one occurrence that has not started; the schedule goes on."""
    with session(remote, as_json) as client:
        schedule_id = schedule_id_of(client, schedule)
        current = version
        if current is None:
            current = _occurrence_version(client, schedule_id, occurrence_id)
        occurrence = client.cancel_occurrence(
            schedule_id,
            occurrence_id,
            version=current,
            idempotency_key=mutation_key(idempotency_key, current),
        )
    emit(occurrence, as_json, occurrence_line(occurrence))


OCCURRENCES_LOOKED_AT = 1_000
"""How far back ``cancel-occurrence`` looks for an occurrence's version (newest first)."""


def _occurrence_version(client: PunctualClient, schedule_id: str, occurrence_id: str) -> int:
    """The occurrence's current version, from the schedule's occurrences newest first (a
    cancel is for one that has not started: a recent one). Whatever its state, the server
    then decides: a dispatched one is a conflict that names its run."""
    from punctual.client import iterate

    listed = functools.partial(client.list_occurrences, schedule_id)
    for looked, occurrence in enumerate(iterate(listed, limit=100)):
        if occurrence.id == occurrence_id:
            version: int = occurrence.version
            return version
        if looked + 1 >= OCCURRENCES_LOOKED_AT:
            break
    fail(
        EXIT_NOT_FOUND,
        f"no occurrence {occurrence_id} among the schedule's newest {OCCURRENCES_LOOKED_AT}; "
        "pass --version to cancel an older one",
    )


@tenant_command(schedules_app.command("audit"))
def schedules_audit(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    after: Annotated[
        str, typer.Option("--from", help="From this instant, included.", show_default=False)
    ],
    to: Annotated[str, typer.Option(help="To this instant, excluded.", show_default=False)],
) -> None:
    """Every instant the schedule's specs yielded in [from, to) and what became of it:
    fired, skipped (why), not generated (why, with the pause), or missing (a defect)."""
    with session(remote, as_json) as client:
        answer = client.audit_schedule(schedule_id_of(client, schedule), after=after, to=to)
    lines = table(
        ("INSTANT", "SPECS", "OUTCOME", "REASON", "RUN", "RUN STATE"),
        [audit_row(item) for item in answer.items],
        None,
        "no instants in the range",
    )
    lines += [f"paused {when(p.start)} - {when(p.end)} by {p.by}" for p in answer.paused]
    emit(answer, as_json, lines)


def audit_row(item: AuditItem) -> tuple[Any, ...]:
    specs = ",".join(str(i) for i in item.spec_indexes) or None
    return (item.instant, specs, item.outcome, item.reason, item.run_id, item.run_state)


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
    lines = table(
        ("FIRE AT", "LOCAL", "NOMINAL", "NOTE"),
        [fire_row(f) for f in preview.items],
        None,
        "no fire times",
    )
    lines += [f"skipped {when(s.at)}  {s.reason}: {s.detail or '-'}" for s in preview.skipped]
    emit(preview, as_json, lines)


OverlapOpt = Annotated[
    str | None,
    typer.Option(help="skip, buffer_one or allow_all (default: the schedule's own policy)."),
]


@tenant_command(schedules_app.command("trigger"))
def schedules_trigger(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
    overlap: OverlapOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Fire once now (also while paused or ended); the schedule's version stays."""
    with session(remote, as_json) as client:
        occurrence = client.trigger_schedule(
            schedule_id_of(client, schedule),
            overlap=overlap,
            idempotency_key=mutation_key(idempotency_key),
        )
    emit(occurrence, as_json, occurrence_line(occurrence))


@tenant_command(schedules_app.command("backfill"))
def schedules_backfill(
    remote: Remote,
    as_json: bool,
    schedule: ScheduleArg,
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
            schedule_id_of(client, schedule),
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
