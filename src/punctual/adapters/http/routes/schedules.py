"""Recurring schedules, their occurrences, and the preview (API.md, "Schedules")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import JSONResponse, Response

from punctual.adapters.http.edge import load_json, parse_limit, parse_object, parse_whole_number
from punctual.adapters.http.openapi import (
    ADMIN,
    IDEMPOTENCY_DOC,
    LIST,
    MUTATION,
    READ,
    VERSIONED,
    answering,
    answers,
    mutating,
    mutation_doc,
)
from punctual.adapters.http.routes.common import (
    INSTANT,
    CallDep,
    MutationDep,
    PageCursor,
    PageDep,
    PageLimit,
    PageOrder,
    StartStateFilter,
    choice_query,
    documented_query,
    tenant_router,
    whole_number,
)
from punctual.adapters.http.schemas import (
    BackfillBody,
    CreateScheduleBody,
    PatchScheduleBody,
    PutScheduleBody,
    TransferBody,
    TriggerBody,
    VersionBody,
)
from punctual.domain.permissions import Principal
from punctual.domain.schedules import OccurrenceOrigin
from punctual.domain.timeutil import parse_rfc3339
from punctual.errors import InvalidRequest
from punctual.resources import (
    BackfillResult,
    Occurrence,
    OccurrencePage,
    Schedule,
    ScheduleAudit,
    SchedulePage,
    SchedulePreview,
    ScheduleUpsert,
    UpsertPlan,
)
from punctual.usecases.kernel import mutations
from punctual.usecases.kernel.idempotency import Mutation
from punctual.usecases.recurring import missed_runs, schedule_controls, schedules, transfer
from punctual.usecases.recurring.schedule_fields import MAX_SPAN_MS, decode_update

router = tenant_router("schedules")

_SPEC_REFUSALS = (
    "validation_error",
    "invalid_cron",
    "unknown_time_zone",
    "interval_too_short",
    "invalid_schedule_spec",
    "unknown_holiday_region",
    "calendar_never_open",
)
# What a create or a content edit answers besides the spec's own refusals.
_CONTENT_REFUSALS = (
    "forbidden",
    "workload_class_not_allowed",
    "name_taken",
    "input_too_large",
    "policy_required",
    "unknown_workflow",
    "workflow_inactive",
    "input_invalid",
)
# The end, count and jitter of a create or an edit (RS-9c, RS-9d).
_BOUND_REFUSALS = ("end_at_in_past", "jitter_too_large")
_ENDED = ("invalid_state",)
_ROLE_AND_VERSION = (ADMIN, VERSIONED)


@router.post(
    "/schedules",
    **mutating(
        201,
        Schedule,
        _SPEC_REFUSALS,
        _CONTENT_REFUSALS,
        _BOUND_REFUSALS,
        ("host_owned_field", "quota_exceeded"),
        answer="The created schedule",
        body=CreateScheduleBody,
    ),
    description="A recurring schedule: `overlap` and `missed` are required choices. "
    + IDEMPOTENCY_DOC,
)
def create_schedule(tenant: str, call: MutationDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = call.body(CreateScheduleBody, host_owned_check=True)
        return schedules.create(call.services, principal, body.command())

    return call.mutate(tenant, decide)


# Before the routes of one schedule by id: a schedule named "x/occurrences" is a name.
@router.get(
    "/schedules/by-name/{name:path}",
    **answering(200, Schedule, READ),
    description="The live schedule with this name. Names may contain `/`: the rest of the "
    "path is the name, percent-encoded.",
)
def get_schedule_by_name(tenant: str, name: str, call: CallDep) -> dict[str, Any]:
    return schedule_controls.get_by_name(call.services, call.principal(tenant), name)


@router.put(
    "/schedules/by-name/{name:path}",
    status_code=201,
    response_model=None,
    responses={
        **answers(
            200,
            ScheduleUpsert | UpsertPlan,
            MUTATION,
            ADMIN,
            VERSIONED,
            _SPEC_REFUSALS,
            _CONTENT_REFUSALS,
            _BOUND_REFUSALS,
            _ENDED,
            ("host_owned_field", "quota_exceeded"),
            mutation=True,
            description="Updated (`changed: true`, a new version and revision) or unchanged "
            "(`changed: false`); with `?dry_run=true` the plan, `{action, changed_fields}`",
        ),
        201: {"model": ScheduleUpsert, "description": "Created (`changed: true`)"},
    },
    openapi_extra=mutation_doc(PutScheduleBody),
    description="Schedules as code (RS-9e): create the schedule with this name, change the "
    "fields that differ (a content edit: creator or admin), or change nothing. An omitted "
    "`enabled` keeps the schedule's own, so an apply never re-enables a paused or "
    "auto-disabled schedule; other omitted fields take their create defaults. "
    "`?dry_run=true` stores nothing and needs no `Idempotency-Key`. " + IDEMPOTENCY_DOC,
)
def put_schedule_by_name(
    tenant: str,
    name: str,
    call: MutationDep,
    dry_run: Annotated[
        str | None,
        choice_query(["true", "false"], "`true`: answer the plan and store nothing."),
    ] = None,
) -> Response:
    if _flag(dry_run, "dry_run"):
        principal = call.principal(tenant)
        body = call.body(PutScheduleBody, host_owned_check=True)
        plan = schedule_controls.plan_by_name(call.services, principal, body.command(name))
        return JSONResponse(plan)

    def decide(principal: Principal) -> Mutation:
        command = call.body(PutScheduleBody, host_owned_check=True).command(name)
        return schedule_controls.upsert_by_name(call.services, principal, command)

    return call.mutate(tenant, decide)


def _flag(value: str | None, name: str) -> bool:
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise InvalidRequest(
        f"{name} must be true or false",
        errors=[{"loc": ["query", name], "msg": "true or false", "type": "bool_parsing"}],
    )


@router.get("/schedules/{schedule_id}", **answering(200, Schedule, READ))
def get_schedule(tenant: str, schedule_id: str, call: CallDep) -> dict[str, Any]:
    return schedules.get(call.services, call.principal(tenant), schedule_id)


@router.get(
    "/schedules",
    **answering(200, SchedulePage, LIST),
    description="The live schedules, newest first unless `order=oldest`; `source` keeps "
    "those last applied from that file of schedules (what `punctual schedules apply "
    "--prune` considers).",
)
def list_schedules(
    tenant: str,
    call: CallDep,
    # Not PageDep, whose parameters would come after `source` in the document.
    limit: PageLimit = None,
    cursor: PageCursor = None,
    source: Annotated[str | None, Query(description="The `source` of a file of schedules.")] = None,
    order: PageOrder = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    page = parse_limit(limit)
    return schedules.list_schedules(call.services, principal, page, cursor, source, order)


@router.patch(
    "/schedules/{schedule_id}",
    **mutating(
        200,
        Schedule,
        VERSIONED,
        _SPEC_REFUSALS,
        _CONTENT_REFUSALS,
        _BOUND_REFUSALS,
        _ENDED,
        ("host_owned_field",),
        answer="The schedule; a changed spec, workflow or input is a new revision",
        body=PatchScheduleBody,
    ),
    description="Content edits: creator or admin; `enabled` alone: any member. " + IDEMPOTENCY_DOC,
)
def patch_schedule(tenant: str, schedule_id: str, call: MutationDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = call.body(PatchScheduleBody, host_owned_check=True)
        command = decode_update(schedule_id, body.version, body.changes())
        return schedules.update(call.services, principal, command)

    return call.mutate(tenant, decide, mutations.schedule(schedule_id))


def _toggle(enabled: bool) -> Any:
    def route(tenant: str, schedule_id: str, call: MutationDep) -> Response:
        def decide(principal: Principal) -> Mutation:
            version = call.body(VersionBody).version
            return schedules.set_enabled(call.services, principal, schedule_id, version, enabled)

        return call.mutate(tenant, decide, mutations.schedule(schedule_id))

    return route


router.add_api_route(
    "/schedules/{schedule_id}/pause",
    _toggle(False),
    methods=["POST"],
    **mutating(200, Schedule, *_ROLE_AND_VERSION, answer="The schedule", body=VersionBody),
    description="Stop generating occurrences; queued ones still run. " + IDEMPOTENCY_DOC,
    name="pause_schedule",
)
router.add_api_route(
    "/schedules/{schedule_id}/resume",
    _toggle(True),
    methods=["POST"],
    **mutating(200, Schedule, *_ROLE_AND_VERSION, _ENDED, answer="The schedule", body=VersionBody),
    description="Generate again, applying the missed policy; an ended schedule is "
    "`409 invalid_state` (extend it with a PATCH of `end_at` or `max_occurrences`). "
    + IDEMPOTENCY_DOC,
    name="resume_schedule",
)


@router.delete(
    "/schedules/{schedule_id}",
    **mutating(204, None, *_ROLE_AND_VERSION, answer="Deleted"),
    description="Cancels its unstarted occurrences (`schedule_deleted`) and leaves runs alone; "
    "creator or admin. " + IDEMPOTENCY_DOC,
)
def delete_schedule(
    tenant: str,
    schedule_id: str,
    call: MutationDep,
    version: Annotated[
        str | None,
        documented_query(whole_number(1), "Required: the schedule's current version."),
    ] = None,
) -> Response:
    def decide(principal: Principal) -> Mutation:
        if version is None:
            raise InvalidRequest(
                "send the schedule's current version as ?version=N",
                errors=[{"loc": ["query", "version"], "msg": "required", "type": "missing"}],
            )
        current = parse_whole_number(version, "version", minimum=1)
        return schedules.delete(call.services, principal, schedule_id, current)

    return call.mutate(tenant, decide, mutations.schedule(schedule_id))


@router.post(
    "/schedules/{schedule_id}/transfer",
    **mutating(
        200,
        Schedule,
        *_ROLE_AND_VERSION,
        ("transfer_target_invalid",),
        answer="The schedule, `created_by` = `to`",
        body=TransferBody,
    ),
    description="Admin. `to` (a member or admin of the tenant) becomes the schedule's "
    "`created_by`: runs dispatched from then on carry its identity. " + IDEMPOTENCY_DOC,
)
def transfer_schedule(tenant: str, schedule_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant,
        lambda principal: transfer.transfer(
            call.services, principal, call.body(TransferBody).command(schedule_id)
        ),
        mutations.schedule(schedule_id),
    )


@router.post(
    "/schedules/{schedule_id}/trigger",
    **mutating(
        201,
        Occurrence,
        ADMIN,
        answer="The occurrence, `origin: trigger`, due now",
        body=TriggerBody,
    ),
    description="One occurrence now (RS-9a): `occurrence_at` is the current millisecond (the "
    "next free one if taken), dispatched under the schedule's overlap policy or the one "
    "the body names (`{}` or no body: the schedule's). Any member or admin; allowed while "
    "paused or ended; the schedule's `version` stays. " + IDEMPOTENCY_DOC,
)
def trigger_schedule(tenant: str, schedule_id: str, call: MutationDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        data = load_json(call.raw)
        body = parse_object({} if data is None else data, TriggerBody)
        return schedule_controls.trigger(call.services, principal, body.command(schedule_id))

    return call.mutate(tenant, decide, mutations.schedule(schedule_id))


@router.post(
    "/schedules/{schedule_id}/backfill",
    **mutating(
        200,
        BackfillResult,
        ADMIN,
        ("backfill_range_invalid", "backfill_too_large", "quota_exceeded", "quota_unavailable"),
        answer="Every fire time of the range, in order, as the occurrence that holds it",
        body=BackfillBody,
    ),
    description="Generate the fire times of `(from, to]` under the spec and DST policy "
    "(RS-9b), at most 1,000: an instant that has a live or finished occurrence is "
    "`existing`; one covered only by a skipped range or a skipped or failed occurrence is "
    "generated again (the old row stays). Without `overlap` they dispatch one after "
    "another in `occurrence_at` order. They count against the pending-start quota until "
    "they start. Creator or admin; the schedule's `version` stays. " + IDEMPOTENCY_DOC,
)
def backfill_schedule(tenant: str, schedule_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant,
        lambda principal: schedule_controls.backfill(
            call.services, principal, call.body(BackfillBody).command(schedule_id)
        ),
        mutations.schedule(schedule_id),
    )


@router.get(
    "/schedules/{schedule_id}/occurrences",
    **answering(200, OccurrencePage, LIST),
    description="The schedule's occurrences and skipped ranges in the order they were "
    "generated, newest first unless `order=oldest`; `from` and `to` keep those whose "
    "`occurrence_at`, or an instant of whose skipped range, is in `[from, to)`.",
)
def list_occurrences(
    tenant: str,
    schedule_id: str,
    call: CallDep,
    page: PageDep,
    state: StartStateFilter = None,
    origin: Annotated[
        str | None, choice_query([o.value for o in OccurrenceOrigin], "Why it exists.")
    ] = None,
    after: Annotated[
        str | None, documented_query(INSTANT, "Inclusive lower bound.", alias="from")
    ] = None,
    to: Annotated[str | None, documented_query(INSTANT, "Exclusive upper bound.")] = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = schedules.ListOccurrences(
        schedule_id,
        state,
        page.size(),
        page.cursor,
        page.order,
        origin=origin,
        start=_instant(after, "from"),
        end=_instant(to, "to"),
    )
    return schedules.list_occurrences(call.services, principal, query)


@router.get(
    "/schedules/{schedule_id}/audit",
    **answering(200, ScheduleAudit, READ),
    description="Every instant the schedule's specs yielded in `[from, to)` (at most 10,000) "
    "and what became of it: `fired`, `skipped` (with the recorded reason), `not_generated` "
    "(before creation, after deletion or the end, while paused with the pause, or not yet "
    "reached) or `missing` (no decision recorded: a defect of punctual, raised as a health "
    "finding); with the pauses that overlap the range. Read-only.",
)
def audit_schedule(
    tenant: str,
    schedule_id: str,
    call: CallDep,
    after: Annotated[str | None, documented_query(INSTANT, "Required.", alias="from")] = None,
    to: Annotated[str | None, documented_query(INSTANT, "Required.")] = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    start, end = _instant(after, "from"), _instant(to, "to")
    if start is None or end is None:
        missing = [name for name, value in (("from", start), ("to", end)) if value is None]
        raise InvalidRequest(
            f"an audit needs {' and '.join(missing)}: the range [from, to) to account for",
            errors=[
                {"loc": ["query", name], "msg": "required", "type": "missing"} for name in missing
            ],
        )
    command = missed_runs.AuditSchedule(schedule_id, start, end)
    return missed_runs.audit_schedule(call.services, principal, command)


@router.post(
    "/schedules/{schedule_id}/occurrences/{occurrence_id}/cancel",
    **mutating(
        200,
        Occurrence,
        *_ROLE_AND_VERSION,
        ("already_dispatched", "invalid_state"),
        answer="The occurrence, `state: canceled`",
        body=VersionBody,
    ),
    description="Cancel one unstarted occurrence; any member or admin. " + IDEMPOTENCY_DOC,
)
def cancel_occurrence(
    tenant: str, schedule_id: str, occurrence_id: str, call: MutationDep
) -> Response:
    def decide(principal: Principal) -> Mutation:
        version = call.body(VersionBody).version
        return schedules.cancel_occurrence(
            call.services, principal, schedule_id, occurrence_id, version
        )

    return call.mutate(tenant, decide, mutations.occurrence(schedule_id, occurrence_id))


def _json_query(name: str, text: str) -> Any:
    """A query parameter that carries a schedule field's JSON."""
    try:
        return load_json(text.encode())
    except InvalidRequest:
        raise InvalidRequest(
            f"{name} must be JSON, as a schedule's {name} is sent",
            errors=[{"loc": ["query", name], "msg": "not JSON", "type": "json_invalid"}],
        ) from None


