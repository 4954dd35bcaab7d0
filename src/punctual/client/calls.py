"""Every call of the tenant API, described once: each function builds the request (method,
path, body, query, idempotency key) and says how to read its answer. ``PunctualClient`` and
``AsyncPunctualClient`` send these same calls, so the two cannot drift apart."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from punctual.client.wire import (
    KEEP,
    Call,
    Keep,
    escaped,
    given,
    instant,
    jsonable,
    model,
    mutation,
    new_idempotency_key,
    nothing,
    query,
)
from punctual.resources import (
    AuditPage,
    BackfillResult,
    BatchCreateResult,
    BatchItemResult,
    DefinitionPage,
    DeliveryPage,
    Finding,
    Health,
    Hold,
    HoldPage,
    IssuedToken,
    Member,
    MemberPage,
    Notification,
    NotificationPage,
    Occurrence,
    OccurrencePage,
    Queued,
    Resource,
    Run,
    RunPage,
    Schedule,
    ScheduleAudit,
    SchedulePage,
    SchedulePreview,
    ScheduleUpsert,
    Start,
    StartPage,
    TokenPage,
    UpsertPlan,
    Webhook,
    WebhookPage,
)

T = TypeVar("T")
R = TypeVar("R", bound=Resource)
Order = Literal["newest", "oldest"]
"""A list's order: ``newest`` first (the server's default) or ``oldest`` first. A cursor
keeps the order of its page: with ``cursor=``, leave ``order`` out or send the same."""


def _start_body(
    workflow: str,
    input: Any,
    business_request_id: str,
    start_at: datetime | str,
    workload_class: str,
    time_zone: str | None,
    attributes: Mapping[str, str] | None,
    traceparent: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow": workflow,
        "input": input,
        "business_request_id": business_request_id,
        "start_at": instant(start_at),
        "workload_class": workload_class,
    }
    optional = {"time_zone": time_zone, "attributes": attributes, "traceparent": traceparent}
    body.update({k: dict(v) if k == "attributes" else v for k, v in given(**optional).items()})
    return body


def _batch_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A batch item in the wire form ``create_start`` sends (defaults, ISO instants), with
    its own key (a new one when the item has none)."""
    body: dict[str, Any] = {"workload_class": "standard"}
    for name, value in item.items():
        if value is None and name in ("time_zone", "attributes", "traceparent", "idempotency_key"):
            continue
        body[name] = value.isoformat() if isinstance(value, datetime) else value
    body.setdefault("idempotency_key", new_idempotency_key())
    return body


def _batch_results(sent: list[dict[str, Any]]) -> Callable[[Any], list[BatchItemResult]]:
    def read(data: Any) -> list[BatchItemResult]:
        results = BatchCreateResult.model_validate(data).items
        for item, result in zip(sent, results, strict=True):
            result._idempotency_key = item["idempotency_key"]
            if isinstance(result.body, Resource):
                result.body._idempotency_key = item["idempotency_key"]
        return results

    return read


def _schedule_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = jsonable(fields)
    return body


