"""Every list's order, paging and filters through HTTP, on both stores (API.md "Lists").

Each tenant list answers newest first by default and oldest first with ``order=oldest``;
paging 2 at a time gives every item once, in order, both ways; a cursor keeps the order of
its page (without ``order`` the next page follows it, a contradicting ``order`` is
``422 invalid_cursor``), and a cursor made before lists took an order (``seq:N``) still
pages the way its list did then. Also: the runs' ``schedule_id`` and ``origin`` filters,
the occurrences' ``origin``, ``from`` and ``to``, the admins' members list, and the
health report's window of failed starts (the latest).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap, resources
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.webhooks import HttpWebhookSender, default_allowed_cidrs
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.ports.records import CursorMove
from punctual.usecases.outbound.outbox import NotificationEvent, notify
from punctual.usecases.recurring.generation import generate
from punctual.usecases.running.definitions import set_lifecycle
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.api.test_openapi import exactly
from tests.support.api import Api, echo_start, in_process, live_worker, member_api

TENANT = "acme"
MINUTE = timedelta(minutes=1)


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    live_worker(system)
    # Webhooks to loopback, as the local profile allows (nothing is delivered here).
    system.services.webhooks = HttpWebhookSender(default_allowed_cidrs("local"))
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


def ok(response: Any) -> Any:
    assert response.status_code in (200, 201, 202), response.text
    return response.json()


def z(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def schedule(api: Api, name: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "workflow": "echo",
        "input": {"message": name},
        "spec": {"interval_ms": 60_000},
        "overlap": "allow_all",
        "missed": "skip",
        **fields,
    }
    created: dict[str, Any] = ok(api.post("/schedules", body))
    return created


def cursor_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def error_of(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# --------------------------------------------------------------------------- the lists


@dataclass(frozen=True)
class Listed:
    """A list with five items made for the test, their keys in the order they were made."""

    path: str
    made: list[str]
    key: str = "id"
    params: dict[str, Any] = field(default_factory=dict)


def five_starts(system: bootstrap.Punctual, api: Api) -> Listed:
    made = [ok(api.post("/scheduled-starts", echo_start()))["id"] for _ in range(5)]
    return Listed("/scheduled-starts", made)


def five_runs(system: bootstrap.Punctual, api: Api) -> Listed:
    made = []
    for n in range(5):
        start = ok(api.create_due(echo_start(business_request_id=f"run-{n}")))
        dispatch_due(system.services, "runner-lists", 10)
        made.append(ok(api.get(f"/scheduled-starts/{start['id']}"))["dispatch"]["run_id"])
    return Listed("/runs", made)


def five_schedules(system: bootstrap.Punctual, api: Api) -> Listed:
    return Listed("/schedules", [schedule(api, f"every-{n}")["id"] for n in range(5)])


def five_occurrences(system: bootstrap.Punctual, api: Api) -> Listed:
    sid = schedule(api, "triggered", enabled=False)["id"]
    made = [ok(api.post(f"/schedules/{sid}/trigger"))["id"] for _ in range(5)]
    return Listed(f"/schedules/{sid}/occurrences", made)


def five_notifications(system: bootstrap.Punctual, api: Api) -> Listed:
    titles = [f"note-{n}" for n in range(5)]
    for title in titles:
        event = NotificationEvent(tenant=TENANT, kind="regression", title=title, text=title)
        with system.store.transaction() as tx:
            notify(system.services, tx, event, "root", system.services.clock.now())
    return Listed("/notifications", titles, key="title")


def five_holds(system: bootstrap.Punctual, api: Api) -> Listed:
    body = {"subject_kind": "tenant", "reason": "audit"}
    return Listed("/holds", [ok(api.post("/holds", body))["id"] for _ in range(5)])


def five_audit_entries(system: bootstrap.Punctual, api: Api) -> Listed:
    made = five_holds(system, api).made
    return Listed("/audit", made, key="subject_id", params={"actor": "root"})


def five_webhooks(system: bootstrap.Punctual, api: Api) -> Listed:
    made = [ok(api.post("/webhooks", {"url": f"http://127.0.0.1:9/{n}"}))["id"] for n in range(5)]
    return Listed("/webhooks", made)


def five_deliveries(system: bootstrap.Punctual, api: Api) -> Listed:
    hook = ok(api.post("/webhooks", {"url": "http://127.0.0.1:9/hook"}))["id"]
    made = [ok(api.post(f"/webhooks/{hook}/test"))["delivery_id"] for _ in range(5)]
    return Listed(f"/webhooks/{hook}/deliveries", made)


def five_tokens(system: bootstrap.Punctual, api: Api) -> Listed:
    return Listed("/tokens", [ok(api.post("/tokens", {"subject": "root"}))["id"] for _ in range(5)])


def five_members(system: bootstrap.Punctual, api: Api) -> Listed:
    made = [f"m-{n}" for n in range(5)]
    for subject in made:
        ok(api.post("/members", {"subject": subject, "role": "viewer"}))
    return Listed("/members", made, key="subject")


LISTS: dict[str, Callable[[bootstrap.Punctual, Api], Listed]] = {
    "starts": five_starts,
    "runs": five_runs,
    "schedules": five_schedules,
    "occurrences": five_occurrences,
    "notifications": five_notifications,
    "holds": five_holds,
    "audit": five_audit_entries,
    "webhooks": five_webhooks,
    "deliveries": five_deliveries,
    "tokens": five_tokens,
    "members": five_members,
}


def keys(api: Api, listed: Listed, **params: Any) -> tuple[list[str], str | None]:
    page = ok(api.get(listed.path, **listed.params, **params))
    return [item[listed.key] for item in page["items"]], page["next_cursor"]


def walk(api: Api, listed: Listed, first: dict[str, Any], then: dict[str, Any]) -> list[str]:
    """Every page, 2 items at a time: the first page with ``first``, the next ones with
    ``then`` and the cursor."""
    seen, cursor = keys(api, listed, limit=2, **first)
    pages = 1
    while cursor is not None:
        assert pages < 10, "paging must end"
        more, cursor = keys(api, listed, limit=2, cursor=cursor, **then)
        assert 1 <= len(more) <= 2
        seen += more
        pages += 1
    return seen


@pytest.mark.parametrize("name", list(LISTS))
def test_every_list_is_newest_first_and_pages_either_way(
    system: bootstrap.Punctual, admin: Api, name: str
) -> None:
    listed = LISTS[name](system, admin)
    oldest, _ = keys(admin, listed, limit=100, order="oldest")
    assert [key for key in oldest if key in listed.made] == listed.made
    newest, _ = keys(admin, listed, limit=100)
    assert newest == oldest[::-1]
    assert keys(admin, listed, limit=100, order="newest")[0] == newest

    assert walk(admin, listed, {}, {}) == newest
    assert walk(admin, listed, {"order": "oldest"}, {"order": "oldest"}) == oldest
    # A cursor alone pages on in its own order.
    assert walk(admin, listed, {"order": "oldest"}, {}) == oldest
    assert walk(admin, listed, {"order": "newest"}, {}) == newest


@pytest.mark.parametrize("name", list(LISTS))
def test_a_bad_order_and_an_order_against_its_cursor_are_422(
    system: bootstrap.Punctual, admin: Api, name: str
) -> None:
    listed = LISTS[name](system, admin)
    bad = admin.get(listed.path, **listed.params, order="latest")
    assert error_of(bad) == (422, "validation_error")
    [problem] = bad.json()["error"]["details"]["errors"]
    assert problem["loc"] == ["query", "order"]

    _, oldest_cursor = keys(admin, listed, limit=2, order="oldest")
    _, newest_cursor = keys(admin, listed, limit=2)
    assert oldest_cursor is not None and newest_cursor is not None
    turned = admin.get(listed.path, **listed.params, cursor=oldest_cursor, order="newest")
    assert error_of(turned) == (422, "invalid_cursor")
    assert "order=oldest" in turned.json()["error"]["message"]
    turned = admin.get(listed.path, **listed.params, cursor=newest_cursor, order="oldest")
    assert error_of(turned) == (422, "invalid_cursor")


def test_a_tampered_cursor_is_refused_and_an_unknown_schedule_is_404_first(
    system: bootstrap.Punctual, admin: Api
) -> None:
    listed = LISTS["occurrences"](system, admin)
    _, cursor = keys(admin, listed, limit=2)
    assert cursor is not None
    tampered = admin.get(listed.path, **listed.params, cursor=f"!!{cursor}!!")
    assert error_of(tampered) == (422, "invalid_cursor")
    unknown = admin.get("/schedules/sch_0123456789abcdef01234567/occurrences", cursor="!!")
    assert error_of(unknown) == (404, "not_found"), "existence is judged before the query"


def _seq_of(system: bootstrap.Punctual, table: sa.Table, row_id: str) -> int:
    with system.store.engine.connect() as conn:
        seq: int = conn.execute(sa.select(table.c.seq).where(table.c.id == row_id)).scalar_one()
    return seq


def test_a_cursor_made_before_lists_took_an_order_pages_as_its_list_did(
    system: bootstrap.Punctual, admin: Api
) -> None:
    """``seq:N`` cursors: oldest first where the list was (starts), newest first where it
    already was (holds); an ``order`` that contradicts that is ``422 invalid_cursor``."""
    starts = five_starts(system, admin)
    old_style = cursor_of(f"seq:{_seq_of(system, t.starts, starts.made[1])}")
    rest, cursor = keys(admin, starts, cursor=old_style)
    assert (rest, cursor) == (starts.made[2:], None)
    assert keys(admin, starts, cursor=old_style, order="oldest")[0] == starts.made[2:]
    wrong = admin.get("/scheduled-starts", cursor=old_style, order="newest")
    assert error_of(wrong) == (422, "invalid_cursor")

    holds = five_holds(system, admin)
    old_style = cursor_of(f"seq:{_seq_of(system, t.holds, holds.made[3])}")
    assert keys(admin, holds, cursor=old_style)[0] == holds.made[2::-1]
    assert keys(admin, holds, cursor=old_style, order="newest")[0] == holds.made[2::-1]
    wrong = admin.get("/holds", cursor=old_style, order="oldest")
    assert error_of(wrong) == (422, "invalid_cursor")


@pytest.mark.parametrize(
    "cursor",
    [cursor_of("newest:abc"), cursor_of("oldest:"), cursor_of("sideways:3"), cursor_of("7")],
)
def test_a_cursor_the_api_did_not_make_is_invalid(admin: Api, cursor: str) -> None:
    assert error_of(admin.get("/runs", cursor=cursor)) == (422, "invalid_cursor")
    assert error_of(admin.get("/members", cursor=cursor)) == (422, "invalid_cursor")


# --------------------------------------------------------------------------- filters


def test_runs_filter_by_schedule_and_by_origin(system: bootstrap.Punctual, admin: Api) -> None:
    nightly = schedule(admin, "nightly", enabled=False)
    hourly = schedule(admin, "hourly", enabled=False)
    occurrence = ok(admin.post(f"/schedules/{nightly['id']}/trigger"))
    ok(admin.post(f"/schedules/{hourly['id']}/trigger"))
    start = ok(admin.create_due(echo_start()))
    dispatch_due(system.services, "runner-filters", 10)
    runs = ok(admin.get("/runs", limit=100))["items"]
    by_origin = {run["origin"]["id"]: run["id"] for run in runs}
    assert len(by_origin) == 3
    one_off, of_nightly = by_origin[start["id"]], by_origin[occurrence["id"]]

    def ids(**params: Any) -> list[str]:
        return [run["id"] for run in ok(admin.get("/runs", **params))["items"]]

    assert ids(schedule_id=nightly["id"]) == [of_nightly]
    assert ids(schedule_id="sch_unknown") == []
    assert ids(origin="scheduled_start") == [one_off]
    assert set(ids(origin="schedule")) == set(by_origin.values()) - {one_off}
    assert ids(origin="schedule", schedule_id=nightly["id"]) == [of_nightly]
    assert ids(origin="scheduled_start", schedule_id=nightly["id"]) == []
    # Any other value is an origin's id, as origin_id (which keeps working).
    assert ids(origin=start["id"]) == ids(origin_id=start["id"]) == [one_off]
    assert ids(origin=occurrence["id"]) == [of_nightly]
    assert ids(origin=start["id"], origin_id=start["id"]) == [one_off]
    assert ids(origin=start["id"], origin_id=occurrence["id"]) == []


def test_starts_filter_by_business_request_id_newest_first(admin: Api) -> None:
    made = [
        ok(admin.post("/scheduled-starts", echo_start(business_request_id=brid)))["id"]
        for brid in ("appt-1", "appt-2", "appt-1")
    ]
    page = ok(admin.get("/scheduled-starts", business_request_id="appt-1"))
    assert [item["id"] for item in page["items"]] == [made[2], made[0]]
    page = ok(admin.get("/scheduled-starts", business_request_id="appt-1", order="oldest"))
    assert [item["id"] for item in page["items"]] == [made[0], made[2]]


def test_occurrences_filter_by_origin_and_by_from_and_to(
    system: bootstrap.Punctual, admin: Api
) -> None:
    first = datetime.now(UTC).replace(second=0, microsecond=0) - 60 * MINUTE
    sid = schedule(admin, "filtered", spec={"interval_ms": 60_000, "starts_at": z(first)})["id"]
    path = f"/schedules/{sid}/occurrences"
    # As after downtime: the fires of the last half hour are missed, one skipped range.
    with system.store.transaction() as tx:
        tx.schedules.move_cursors([CursorMove(sid, first + 29 * MINUTE, first + 30 * MINUTE)])
    generate(system.services, 100)
    spec_own = ok(admin.get(path, limit=100, order="oldest"))["items"]
    assert {o["origin"] for o in spec_own} == {"schedule"}
    missed = next(o for o in spec_own if "range" in o)
    assert missed["range"]["count"] >= 2
    backfill = {"from": z(first + 5 * MINUTE), "to": z(first + 8 * MINUTE)}
    backfilled = ok(admin.post(f"/schedules/{sid}/backfill", backfill))["items"]
    assert [datetime.fromisoformat(o["occurrence_at"]) for o in backfilled] == [
        first + n * MINUTE for n in (6, 7, 8)
    ]
    triggered = ok(admin.post(f"/schedules/{sid}/trigger"))

    def ids(**params: Any) -> list[str]:
        page = ok(admin.get(path, limit=100, **params))
        return [exactly(resources.Occurrence, o).id for o in page["items"]]

    assert ids(origin="trigger") == [triggered["id"]]
    assert ids(origin="backfill") == [o["id"] for o in reversed(backfilled)]
    assert ids(origin="schedule") == [o["id"] for o in reversed(spec_own)]
    # [from, to) over the instant: the backfilled fires at 6 and 7 minutes, not 8.
    window = {"from": z(first + 6 * MINUTE), "to": z(first + 8 * MINUTE)}
    assert ids(**window) == [o["id"] for o in reversed(backfilled[:2])]
    assert ids(**window, order="oldest") == [o["id"] for o in backfilled[:2]]
    assert ids(**window, origin="schedule") == []
    assert ids(to=z(first + 7 * MINUTE)) == [backfilled[0]["id"]]
    assert ids(**{"from": triggered["occurrence_at"]}) == [triggered["id"]]
    # A skipped range counts when any of its instants is in the window, its first or not.
    range_first = datetime.fromisoformat(missed["range"]["first"])
    inside = {"from": z(range_first + MINUTE / 2), "to": z(range_first + 3 * MINUTE / 2)}
    assert ids(**inside) == [missed["id"]]

    for params, loc in (
        ({"origin": "manual"}, "origin"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-01-01T00:00:00"}, "to"),
        ({"from": z(first), "to": z(first)}, "from"),
    ):
        refused = admin.get(path, **params)
        assert error_of(refused) == (422, "validation_error"), params
        assert refused.json()["error"]["details"]["errors"][0]["loc"] == ["query", loc]


# --------------------------------------------------------------------------- members


def test_the_members_list_is_for_admins(
    system: bootstrap.Punctual, client: TestClient, admin: Api
) -> None:
    ok(admin.post("/members", {"subject": "bob", "role": "member"}))
    ok(admin.post("/members", {"subject": "bob", "role": "viewer"}))  # keeps its place
    page = ok(admin.get("/members"))
    members = [exactly(resources.Member, item) for item in page["items"]]
    assert [(m.subject, m.role, m.tenant) for m in members] == [
        ("bob", "viewer", TENANT),
        ("root", "admin", TENANT),
    ]
    assert all(m.created_at is not None for m in members)
    exactly(resources.MemberPage, page)
    for role in (Role.MEMBER, Role.VIEWER):
        other = member_api(system, client, TENANT, f"a-{role.value}", role)
        assert error_of(other.get("/members")) == (403, "forbidden")
        # The request is checked before the role (API.md "Conventions").
        assert error_of(other.get("/members", order="up")) == (422, "validation_error")
    stranger = member_api(system, client, "globex", "root", Role.ADMIN)
    assert [m["subject"] for m in ok(stranger.get("/members"))["items"]] == ["root"]
    elsewhere = Api(client, stranger.token, TENANT)
    assert error_of(elsewhere.get("/members")) == (404, "not_found")


def test_health_shows_the_latest_failed_starts_first(
    system: bootstrap.Punctual, admin: Api
) -> None:
    made = [ok(admin.create_due(echo_start(business_request_id=f"f-{n}")))["id"] for n in range(3)]
    # The cause: the workflow lost its active version before the starts came due.
    set_lifecycle(system.services, "echo", "1", DefinitionState.DEPRECATED)
    dispatch_due(system.services, "runner-health", 10)
    report = ok(admin.get("/health"))
    assert report["starts"]["failed_count"] == 3
    assert [start["id"] for start in report["starts"]["failed"]] == made[::-1]