@router.get(
    "/schedule-preview",
    **answering(200, SchedulePreview, READ, _SPEC_REFUSALS),
    description="The fire times strictly after `from` (default now) of a cron expression "
    "(with `time_zone`, `dst_gap`, `dst_overlap`), an interval (`interval_ms`, "
    "`starts_at`) or a business day (`business_day`, `at`, `time_zone`), or of a "
    "schedule's `specs`, `calendar` and `blackouts` (each as the JSON a schedule takes), "
    "with their local and nominal times, and the decisions not to fire met on the way "
    "(`skipped`: DST gaps, closed days, blackouts). Read-only.",
)
def schedule_preview(
    tenant: str,
    call: CallDep,
    cron: str | None = None,
    time_zone: Annotated[str | None, Query(description="IANA zone, default UTC.")] = None,
    dst_gap: Annotated[str | None, choice_query(["shift_to_gap_end", "skip"])] = None,
    dst_overlap: Annotated[str | None, choice_query(["first", "last", "both"])] = None,
    interval_ms: Annotated[str | None, documented_query(whole_number(0, MAX_SPAN_MS))] = None,
    starts_at: Annotated[str | None, documented_query(INSTANT)] = None,
    business_day: Annotated[
        str | None,
        Query(description="The N-th business day of each month (1-23, or -1…-23 from its end)."),
    ] = None,
    at: Annotated[str | None, Query(description="A business day's local time, HH:MM.")] = None,
    specs: Annotated[
        str | None, Query(description="A schedule's `specs`, as JSON (instead of one spec).")
    ] = None,
    calendar: Annotated[str | None, Query(description="A schedule's `calendar`, as JSON.")] = None,
    blackouts: Annotated[
        str | None, Query(description="A schedule's `blackouts`, as JSON.")
    ] = None,
    after: Annotated[str | None, documented_query(INSTANT, alias="from")] = None,
    count: Annotated[
        str | None,
        documented_query(whole_number(1, 100), "How many fire times, 1-100 (default 10)."),
    ] = None,
) -> dict[str, Any]:
    call.principal(tenant)
    instant = _instant(after, "from") or call.services.clock.now()
    fields: dict[str, Any] = {}
    zone = {"time_zone": time_zone or "UTC"}
    policy = {k: v for k, v in (("dst_gap", dst_gap), ("dst_overlap", dst_overlap)) if v}
    if cron is not None:
        fields["spec"] = {"cron": cron} | zone | policy
    elif business_day is not None:
        magnitude = parse_whole_number(business_day.removeprefix("-"), "business_day", maximum=99)
        day = -magnitude if business_day.startswith("-") else magnitude
        fields["spec"] = {"business_day": day, "at": at} | zone | policy
    elif interval_ms is not None:
        spec: dict[str, Any] = {
            "interval_ms": parse_whole_number(interval_ms, "interval_ms", maximum=MAX_SPAN_MS)
        }
        start = _instant(starts_at, "starts_at")
        if start is not None:
            spec["starts_at"] = start
        fields["spec"] = spec
    for name, text in (("specs", specs), ("calendar", calendar), ("blackouts", blackouts)):
        if text is not None:
            fields[name] = _json_query(name, text)
    number = parse_limit(count, default=schedules.PREVIEW_DEFAULT_COUNT, name="count")
    try:
        return schedules.preview(fields, instant, number)
    except OverflowError:
        # Fire times past the year 9999 exist in no calendar Python (or the store) holds.
        raise InvalidRequest(
            "the preview's fire times would pass the year 9999; choose an earlier 'from' "
            "or 'starts_at', or fewer fire times",
            errors=[{"loc": ["query"], "msg": "beyond the year 9999", "type": "datetime_range"}],
        ) from None


def _instant(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_rfc3339(value)
    except (ValueError, OverflowError):  # OverflowError: its UTC value is beyond the years 1-9999
        raise InvalidRequest(
            f"{name} must be an RFC 3339 timestamp with an offset, e.g. 2026-03-29T00:00:00Z",
            errors=[{"loc": ["query", name], "msg": "timestamp with offset", "type": "datetime"}],
        ) from None
