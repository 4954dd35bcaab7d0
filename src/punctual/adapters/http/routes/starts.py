"""Scheduled starts (API.md, "Scheduled starts")."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from fastapi.responses import JSONResponse, Response

from punctual.adapters.http.edge import (
    canonical_json,
    fingerprint,
    fingerprint_of,
    idempotency_key,
    load_json,
    parse_json,
    parse_object,
    refuse_unstorable_text,
    valid_key,
)
from punctual.adapters.http.errors import response_for
from punctual.adapters.http.openapi import (
    ADMIN,
    IDEMPOTENCY_DOC,
    LIST,
    READ,
    VERSIONED,
    answering,
    answers,
    mutating,
)
from punctual.adapters.http.routes.common import (
    CallDep,
    MutationDep,
    PageDep,
    StartStateFilter,
    tenant_router,
)
from punctual.adapters.http.schemas import (
    MAX_BATCH_ITEMS,
    BatchCreateBody,
    CancelBody,
    CreateStartBody,
    RescheduleBody,
    request_body_ref,
)
from punctual.domain.permissions import Action, require
from punctual.errors import InvalidRequest, PunctualError
from punctual.resources import BatchCreateResult, Start, StartPage
from punctual.usecases.kernel import mutations
from punctual.usecases.kernel.audit import being_served
from punctual.usecases.kernel.idempotency import IdempotentRequest, ItemResult
from punctual.usecases.scheduled import starts

router = tenant_router("scheduled starts", collection="/scheduled-starts")


CREATE_ROUTE = router.prefix
"""The single create's route, in the fingerprint of every create, batch items included."""

# What a create answers, alone or as a batch item (OS-1, OS-2, OS-10, quotas).
CREATE_REFUSALS = (
    "forbidden",
    "workload_class_not_allowed",
    "input_too_large",
    "validation_error",
    "start_at_not_timezone_aware",
    "start_at_in_past",
    "start_at_zone_mismatch",
    "unknown_time_zone",
    "unknown_workflow",
    "workflow_inactive",
    "input_invalid",
    "host_owned_field",
    "quota_exceeded",
    "quota_unavailable",
)
_TRANSITION_REFUSALS = ("forbidden", "already_dispatched", "invalid_state")
_START_AT_REFUSALS = (
    "start_at_not_timezone_aware",
    "start_at_in_past",
    "start_at_zone_mismatch",
    "unknown_time_zone",
)


@router.post(
    "",
    **mutating(201, Start, CREATE_REFUSALS, answer="The created start", body=CreateStartBody),
    description="Schedule one run of a workflow at an instant (OS-1). " + IDEMPOTENCY_DOC,
)
def create_start(tenant: str, call: MutationDep) -> Response:
    try:
        principal = call.principal()
        key = idempotency_key(call.request)
        claim = (key, fingerprint(call.request, call.raw))
        command = _command(lambda: load_json(call.raw))
        request = IdempotentRequest(principal.tenant, principal.subject, *claim)
        runner, audited = call.edge.mutations, being_served()
        sealing: dict[int, PunctualError] = {}

        def in_one_trip() -> ItemResult | None:
            outcome = starts.create_in_one_trip(
                call.services, runner, principal, command, tenant, request, audited
            )
            if isinstance(outcome, PunctualError):
                sealing[0] = outcome  # the transaction's seal step answers it
                return None
            return outcome

        mutation = starts.create_many(
            call.services, principal, [command], tenant=tenant, seal_failures=sealing
        )
        # The one trip first, then the transaction if it did not decide: both on the
        # mutation pool's thread, under the one bounded wait.
        [result] = runner.run_batch(
            principal.tenant, principal.subject, [claim], mutation, first=in_one_trip
        )
    except PunctualError as exc:
        return response_for(exc)
    if result.error is not None:
        return response_for(result.error)
    return JSONResponse(result.body, status_code=result.status)