def _webhook_changes(url: Any, events: Any, secret: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if url is not KEEP:
        body["url"] = url
    if events is not KEEP:
        body["events"] = list(events) if events is not None else None
    if secret is not KEEP:
        body["secret"] = secret
    return body


def _by_name(name: str) -> str:
    return f"/schedules/by-name/{escaped(name)}"


# --------------------------------------------------------------------------- starts


def create_start(
    *,
    workflow: str,
    input: Any,
    business_request_id: str,
    start_at: datetime | str,
    workload_class: str = "standard",
    time_zone: str | None = None,
    attributes: Mapping[str, str] | None = None,
    traceparent: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Start]:
    """Schedule one run of ``workflow`` at ``start_at`` (with a UTC offset)."""
    body = _start_body(
        workflow,
        input,
        business_request_id,
        start_at,
        workload_class,
        time_zone,
        attributes,
        traceparent,
    )
    return mutation("POST", "/scheduled-starts", model(Start), idempotency_key, body)


def create_starts_batch(items: Sequence[Mapping[str, Any]]) -> Call[list[BatchItemResult]]:
    """Up to 500 creates in one request (OS-11); each item is a ``create_start`` call's
    keyword arguments (an item without ``idempotency_key`` gets a new one). Per item, in
    order: ``status`` and ``body`` (the start, an ``Error``, or ``InProgress``) and its
    ``idempotency_key``. Items still in progress are retried (decided ones replay);
    whole-request errors raise."""
    sent = [_batch_item(item) for item in items]
    return Call("POST", "/scheduled-starts/batch", _batch_results(sent), {"items": sent})


def get_start(start_id: str) -> Call[Start]:
    return query(f"/scheduled-starts/{escaped(start_id)}", model(Start))


def list_starts(
    *,
    state: str | None = None,
    workflow: str | None = None,
    business_request_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
) -> Call[StartPage]:
    """One-off starts, newest first unless ``order="oldest"``."""
    return query(
        "/scheduled-starts",
        model(StartPage),
        state=state,
        workflow=workflow,
        business_request_id=business_request_id,
        limit=limit,
        cursor=cursor,
        order=order,
    )


def reschedule_start(
    start_id: str,
    *,
    version: int,
    start_at: datetime | str,
    time_zone: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Start]:
    body = given(version=version, start_at=instant(start_at), time_zone=time_zone)
    path = f"/scheduled-starts/{escaped(start_id)}/reschedule"
    return mutation("POST", path, model(Start), idempotency_key, body)


def cancel_start(
    start_id: str,
    *,
    version: int,
    reason: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Start]:
    body = given(version=version, reason=reason)
    path = f"/scheduled-starts/{escaped(start_id)}/cancel"
    return mutation("POST", path, model(Start), idempotency_key, body)


# --------------------------------------------------------------------------- runs


def get_run(run_id: str) -> Call[Run]:
    return query(f"/runs/{escaped(run_id)}", model(Run))


def list_runs(
    *,
    workflow: str | None = None,
    state: str | None = None,
    origin_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
    schedule_id: str | None = None,
    origin: str | None = None,
) -> Call[RunPage]:
    """Runs, newest first unless ``order="oldest"``. ``schedule_id``: the runs of that
    schedule's occurrences; ``origin``: ``"scheduled_start"`` or ``"schedule"`` (the
    runs' ``origin.source``), or the id of the start or occurrence, as ``origin_id``."""
    return query(
        "/runs",
        model(RunPage),
        workflow=workflow,
        state=state,
        origin_id=origin_id,
        limit=limit,
        cursor=cursor,
        order=order,
        schedule_id=schedule_id,
        origin=origin,
    )


def cancel_run(run_id: str, *, idempotency_key: str | None = None) -> Call[Run]:
    """Cooperative: the workflow sees ``cancel_requested``."""
    path = f"/runs/{escaped(run_id)}/cancel"
    return mutation("POST", path, model(Run), idempotency_key)


def terminate_run(run_id: str, *, idempotency_key: str | None = None) -> Call[Run]:
    """Immediate: recorded ``terminated`` at once."""
    path = f"/runs/{escaped(run_id)}/terminate"
    return mutation("POST", path, model(Run), idempotency_key)


# --------------------------------------------------------------------------- schedules


def create_schedule(
    *,
    name: str,
    workflow: str,
    input: Any,
    spec: Mapping[str, Any] | None = None,
    overlap: str,
    missed: str,
    max_catch_up: int | None = None,
    catch_up_window: float | None = None,
    misfire_grace_ms: int | None = None,
    enabled: bool | None = None,
    version_policy: str | None = None,
    workload_class: str | None = None,
    regression: Mapping[str, Any] | None = None,
    end_at: datetime | str | None = None,
    max_occurrences: int | None = None,
    jitter_ms: int | None = None,
    source: str | None = None,
    idempotency_key: str | None = None,
    **more: Any,
) -> Call[Schedule]:
    """``spec`` is ``{"cron", "time_zone"?, "dst_gap"?, "dst_overlap"?}``,
    ``{"interval_ms", "starts_at"?}`` or ``{"business_day", "at", "time_zone"}``, or pass
    ``specs=[...]`` instead; options left ``None`` take the server's defaults.
    ``more``: any other field of the create body by its API name (``specs``,
    ``calendar``, ``blackouts``...), so a field the server has and these named options do
    not yet is still sent as given."""
    body = _schedule_body(
        name=name,
        workflow=workflow,
        input=input,
        overlap=overlap,
        missed=missed,
        **given(
            spec=spec,
            max_catch_up=max_catch_up,
            catch_up_window=catch_up_window,
            misfire_grace_ms=misfire_grace_ms,
            enabled=enabled,
            version_policy=version_policy,
            workload_class=workload_class,
            regression=regression,
            end_at=end_at,
            max_occurrences=max_occurrences,
            jitter_ms=jitter_ms,
            source=source,
        ),
        **more,
    )
    return mutation("POST", "/schedules", model(Schedule), idempotency_key, body)


def get_schedule(schedule_id: str) -> Call[Schedule]:
    return query(f"/schedules/{escaped(schedule_id)}", model(Schedule))


def list_schedules(
    *,
    limit: int | None = None,
    cursor: str | None = None,
    source: str | None = None,
    order: Order | None = None,
) -> Call[SchedulePage]:
    """Live schedules, newest first unless ``order="oldest"``; ``source``: only the
    schedules last applied from that file (RS-9e)."""
    return query(
        "/schedules",
        model(SchedulePage),
        limit=limit,
        cursor=cursor,
        source=source,
        order=order,
    )


def update_schedule(
    schedule_id: str,
    *,
    version: int,
    idempotency_key: str | None = None,
    **changes: Any,
) -> Call[Schedule]:
    """Change the given fields (``PATCH``): content edits need the creator or an admin,
    ``enabled`` alone any member."""
    body = {"version": version, **_schedule_body(**changes)}
    path = f"/schedules/{escaped(schedule_id)}"
    return mutation("PATCH", path, model(Schedule), idempotency_key, body)


def pause_schedule(
    schedule_id: str, *, version: int, idempotency_key: str | None = None
) -> Call[Schedule]:
    path = f"/schedules/{escaped(schedule_id)}/pause"
    body = {"version": version}
    return mutation("POST", path, model(Schedule), idempotency_key, body)


def resume_schedule(
    schedule_id: str, *, version: int, idempotency_key: str | None = None
) -> Call[Schedule]:
    path = f"/schedules/{escaped(schedule_id)}/resume"
    body = {"version": version}
    return mutation("POST", path, model(Schedule), idempotency_key, body)


def delete_schedule(
    schedule_id: str, *, version: int, idempotency_key: str | None = None
) -> Call[None]:
    """Cancels its unstarted occurrences; runs are left alone."""
    path = f"/schedules/{escaped(schedule_id)}"
    params = {"version": version}
    return mutation("DELETE", path, nothing, idempotency_key, params=params)


def transfer_schedule(
    schedule_id: str, *, version: int, to: str, idempotency_key: str | None = None
) -> Call[Schedule]:
    """Admin: ``to`` (a member or admin) becomes the schedule's creator (CR-8)."""
    path = f"/schedules/{escaped(schedule_id)}/transfer"
    body = {"version": version, "to": to}
    return mutation("POST", path, model(Schedule), idempotency_key, body)


def list_occurrences(
    schedule_id: str,
    *,
    state: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
    origin: str | None = None,
    after: datetime | str | None = None,
    to: datetime | str | None = None,
) -> Call[OccurrencePage]:
    """The schedule's occurrences in the order they were generated, newest first unless
    ``order="oldest"``; ``origin``: ``"schedule"``, ``"trigger"`` or ``"backfill"``;
    ``after`` and ``to`` (the API's ``from`` and ``to``): those whose instant, or an
    instant of whose skipped range, is in ``[after, to)``."""
    path = f"/schedules/{escaped(schedule_id)}/occurrences"
    params = given(
        state=state,
        limit=limit,
        cursor=cursor,
        order=order,
        origin=origin,
        to=instant(to),
        **{"from": instant(after)},
    )
    return query(path, model(OccurrencePage), **params)


def cancel_occurrence(
    schedule_id: str,
    occurrence_id: str,
    *,
    version: int,
    idempotency_key: str | None = None,
) -> Call[Occurrence]:
    path = f"/schedules/{escaped(schedule_id)}/occurrences/{escaped(occurrence_id)}/cancel"
    body = {"version": version}
    return mutation("POST", path, model(Occurrence), idempotency_key, body)


def preview_schedule(
    *,
    cron: str | None = None,
    time_zone: str | None = None,
    dst_gap: str | None = None,
    dst_overlap: str | None = None,
    interval_ms: int | None = None,
    starts_at: datetime | str | None = None,
    business_day: int | None = None,
    at: str | None = None,
    specs: Sequence[Mapping[str, Any]] | None = None,
    calendar: Mapping[str, Any] | None = None,
    blackouts: Sequence[Mapping[str, Any]] | None = None,
    after: datetime | str | None = None,
    count: int | None = None,
) -> Call[SchedulePreview]:
    """The fire times strictly after ``after`` (the API's ``from``; default now) of one
    spec, or of a schedule's ``specs``, ``calendar`` and ``blackouts`` (as a schedule
    takes them), with the decisions not to fire met on the way (``skipped``)."""
    as_json = {
        name: json.dumps(jsonable(value))
        for name, value in (("specs", specs), ("calendar", calendar), ("blackouts", blackouts))
        if value is not None
    }
    params = given(
        cron=cron,
        time_zone=time_zone,
        dst_gap=dst_gap,
        dst_overlap=dst_overlap,
        interval_ms=interval_ms,
        starts_at=instant(starts_at),
        business_day=business_day,
        at=at,
        count=count,
        **as_json,
        **{"from": instant(after)},
    )
    return query("/schedule-preview", model(SchedulePreview), **params)


def trigger_schedule(
    schedule_id: str, *, overlap: str | None = None, idempotency_key: str | None = None
) -> Call[Occurrence]:
    """One occurrence now (RS-9a), under ``overlap`` or the schedule's policy."""
    path = f"/schedules/{escaped(schedule_id)}/trigger"
    return mutation("POST", path, model(Occurrence), idempotency_key, given(overlap=overlap))


def backfill_schedule(
    schedule_id: str,
    *,
    after: datetime | str,
    to: datetime | str,
    overlap: str | None = None,
    idempotency_key: str | None = None,
) -> Call[BackfillResult]:
    """The fire times in ``(after, to]`` (the API's ``from`` and ``to``, RS-9b)."""
    path = f"/schedules/{escaped(schedule_id)}/backfill"
    body = {"from": instant(after), "to": instant(to), **given(overlap=overlap)}
    return mutation("POST", path, model(BackfillResult), idempotency_key, body)


def audit_schedule(
    schedule_id: str, *, after: datetime | str, to: datetime | str
) -> Call[ScheduleAudit]:
    """Every instant the schedule's specs yielded in ``[after, to)`` and what became of it
    (``fired``, ``skipped``, ``not_generated``, ``missing``), with the pauses (RS-10)."""
    path = f"/schedules/{escaped(schedule_id)}/audit"
    params = {"from": instant(after), "to": instant(to)}
    return query(path, model(ScheduleAudit), **params)


def get_schedule_by_name(name: str) -> Call[Schedule]:
    return query(_by_name(name), model(Schedule))


def put_schedule_by_name(
    name: str,
    schedule: Mapping[str, Any],
    *,
    version: int | None = None,
    idempotency_key: str | None = None,
) -> Call[ScheduleUpsert]:
    """Create, update or leave alone the schedule ``name`` (RS-9e); ``schedule`` is the
    create body (an omitted ``enabled`` keeps the schedule's own)."""
    body = {**_schedule_body(**schedule), **given(version=version)}
    return mutation("PUT", _by_name(name), model(ScheduleUpsert), idempotency_key, body)


def plan_schedule_by_name(name: str, schedule: Mapping[str, Any]) -> Call[UpsertPlan]:
    """What ``put_schedule_by_name`` would do, storing nothing (``?dry_run=true``)."""
    params = {"dry_run": "true"}  # the dry run stores nothing, so it needs no key
    return Call("PUT", _by_name(name), model(UpsertPlan), _schedule_body(**schedule), params)


# --------------------------------------------------------------------------- tenant


def list_definitions() -> Call[DefinitionPage]:
    return query("/definitions", model(DefinitionPage))


def add_member(*, subject: str, role: str, idempotency_key: str | None = None) -> Call[Member]:
    """Admin: add a member, or change its role (``admin``, ``member``, ``viewer``)."""
    body = {"subject": subject, "role": role}
    return mutation("POST", "/members", model(Member), idempotency_key, body)


def list_members(
    *, limit: int | None = None, cursor: str | None = None, order: Order | None = None
) -> Call[MemberPage]:
    """Admin: the tenant's members and roles, the latest to join first unless
    ``order="oldest"``."""
    return query("/members", model(MemberPage), limit=limit, cursor=cursor, order=order)


def remove_member(subject: str, *, idempotency_key: str | None = None) -> Call[None]:
    """Admin: revokes its tokens and auto-disables the schedules it created."""
    path = f"/members/{escaped(subject)}"
    return mutation("DELETE", path, nothing, idempotency_key)


def create_token(
    *,
    subject: str,
    expires_at: datetime | str | None = None,
    idempotency_key: str | None = None,
) -> Call[IssuedToken]:
    """Admin: a token for a member; its secret is in this answer only."""
    body = given(subject=subject, expires_at=instant(expires_at))
    return mutation("POST", "/tokens", model(IssuedToken), idempotency_key, body)


def list_tokens(
    *, limit: int | None = None, cursor: str | None = None, order: Order | None = None
) -> Call[TokenPage]:
    """Admin: the tenant's tokens without their secrets, newest first unless
    ``order="oldest"``."""
    return query("/tokens", model(TokenPage), limit=limit, cursor=cursor, order=order)


def revoke_token(token_id: str, *, idempotency_key: str | None = None) -> Call[None]:
    path = f"/tokens/{escaped(token_id)}"
    return mutation("DELETE", path, nothing, idempotency_key)


def health() -> Call[Health]:
    return query("/health", model(Health))


def acknowledge_finding(finding_id: str, *, idempotency_key: str | None = None) -> Call[Finding]:
    path = f"/health/findings/{escaped(finding_id)}/acknowledge"
    return mutation("POST", path, model(Finding), idempotency_key)


# --------------------------------------------------------------------------- notifications


def list_notifications(
    *,
    unread: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
) -> Call[NotificationPage]:
    """The caller's own notifications, newest first unless ``order="oldest"``."""
    return query(
        "/notifications",
        model(NotificationPage),
        unread="true" if unread else None,
        limit=limit,
        cursor=cursor,
        order=order,
    )


def mark_notification_read(
    notification_id: str, *, idempotency_key: str | None = None
) -> Call[Notification]:
    path = f"/notifications/{escaped(notification_id)}/read"
    return mutation("POST", path, model(Notification), idempotency_key)


# --------------------------------------------------------------------------- webhooks


def create_webhook(
    *,
    url: str,
    events: Sequence[str] | None = None,
    secret: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Webhook]:
    """Admin. ``events=None`` subscribes to every kind; the secret is never returned."""
    body = given(url=url, events=list(events) if events is not None else None, secret=secret)
    return mutation("POST", "/webhooks", model(Webhook), idempotency_key, body)


def list_webhooks(
    *, limit: int | None = None, cursor: str | None = None, order: Order | None = None
) -> Call[WebhookPage]:
    """Admin, newest first unless ``order="oldest"``."""
    return query("/webhooks", model(WebhookPage), limit=limit, cursor=cursor, order=order)


def get_webhook(webhook_id: str) -> Call[Webhook]:
    return query(f"/webhooks/{escaped(webhook_id)}", model(Webhook))


def update_webhook(
    webhook_id: str,
    *,
    url: str | Literal[Keep.KEEP] = KEEP,
    events: Sequence[str] | Literal[Keep.KEEP] | None = KEEP,
    secret: str | Literal[Keep.KEEP] | None = KEEP,
    idempotency_key: str | None = None,
) -> Call[Webhook]:
    """Change what is given: a new ``secret`` rotates it, ``secret=None`` removes it;
    ``events=None`` subscribes to every kind."""
    body = _webhook_changes(url, events, secret)
    path = f"/webhooks/{escaped(webhook_id)}"
    return mutation("PATCH", path, model(Webhook), idempotency_key, body)


def delete_webhook(webhook_id: str, *, idempotency_key: str | None = None) -> Call[None]:
    path = f"/webhooks/{escaped(webhook_id)}"
    return mutation("DELETE", path, nothing, idempotency_key)


def test_webhook(webhook_id: str, *, idempotency_key: str | None = None) -> Call[Queued]:
    """Queue a ``test`` event to this webhook."""
    path = f"/webhooks/{escaped(webhook_id)}/test"
    return mutation("POST", path, model(Queued), idempotency_key)


def list_deliveries(
    webhook_id: str,
    *,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
) -> Call[DeliveryPage]:
    """Admin, newest first unless ``order="oldest"``."""
    path = f"/webhooks/{escaped(webhook_id)}/deliveries"
    return query(path, model(DeliveryPage), limit=limit, cursor=cursor, order=order)


def redeliver(
    webhook_id: str, delivery_id: str, *, idempotency_key: str | None = None
) -> Call[Queued]:
    """A new delivery of the same event (same ``event_id``)."""
    path = f"/webhooks/{escaped(webhook_id)}/deliveries/{escaped(delivery_id)}/redeliver"
    return mutation("POST", path, model(Queued), idempotency_key)


# --------------------------------------------------------------------------- holds, audit


def place_hold(
    *,
    subject_kind: str,
    reason: str,
    subject_id: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Hold]:
    """Admin: keep a ``start``, ``schedule``, ``run`` or the whole ``tenant`` (no
    ``subject_id``) from retention until released."""
    body = given(subject_kind=subject_kind, subject_id=subject_id, reason=reason)
    return mutation("POST", "/holds", model(Hold), idempotency_key, body)


def list_holds(
    *,
    active: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
) -> Call[HoldPage]:
    """Admin, newest first unless ``order="oldest"``; ``active=True`` lists only holds not
    yet released."""
    flag = "true" if active else None
    return query("/holds", model(HoldPage), active=flag, limit=limit, cursor=cursor, order=order)


def release_hold(hold_id: str, *, idempotency_key: str | None = None) -> Call[Hold]:
    """Admin (idempotent); a hold the host placed is ``PermissionDeniedError``."""
    path = f"/holds/{escaped(hold_id)}/release"
    return mutation("POST", path, model(Hold), idempotency_key)


def list_audit_entries(
    *,
    subject_id: str | None = None,
    actor: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    order: Order | None = None,
) -> Call[AuditPage]:
    """Admin: the tenant's audit log, newest first unless ``order="oldest"``, filtered by
    exact matches."""
    return query(
        "/audit",
        model(AuditPage),
        subject_id=subject_id,
        actor=actor,
        limit=limit,
        cursor=cursor,
        order=order,
    )
