"""The operator page's routes: sign-in, a tenant's schedules, starts, runs and health.

The page is an HTTP adapter beside the JSON routes and calls the same use cases with the
same principal, so permissions, validation and projections (which never carry workflow
input) are the API's. It never accepts a bearer header and ``/v1`` never reads its cookie.
Mutations (acknowledging a finding; pausing, resuming and triggering a schedule) run
under the idempotency key the form was rendered with, through the same mutation runner as
the JSON routes, so pressing the button twice, or resending the form, decides once.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from punctual.adapters.http.edge import (
    Edge,
    canonical_json,
    fingerprint_of,
    refuse_unstorable_fields,
    refuse_unstorable_parameters,
    valid_key,
)
from punctual.adapters.http.routes.common import BodyDep, EdgeDep
from punctual.adapters.http.status import GENERIC_MESSAGES, status_for
from punctual.adapters.http.ui import timeline
from punctual.adapters.http.ui.rendering import PREFIX, segment, templates, utc_text
from punctual.adapters.http.ui.session import (
    COOKIE_PATH,
    SESSION_COOKIE,
    SESSION_LIFETIME,
    SIGN_IN_COOKIE,
    SIGN_IN_LIFETIME,
    Sealer,
    Session,
    is_binding,
    new_binding,
)
from punctual.domain.permissions import Action, Principal, allowed
from punctual.domain.runs import RunState
from punctual.domain.starts import StartState
from punctual.domain.timeutil import parse_rfc3339
from punctual.errors import BadRequest, NotFound, PunctualError, Unauthenticated
from punctual.usecases.kernel import audit, mutations
from punctual.usecases.kernel.idempotency import (
    IdempotentRequest,
    Mutation,
    Outcome,
    RecordedError,
)
from punctual.usecases.recurring import schedule_controls, schedules
from punctual.usecases.running import runs
from punctual.usecases.scheduled import starts
from punctual.usecases.tenancy import health, identity

log = logging.getLogger("punctual.http.ui")

router = APIRouter(prefix=PREFIX, include_in_schema=False)

PAGE_SIZE = 50
TIMELINE_MARKS = 2_000
"""The most occurrences a timeline draws: the newest of its window."""
"""The timeline reads at most this many pages of occurrences (10,000 rows)."""
_MAX_FORM_FIELDS = 20
_ACKNOWLEDGE_ROUTE = PREFIX + "/t/{tenant}/health/findings/{finding_id}/acknowledge"
_TITLES = {
    400: "The request was not understood",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    413: "Too large",
    422: "Not valid",
    429: "Too many requests",
    503: "Unavailable",
}


@dataclass(frozen=True)
class Visitor:
    """A signed-in operator: the token's principal and the session it signed in with."""

    principal: Principal
    session: Session

    @property
    def may_operate(self) -> bool:
        """Acknowledge findings, pause and resume schedules (SEC-5)."""
        return allowed(self.principal, Action.OPERATE)

    @property
    def may_trigger(self) -> bool:
        """Trigger a schedule: a new occurrence, as a create is (RS-9a)."""
        return allowed(self.principal, Action.CREATE)


# --------------------------------------------------------------------------- plumbing


def _now(edge: Edge) -> datetime:
    return edge.services.clock.now()


def _sealer(edge: Edge) -> Sealer:
    return Sealer(edge.services.codec)


def _new_key() -> str:
    return "ui-" + secrets.token_urlsafe(18)


def _cookie(request: Request, name: str, value: str, max_age: int) -> str:
    secure = "; Secure" if request.url.scheme == "https" else ""
    attributes = f"Path={COOKIE_PATH}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    return f"{name}={value}; {attributes}"


def _set_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.headers.append("set-cookie", _cookie(request, name, value, max_age))


def _clear_cookie(response: Response, request: Request, name: str) -> None:
    response.headers.append("set-cookie", _cookie(request, name, "", 0))


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _to_sign_in(request: Request) -> Response:
    response = _redirect(PREFIX + "/")
    if SESSION_COOKIE in request.cookies:
        _clear_cookie(response, request, SESSION_COOKIE)
    return response


def _visitor(request: Request, edge: Edge) -> Visitor | None:
    """The session's principal, looked up by its token's digest on every request."""
    now = _now(edge)
    session = _sealer(edge).open_session(request.cookies.get(SESSION_COOKIE), now)
    if session is None:
        return None
    principal = identity.principal_of_digest(edge.services, session.token_digest, now)
    if principal is None or principal.tenant != session.tenant:
        return None
    return Visitor(principal, session)