@router.post(
    "/batch",
    response_model=None,
    responses=answers(
        200,
        BatchCreateResult,
        READ,
        ADMIN,
        ("body_too_large", "quota_unavailable"),
        description="Per-item results in request order: each item's `status` and `body` are "
        "what the single create would have answered (201 and the start, an error, or 202 "
        "`in_progress`)",
    ),
    openapi_extra={"requestBody": request_body_ref(BatchCreateBody)},
    description=(
        "Up to 500 creates, each decided exactly as `POST …/scheduled-starts` with its "
        "`idempotency_key` as the `Idempotency-Key` header (OS-11). Takes no "
        "`Idempotency-Key` header (one sent is ignored). Per-item results in request order."
    ),
)
def create_starts_batch(tenant: str, call: MutationDep) -> Response:
    try:
        principal = call.principal(tenant)
        items = _batch_items(call.raw)
        require(principal, Action.CREATE)
        claims = [
            (
                key,
                fingerprint_of("POST", CREATE_ROUTE, {"tenant": tenant}, [], canonical_json(body)),
            )
            for key, body in items
        ]
        commands = [_command(partial(_checked, body)) for _, body in items]
        mutation = starts.create_many(call.services, principal, commands)
        results = call.edge.mutations.run_batch(
            principal.tenant, principal.subject, claims, mutation
        )
    except PunctualError as exc:
        return response_for(exc)
    return JSONResponse({"items": [{"status": r.status, "body": r.body} for r in results]})


def _command(data: Callable[[], Any]) -> starts.CreateStart | PunctualError:
    """The create command, or the validation error its body fails with (raised by the use
    case at the validation step: a replay comes first, OS-5)."""
    try:
        return parse_object(data(), CreateStartBody, host_owned_check=True).command()
    except PunctualError as refusal:
        return refusal


def _checked(body: dict[str, Any]) -> dict[str, Any]:
    refuse_unstorable_text(body)
    return body


def _batch_items(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The envelope's items as (key, create body); a malformed envelope is one 422 for the
    whole request, which then changes nothing (API.md "Batch create")."""
    data = parse_json(raw)
    if not isinstance(data, dict) or set(data) != {"items"}:
        raise _envelope_error([], "the body must be an object with exactly one field, items")
    items = data["items"]
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH_ITEMS:
        raise _envelope_error(
            ["items"], f"items must be a list of 1 to {MAX_BATCH_ITEMS} create bodies"
        )
    found: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        key = item.get("idempotency_key") if isinstance(item, dict) else None
        if not isinstance(key, str) or not valid_key(key):
            raise _envelope_error(
                ["items", index, "idempotency_key"],
                f"items[{index}] needs an idempotency_key of 1-255 visible ASCII characters",
            )
        if key in seen:
            raise _envelope_error(
                ["items", index, "idempotency_key"],
                f"items[{index}] repeats an idempotency_key of an earlier item; each item "
                "needs its own",
            )
        seen.add(key)
        assert isinstance(item, dict)
        found.append((key, {k: v for k, v in item.items() if k != "idempotency_key"}))
    return found


def _envelope_error(loc: list[str | int], message: str) -> InvalidRequest:
    return InvalidRequest(
        message, errors=[{"loc": ["body", *loc], "msg": message, "type": "batch_envelope"}]
    )


@router.post(
    "/{start_id}/reschedule",
    **mutating(
        200,
        Start,
        VERSIONED,
        _TRANSITION_REFUSALS,
        _START_AT_REFUSALS,
        answer="The rescheduled start",
        body=RescheduleBody,
    ),
    description="Move a start that has not been dispatched; owner or admin. " + IDEMPOTENCY_DOC,
)
def reschedule_start(tenant: str, start_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant,
        lambda principal: starts.reschedule(
            call.services, principal, call.body(RescheduleBody).command(start_id)
        ),
        mutations.start(start_id),
    )


@router.post(
    "/{start_id}/cancel",
    **mutating(
        200,
        Start,
        VERSIONED,
        _TRANSITION_REFUSALS,
        answer="The start, `state: canceled`",
        body=CancelBody,
    ),
    description="Cancel a start before its dispatch; after it, `409 already_dispatched` names "
    "the run, which the run routes cancel or terminate. Owner or admin. " + IDEMPOTENCY_DOC,
)
def cancel_start(tenant: str, start_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant,
        lambda principal: starts.cancel(
            call.services, principal, call.body(CancelBody).command(start_id)
        ),
        mutations.start(start_id),
    )


@router.get("/{start_id}", **answering(200, Start, READ))
def get_start(tenant: str, start_id: str, call: CallDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return starts.get(call.services, principal, start_id)


@router.get(
    "",
    **answering(200, StartPage, LIST),
    description="Starts, newest first unless `order=oldest`, filtered by what is given.",
)
def list_starts(
    tenant: str,
    call: CallDep,
    page: PageDep,
    state: StartStateFilter = None,
    workflow: str | None = None,
    business_request_id: str | None = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = starts.ListStarts(
        state, workflow, business_request_id, page.size(), page.cursor, page.order
    )
    return starts.list_starts(call.services, principal, query)
