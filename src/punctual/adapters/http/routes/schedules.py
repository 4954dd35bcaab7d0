"""Recurring schedules, their occurrences, and the preview (API.md, "Schedules")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import (
    Edge,
    parse_body,
    parse_limit,
    parse_whole_number,
    run_mutation,
)
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    get_edge,
    mutation_doc,
    raw_body,
)
from punctual.adapters.http.schemas import (
    MAX_SPAN_MS,
    MUTATION_ERRORS,
    CreateScheduleBody,
    PatchScheduleBody,
    Schedule,
    TransferBody,
    VersionBody,
    answers,
)
from punctual.domain.permissions import Principal
from punctual.domain.timeutil import parse_rfc3339
from punctual.errors import InvalidRequest, not_found
from punctual.ports.store import Tx
from punctual.usecases import schedules, transfer
from punctual.usecases.idempotency import Mutation, Outcome

router = APIRouter(
    prefix="/v1/tenants/{tenant}", tags=["schedules"], dependencies=[Security(BEARER)]
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]


def _existing(tx: Tx, principal: Principal, schedule_id: str) -> None:
    if tx.schedules.get(principal.tenant, schedule_id) is None:
        raise not_found("schedule", schedule_id)


@router.post(
    "/schedules",
    status_code=201,
    openapi_extra=mutation_doc(CreateScheduleBody),
    description=IDEMPOTENCY_DOC,
)
def create_schedule(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            body = parse_body(raw, CreateScheduleBody, host_owned_check=True)
            return schedules.create(edge.services, principal, body.command())(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/schedules/{schedule_id}")
def get_schedule(tenant: str, schedule_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    return schedules.get(edge.services, edge.principal(request, tenant), schedule_id)


@router.get("/schedules")
def list_schedules(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    limit: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return schedules.list_schedules(edge.services, principal, parse_limit(limit), cursor)


@router.patch(
    "/schedules/{schedule_id}",
    openapi_extra=mutation_doc(PatchScheduleBody),
    description="Content edits: creator or admin. " + IDEMPOTENCY_DOC,
)
def patch_schedule(
    tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            _existing(tx, principal, schedule_id)
            body = parse_body(raw, PatchScheduleBody, host_owned_check=True)
            command = schedules.UpdateSchedule(schedule_id, body.version, body.changes())
            return schedules.update(edge.services, principal, command)(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


def _toggle(enabled: bool) -> Any:
    def route(
        tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
    ) -> Response:
        def build(principal: Principal) -> Mutation:
            def mutation(tx: Tx, now: Any) -> Outcome:
                _existing(tx, principal, schedule_id)
                body = parse_body(raw, VersionBody)
                return schedules.set_enabled(
                    edge.services, principal, schedule_id, body.version, enabled
                )(tx, now)

            return mutation

        return run_mutation(edge, request, raw, tenant, build)

    return route


router.add_api_route(
    "/schedules/{schedule_id}/pause",
    _toggle(False),
    methods=["POST"],
    openapi_extra=mutation_doc(VersionBody),
    description="Stop generating occurrences; queued ones still run. " + IDEMPOTENCY_DOC,
    name="pause_schedule",
)
router.add_api_route(
    "/schedules/{schedule_id}/resume",
    _toggle(True),
    methods=["POST"],
    openapi_extra=mutation_doc(VersionBody),
    description="Generate again, applying the missed policy. " + IDEMPOTENCY_DOC,
    name="resume_schedule",
)


@router.delete(
    "/schedules/{schedule_id}",
    status_code=204,
    openapi_extra=mutation_doc(),
    description=IDEMPOTENCY_DOC,
)
def delete_schedule(
    tenant: str,
    schedule_id: str,
    request: Request,
    edge: EdgeDep,
    raw: BodyDep,
    version: str | None = None,
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            _existing(tx, principal, schedule_id)
            if version is None:
                raise InvalidRequest(
                    "send the schedule's current version as ?version=N",
                    errors=[{"loc": ["query", "version"], "msg": "required", "type": "missing"}],
                )
            current = parse_whole_number(version, "version", minimum=1)
            return schedules.delete(edge.services, principal, schedule_id, current)(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.post(
    "/schedules/{schedule_id}/transfer",
    response_model=None,
    responses=answers(200, Schedule, MUTATION_ERRORS, mutation=True),
    openapi_extra=mutation_doc(TransferBody),
    description="Admin. `to` (a member or admin of the tenant) becomes the schedule's "
    "`created_by`: runs dispatched from then on carry its identity. " + IDEMPOTENCY_DOC,
)
def transfer_schedule(
    tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            _existing(tx, principal, schedule_id)
            body = parse_body(raw, TransferBody)
            return transfer.transfer(edge.services, principal, body.command(schedule_id))(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/schedules/{schedule_id}/occurrences")
def list_occurrences(
    tenant: str,
    schedule_id: str,
    request: Request,
    edge: EdgeDep,
    state: str | None = None,
    limit: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = schedules.ListOccurrences(schedule_id, state, parse_limit(limit), cursor)
    return schedules.list_occurrences(edge.services, principal, query)


@router.post(
    "/schedules/{schedule_id}/occurrences/{occurrence_id}/cancel",
    openapi_extra=mutation_doc(VersionBody),
    description=IDEMPOTENCY_DOC,
)
def cancel_occurrence(
    tenant: str,
    schedule_id: str,
    occurrence_id: str,
    request: Request,
    edge: EdgeDep,
    raw: BodyDep,
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            if tx.starts.get_occurrence(principal.tenant, schedule_id, occurrence_id) is None:
                raise not_found("occurrence", occurrence_id)
            body = parse_body(raw, VersionBody)
            return schedules.cancel_occurrence(
                edge.services, principal, schedule_id, occurrence_id, body.version
            )(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/schedule-preview")
def schedule_preview(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    cron: str | None = None,
    time_zone: str | None = None,
    dst_gap: str | None = None,
    dst_overlap: str | None = None,
    interval_ms: str | None = None,
    starts_at: str | None = None,
    count: str | None = None,
) -> dict[str, Any]:
    edge.principal(request, tenant)
    params = request.query_params
    after = _instant(params.get("from"), "from") or edge.services.clock.now()
    spec: dict[str, Any] = {}
    if cron is not None:
        spec = {"cron": cron, "time_zone": time_zone or "UTC"}
        spec.update({k: v for k, v in (("dst_gap", dst_gap), ("dst_overlap", dst_overlap)) if v})
    elif interval_ms is not None:
        spec = {"interval_ms": parse_whole_number(interval_ms, "interval_ms", maximum=MAX_SPAN_MS)}
        start = _instant(starts_at, "starts_at")
        if start is not None:
            spec["starts_at"] = start
    number = parse_limit(count, default=schedules.PREVIEW_DEFAULT_COUNT, name="count")
    try:
        return schedules.preview(spec, after, number)
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