def _form(request: Request, raw: bytes) -> dict[str, str]:
    """The fields of a form post; an empty body has none (its CSRF check then refuses it).
    A field with U+0000 is refused as ``/v1`` refuses one in a parameter (SPEC FT-3)."""
    if not raw:
        return {}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise BadRequest("the page's forms send application/x-www-form-urlencoded bodies")
    try:
        fields = parse_qsl(
            raw.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=_MAX_FORM_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the form's body could not be read; reload the page") from None
    refuse_unstorable_fields("form", fields)
    return dict(fields)


def _keyed_form(
    request: Request, edge: Edge, raw: bytes, visitor: Visitor
) -> tuple[dict[str, str], str]:
    """A button's form: its fields once its CSRF token is this session's, and the
    idempotency key it was rendered with."""
    form = _form(request, raw)
    _sealer(edge).check_csrf(form.get("csrf_token"), visitor.session.csrf_binding, _now(edge))
    key = form.get("idempotency_key", "")
    if not valid_key(key):
        raise BadRequest(
            "the form's idempotency key is missing or malformed; reload the page",
            code="idempotency_key_required",
        )
    return form, key


def _serving(
    visitor: Visitor, request: Request, action: str, subject_kind: str, subject_id: str
) -> None:
    """The audit log (CR-8) names the same action as the JSON route, from this path, and
    the token the session signed in with."""
    audit.serving(
        audit.AuditedRequest(
            tenant=visitor.principal.tenant,
            actor=visitor.principal.subject,
            token_digest=visitor.session.token_digest,
            action=action,
            method="POST",
            path=request.url.path,
            subject_kind=subject_kind,
            subject_id=subject_id,
        )
    )


def _recorded_error(recorded: RecordedError) -> tuple[str, str]:
    """The code and message of a replayed refusal."""
    error = (recorded.body or {}).get("error", {})
    return str(error.get("code", "error")), str(error.get("message", ""))


def _render(
    request: Request,
    edge: Edge,
    name: str,
    context: dict[str, Any],
    visitor: Visitor | None,
    status: int = 200,
) -> Response:
    now = _now(edge)
    common: dict[str, Any] = {"visitor": visitor, "now": now, "form_key": _new_key}
    if visitor is not None:
        common.update(
            tenant=visitor.principal.tenant,
            csrf_token=_sealer(edge).csrf_token(visitor.session.csrf_binding, now),
        )
    common.update(context)
    return templates.TemplateResponse(request, name, common, status_code=status)


def _error_page(
    request: Request, edge: Edge, visitor: Visitor | None, status: int, code: str, message: str
) -> Response:
    context = {
        "status": status,
        "title": _TITLES.get(status, "Something went wrong"),
        "code": code,
        "message": GENERIC_MESSAGES.get(code, message),
    }
    return _render(request, edge, "error.html", context, visitor, status)


def _failure(request: Request, edge: Edge, visitor: Visitor | None, exc: Exception) -> Response:
    """An error as a page of its own, with the page's headers (not the API's JSON)."""
    if isinstance(exc, PunctualError):
        status, code, message = status_for(exc), exc.code, exc.message
        if code in GENERIC_MESSAGES:
            log.warning("event=ui_unavailable code=%s detail=%s", code, message)
    else:
        log.error("event=ui_unexpected_error path=%s", request.url.path, exc_info=exc)
        status, code = 500, "internal_error"
        message = "punctual hit an unexpected error; it was logged"
    try:
        return _error_page(request, edge, visitor, status, code, message)
    except PunctualError:  # the session's CSRF token cannot be sealed (codec refusing)
        return _error_page(request, edge, None, status, code, message)


def _answer(request: Request, edge: Edge, handle: Callable[[], Response]) -> Response:
    """Run a handler that needs no session; its errors become pages."""
    try:
        refuse_unstorable_parameters(request)
        return handle()
    except Exception as exc:
        return _failure(request, edge, None, exc)


def _page(
    request: Request,
    edge: Edge,
    tenant: str | None,
    build: Callable[[Visitor], Response],
) -> Response:
    """Sign-in check, parameters with U+0000 refused as ``/v1`` refuses them, tenant check
    (None: any page of the session's tenant), then the page; errors become pages of their
    own."""
    visitor: Visitor | None = None
    try:
        visitor = _visitor(request, edge)
        if visitor is None:
            return _to_sign_in(request)
        refuse_unstorable_parameters(request)
        if tenant is not None and visitor.principal.tenant != tenant:
            # Another tenant's pages do not exist for this principal (SEC-2).
            raise NotFound(f"tenant {tenant} does not exist")
        return build(visitor)
    except Unauthenticated:
        return _to_sign_in(request)
    except Exception as exc:
        return _failure(request, edge, visitor, exc)


# --------------------------------------------------------------------------- sign-in


@router.get("/")
def sign_in_form(request: Request, edge: EdgeDep) -> Response:
    def handle() -> Response:
        visitor = _visitor(request, edge)
        if visitor is not None:
            return _redirect(f"{PREFIX}/t/{segment(visitor.principal.tenant)}/schedules")
        return _sign_in_page(request, edge, error=None, tenant="", status=200)

    return _answer(request, edge, handle)


def _sign_in_page(
    request: Request, edge: Edge, *, error: str | None, tenant: str, status: int
) -> Response:
    """The form, bound to a ``SameSite=Strict`` sign-in cookie so that another site cannot
    sign a browser in with a token of its choosing (login CSRF)."""
    binding = request.cookies.get(SIGN_IN_COOKIE) or ""
    if not is_binding(binding):
        binding = new_binding()
    context = {
        "sign_in_csrf": _sealer(edge).csrf_token(binding, _now(edge)),
        "error": error,
        "tenant_value": tenant,
    }
    response = _render(request, edge, "sign_in.html", context, None, status)
    _set_cookie(response, request, SIGN_IN_COOKIE, binding, int(SIGN_IN_LIFETIME.total_seconds()))
    if SESSION_COOKIE in request.cookies:
        _clear_cookie(response, request, SESSION_COOKIE)
    return response


@router.get("/sign-in")
def sign_in_get() -> Response:
    return _redirect(PREFIX + "/")


@router.post("/sign-in")
def sign_in(request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    """Verify the token as ``/v1`` does, then keep its digest in a sealed session cookie."""

    def handle() -> Response:
        now = _now(edge)
        sealer = _sealer(edge)
        form = _form(request, raw)
        sealer.check_csrf(form.get("csrf_token"), request.cookies.get(SIGN_IN_COOKIE), now)
        token = form.get("token", "").strip()
        tenant = form.get("tenant", "").strip()
        try:
            principal = identity.authenticate(edge.services, token or None)
            if tenant and tenant != principal.tenant:
                raise Unauthenticated("the token is not one of that tenant's")
        except Unauthenticated:
            message = (
                "That token is unknown, revoked or expired, or it is not one of that tenant's."
            )
            return _sign_in_page(request, edge, error=message, tenant=tenant, status=401)
        session = Session(
            token_digest=identity.digest(token),
            tenant=principal.tenant,
            csrf_binding=new_binding(),
            expires_at=now + SESSION_LIFETIME,
        )
        response = _redirect(f"{PREFIX}/t/{segment(principal.tenant)}/schedules")
        lifetime = int(SESSION_LIFETIME.total_seconds())
        _set_cookie(response, request, SESSION_COOKIE, sealer.seal_session(session), lifetime)
        _clear_cookie(response, request, SIGN_IN_COOKIE)
        log.info("event=ui_signed_in tenant=%s subject=%s", principal.tenant, principal.subject)
        return response

    return _answer(request, edge, handle)


@router.post("/sign-out")
def sign_out(request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    """Clear the cookie; with a live session only on a form of that session (CSRF)."""

    def handle() -> Response:
        visitor = _visitor(request, edge)
        if visitor is not None:
            form = _form(request, raw)
            _sealer(edge).check_csrf(
                form.get("csrf_token"), visitor.session.csrf_binding, _now(edge)
            )
        response = _redirect(PREFIX + "/")
        _clear_cookie(response, request, SESSION_COOKIE)
        return response

    return _answer(request, edge, handle)


# --------------------------------------------------------------------------- pages


@router.get("/t/{tenant}")
def tenant_home(tenant: str, request: Request, edge: EdgeDep) -> Response:
    return _page(
        request,
        edge,
        tenant,
        lambda visitor: _redirect(f"{PREFIX}/t/{segment(tenant)}/schedules"),
    )


def _upcoming(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The schedule's next fire times with their local time and DST note: the preview of
    its spec from just before the first of them, so both name the same instants."""
    fire_times: list[str] = view["next_fire_times"]
    notes: dict[str, dict[str, Any]] = {}
    if any("interval_ms" not in spec for spec in view["specs"]) and fire_times:
        after = parse_rfc3339(fire_times[0]) - timedelta(milliseconds=1)
        timing = {"specs": view["specs"], "calendar": view["calendar"]}
        try:
            preview = schedules.preview(timing, after, len(fire_times))
        except (PunctualError, OverflowError):
            preview = {"items": []}
        notes = {item["fire_at"]: item for item in preview["items"]}
    return [
        {
            "at": at,
            "local": notes.get(at, {}).get("local"),
            "nominal": notes.get(at, {}).get("nominal"),
            "dst_adjustment": notes.get(at, {}).get("dst_adjustment"),
            "calendar_moved_from": notes.get(at, {}).get("calendar_moved_from"),
        }
        for at in fire_times
    ]


def _schedule_state(view: dict[str, Any]) -> str:
    state = view.get("state")
    if isinstance(state, str):
        return state
    return "active" if view["enabled"] else "paused"


@router.get("/t/{tenant}/schedules")
def schedules_page(
    tenant: str, request: Request, edge: EdgeDep, cursor: str | None = None
) -> Response:
    def build(visitor: Visitor) -> Response:
        listed = schedules.list_schedules(edge.services, visitor.principal, PAGE_SIZE, cursor)
        rows = [
            {
                "view": view,
                "state": _schedule_state(view),
                "upcoming": _upcoming(view),
            }
            for view in listed["items"]
        ]
        context = {
            "section": "schedules",
            "rows": rows,
            "next_cursor": listed["next_cursor"],
            "paged": cursor is not None,
        }
        return _render(request, edge, "schedules.html", context, visitor)

    return _page(request, edge, tenant, build)


def _window(view: dict[str, Any], now: datetime) -> timeline.Window:
    """The timeline's window, from the schedule's rhythm: the median gap between its next
    fire times, previewed from now so that a paused or ended schedule is measured too, and
    reaching back to its last fire."""
    timing = {"specs": view["specs"], "calendar": view["calendar"]}
    try:
        previewed = schedules.preview(timing, now, timeline.FIRES_MEASURED)
        fires = [item["fire_at"] for item in previewed["items"]]
    except (PunctualError, OverflowError):
        fires = view["next_fire_times"]
    gap = timeline.typical_gap([parse_rfc3339(at) for at in fires])
    last = view.get("last_fired_at")
    quiet_for = now - parse_rfc3339(last) if last else None
    return timeline.window_reaching(gap, quiet_for)


@dataclass(frozen=True)
class Control:
    """A button of a schedule's page: the JSON route whose use case it runs (and whose name
    the audit log gives it), and what the page says once it is done."""

    name: str
    label: str
    hint: str
    route_name: str
    done: str
    """The ``done=`` of the redirect."""
    versioned: bool
    """Sends the schedule's version the page was rendered with, as the API's body does."""

    @property
    def route(self) -> str:
        return f"{PREFIX}/t/{{tenant}}/schedules/{{schedule_id}}/{self.name}"


CONTROLS = {
    control.name: control
    for control in (
        Control(
            "pause",
            "Pause",
            "Stops generating occurrences; those already queued still run.",
            "pause_schedule",
            "paused",
            versioned=True,
        ),
        Control(
            "resume",
            "Resume",
            "Generates again; the missed policy decides the fire times it was paused over.",
            "resume_schedule",
            "resumed",
            versioned=True,
        ),
        Control(
            "trigger",
            "Run now",
            "Adds one occurrence due now (origin trigger), under the schedule's overlap "
            "policy, even while paused; the schedule itself does not change.",
            "trigger_schedule",
            "triggered",
            versioned=False,
        ),
    )
}


def _buttons(visitor: Visitor, state: str) -> list[Control]:
    """The buttons this visitor may use on a schedule in ``state``: pause while active,
    resume while paused (an ended one is extended by an edit), trigger in any state."""
    shown = []
    if visitor.may_operate and state == "active":
        shown.append(CONTROLS["pause"])
    if visitor.may_operate and state == "paused":
        shown.append(CONTROLS["resume"])
    if visitor.may_trigger:
        shown.append(CONTROLS["trigger"])
    return shown


def _done_notice(
    done: str | None, occurrence_id: str | None, state: str, recent: list[dict[str, Any]]
) -> str | None:
    """What the page says after a button's redirect, only while it is still true."""
    if done == "paused" and state == "paused":
        return "Paused: no occurrence is generated until it is resumed; queued ones still run."
    if done == "resumed" and state == "active":
        return (
            "Resumed: occurrences are generated again; its missed policy decides the fire "
            "times it was paused over."
        )
    if done == "triggered" and occurrence_id:
        triggered = next((o for o in recent if o["id"] == occurrence_id), None)
        if triggered is not None:
            return (
                f"Triggered: occurrence {occurrence_id} at {utc_text(triggered['occurrence_at'])} "
                "is due now; what becomes of it is in the timeline and the decisions below."
            )
    return None


def _schedule_page(
    request: Request,
    edge: Edge,
    visitor: Visitor,
    schedule_id: str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    done: str | None = None,
    occurrence: str | None = None,
    notice: str | None = None,
    alert: str | None = None,
    retry_keys: dict[str, str] | None = None,
    retry_versions: dict[str, int] | None = None,
    status: int = 200,
) -> Response:
    """A schedule, its timeline, its buttons and a page of its decisions (``state`` and
    ``cursor`` as ``GET …/occurrences`` takes them)."""
    principal = visitor.principal
    view = schedules.get(edge.services, principal, schedule_id)
    now = _now(edge)
    window = _window(view, now)
    # Read by instant: a long history or a backfill of old instants costs nothing.
    recent, truncated = schedules.occurrences_since(
        edge.services, principal, schedule_id, now - window.span, TIMELINE_MARKS
    )
    filters = {"state": state or None}
    query = schedules.ListOccurrences(schedule_id, filters["state"], PAGE_SIZE, cursor)
    listed = schedules.list_occurrences(edge.services, principal, query)
    schedule_state = _schedule_state(view)
    context = _list_context("schedules", listed, filters, [s.value for s in StartState], cursor) | {
        "schedule": view,
        "state": schedule_state,
        "upcoming": _upcoming(view),
        "timeline": timeline.build(recent, now, window, truncated=truncated),
        "buttons": _buttons(visitor, schedule_state),
        "notice": notice or _done_notice(done, occurrence, schedule_state, recent),
        "alert": alert,
        "retry_keys": retry_keys or {},
        "retry_versions": retry_versions or {},
    }
    return _render(request, edge, "schedule.html", context, visitor, status)


@router.get("/t/{tenant}/schedules/{schedule_id}")
def schedule_page(
    tenant: str,
    schedule_id: str,
    request: Request,
    edge: EdgeDep,
    state: str | None = None,
    cursor: str | None = None,
    done: str | None = None,
    occurrence: str | None = None,
) -> Response:
    def build(visitor: Visitor) -> Response:
        return _schedule_page(
            request,
            edge,
            visitor,
            schedule_id,
            state=state,
            cursor=cursor,
            done=done,
            occurrence=occurrence,
        )

    return _page(request, edge, tenant, build)


def _form_version(form: dict[str, str]) -> int:
    value = form.get("version", "")
    # A stored version fits a 64-bit column: more digits than that is no version (and
    # ``int`` refuses strings of thousands of digits).
    if not value.isascii() or not value.isdigit() or len(value) > 18 or int(value) < 1:
        raise BadRequest("the form's schedule version is missing or malformed; reload the page")
    return int(value)


def _control_mutation(
    edge: Edge, principal: Principal, control: Control, schedule_id: str, version: int | None
) -> Mutation:
    """The use case the JSON route of ``control`` runs."""
    if control.name == "trigger":
        command = schedule_controls.TriggerSchedule(schedule_id)
        return schedule_controls.trigger(edge.services, principal, command)
    assert version is not None
    enabled = control.name == "resume"
    return schedules.set_enabled(edge.services, principal, schedule_id, version, enabled)


def _control(
    control: Control, tenant: str, schedule_id: str, request: Request, edge: Edge, raw: bytes
) -> Response:
    """Pause, resume or trigger under the key the form was rendered with (replayed if sent
    again), then back to the schedule's page (303) with what was done."""

    def build(visitor: Visitor) -> Response:
        form, key = _keyed_form(request, edge, raw, visitor)
        version = _form_version(form) if control.versioned else None
        principal = visitor.principal
        body = canonical_json({"version": version}) if version is not None else ""
        path = {"tenant": tenant, "schedule_id": schedule_id}
        claim = IdempotentRequest(
            principal.tenant,
            principal.subject,
            key,
            fingerprint_of("POST", control.route, path, [], body),
        )
        _serving(visitor, request, control.route_name, "schedule", schedule_id)
        mutation = mutations.in_order(
            principal,
            tenant,
            mutations.schedule(schedule_id),
            lambda: _control_mutation(edge, principal, control, schedule_id, version),
        )
        try:
            outcome = edge.mutations.run(claim, mutation)
        except RecordedError as recorded:
            code, message = _recorded_error(recorded)
            if code == "version_conflict" and version is not None:
                return _stale(request, edge, visitor, control, schedule_id, version)
            return _error_page(request, edge, visitor, recorded.status, code, message)
        except PunctualError as exc:
            if exc.code == "version_conflict" and version is not None:
                return _stale(request, edge, visitor, control, schedule_id, version)
            raise
        if outcome.status == 202:
            notice = (
                f"{control.label} is still being recorded; press {control.label} again "
                "to see the outcome."
            )
            return _schedule_page(
                request,
                edge,
                visitor,
                schedule_id,
                notice=notice,
                retry_keys={control.name: key},
                retry_versions={control.name: version} if version is not None else None,
                status=202,
            )
        return _redirect(_done_location(tenant, schedule_id, control, outcome))

    return _page(request, edge, tenant, build)


def _done_location(tenant: str, schedule_id: str, control: Control, outcome: Outcome) -> str:
    query = f"done={control.done}"
    if control.name == "trigger":
        query += f"&occurrence={segment(outcome.body['id'])}"
    return f"{PREFIX}/t/{segment(tenant)}/schedules/{segment(schedule_id)}?{query}"


def _stale(
    request: Request,
    edge: Edge,
    visitor: Visitor,
    control: Control,
    schedule_id: str,
    version: int,
) -> Response:
    """A form of an older version of the schedule: nothing was done; the schedule as it
    is now, with a clear word (409, as the API answers ``version_conflict``)."""
    alert = (
        f"Nothing was done: the schedule changed after this page showed it (at version "
        f"{version}). Here it is as it is now; press {control.label} again if that is "
        "still what you want."
    )
    return _schedule_page(request, edge, visitor, schedule_id, alert=alert, status=409)


@router.post("/t/{tenant}/schedules/{schedule_id}/pause")
def pause_schedule(
    tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return _control(CONTROLS["pause"], tenant, schedule_id, request, edge, raw)


@router.post("/t/{tenant}/schedules/{schedule_id}/resume")
def resume_schedule(
    tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return _control(CONTROLS["resume"], tenant, schedule_id, request, edge, raw)


@router.post("/t/{tenant}/schedules/{schedule_id}/trigger")
def trigger_schedule(
    tenant: str, schedule_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return _control(CONTROLS["trigger"], tenant, schedule_id, request, edge, raw)


def _list_context(
    section: str,
    listed: dict[str, Any],
    filters: dict[str, str | None],
    states: list[str],
    cursor: str | None,
) -> dict[str, Any]:
    """What a list page shows: a page of items, and its filter form as it was sent."""
    return {
        "section": section,
        "items": listed["items"],
        "next_cursor": listed["next_cursor"],
        "filters": filters,
        "states": states,
        "paged": cursor is not None,
    }


@router.get("/t/{tenant}/starts")
def starts_page(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    state: str | None = None,
    workflow: str | None = None,
    business_request_id: str | None = None,
    cursor: str | None = None,
) -> Response:
    filters = {
        "state": state or None,
        "workflow": workflow or None,
        "business_request_id": business_request_id or None,
    }

    def build(visitor: Visitor) -> Response:
        query = starts.ListStarts(limit=PAGE_SIZE, cursor=cursor, **filters)
        listed = starts.list_starts(edge.services, visitor.principal, query)
        states = ["scheduled", "dispatching", "dispatched", "failed", "canceled"]
        context = _list_context("starts", listed, filters, states, cursor)
        return _render(request, edge, "starts.html", context, visitor)

    return _page(request, edge, tenant, build)


@router.get("/t/{tenant}/starts/{start_id}")
def start_page(tenant: str, start_id: str, request: Request, edge: EdgeDep) -> Response:
    def build(visitor: Visitor) -> Response:
        view = starts.get(edge.services, visitor.principal, start_id)
        context = {"section": "starts", "start": view}
        return _render(request, edge, "start.html", context, visitor)

    return _page(request, edge, tenant, build)


@router.get("/t/{tenant}/runs")
def runs_page(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    state: str | None = None,
    workflow: str | None = None,
    cursor: str | None = None,
) -> Response:
    filters = {"state": state or None, "workflow": workflow or None}

    def build(visitor: Visitor) -> Response:
        query = runs.ListRuns(limit=PAGE_SIZE, cursor=cursor, **filters)
        listed = runs.list_runs(edge.services, visitor.principal, query)
        context = _list_context("runs", listed, filters, [s.value for s in RunState], cursor)
        return _render(request, edge, "runs.html", context, visitor)

    return _page(request, edge, tenant, build)


@router.get("/t/{tenant}/runs/{run_id}")
def run_page(tenant: str, run_id: str, request: Request, edge: EdgeDep) -> Response:
    def build(visitor: Visitor) -> Response:
        view = runs.get(edge.services, visitor.principal, run_id)
        context = {"section": "runs", "run": view}
        return _render(request, edge, "run.html", context, visitor)

    return _page(request, edge, tenant, build)


def _health_page(
    request: Request,
    edge: Edge,
    visitor: Visitor,
    *,
    notice: str | None = None,
    acknowledged: str | None = None,
    retry_keys: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    report = health.report(edge.services, visitor.principal)
    # Host-wide findings are in every tenant's report but get no button.
    host_findings = health.host_finding_ids(edge.services)
    if acknowledged and any(
        f["id"] == acknowledged and f["acknowledged"] for f in report["findings"]
    ):
        notice = f"Finding {acknowledged} is acknowledged."
    context = {
        "section": "health",
        "report": report,
        "notice": notice,
        "retry_keys": retry_keys or {},
        "host_findings": host_findings,
    }
    return _render(request, edge, "health.html", context, visitor, status)


@router.get("/t/{tenant}/health")
def health_page(
    tenant: str, request: Request, edge: EdgeDep, acknowledged: str | None = None
) -> Response:
    def build(visitor: Visitor) -> Response:
        return _health_page(request, edge, visitor, acknowledged=acknowledged)

    return _page(request, edge, tenant, build)


@router.post("/t/{tenant}/health/findings/{finding_id}/acknowledge")
def acknowledge_finding(
    tenant: str, finding_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    """Acknowledge under the key the form was rendered with (replayed if sent again)."""

    def build(visitor: Visitor) -> Response:
        _, key = _keyed_form(request, edge, raw, visitor)
        principal = visitor.principal
        path = {"tenant": tenant, "finding_id": finding_id}
        claim = IdempotentRequest(
            principal.tenant,
            principal.subject,
            key,
            fingerprint_of("POST", _ACKNOWLEDGE_ROUTE, path, [], ""),
        )
        _serving(visitor, request, "acknowledge_finding", "finding", finding_id)
        try:
            outcome = edge.mutations.run(
                claim, health.acknowledge(edge.services, principal, finding_id)
            )
        except RecordedError as recorded:
            code, message = _recorded_error(recorded)
            return _error_page(request, edge, visitor, recorded.status, code, message)
        if outcome.status == 202:
            return _health_page(
                request,
                edge,
                visitor,
                notice=f"Acknowledging finding {finding_id} is still being recorded; "
                "press Acknowledge again to see the outcome.",
                retry_keys={finding_id: key},
                status=202,
            )
        return _redirect(f"{PREFIX}/t/{segment(tenant)}/health?acknowledged={segment(finding_id)}")

    return _page(request, edge, tenant, build)


@router.get("/{rest:path}")
def unknown_page(rest: str, request: Request, edge: EdgeDep) -> Response:
    """Unknown pages: the sign-in form without a session, a page of its own with one."""
    del rest

    def build(visitor: Visitor) -> Response:
        raise NotFound("There is no such page.")

    return _page(request, edge, None, build)
