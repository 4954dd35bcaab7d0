"""A schedule's page over HTTP, without a browser: its buttons (pause, resume, run now) and
who sees them, the forms' CSRF token, idempotency key and version, the decisions table's
origin, regression numbers and state filter, and the filters and paging of the lists."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.http.ui import routes
from punctual.adapters.stores.sql import tables
from punctual.domain.permissions import Principal, Role
from punctual.ports.records import FollowThroughRecord
from punctual.usecases.kernel import audit
from punctual.usecases.recurring.generation import generate
from tests.conftest import FakeClock, make_settings
from tests.support.api import echo_start, in_process
from tests.support.ui import Forms, Ui, make_ui

PAGE = "/ui/t/acme/schedules/{id}"


@pytest.fixture
def ui(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        with in_process(system) as client:
            yield make_ui(system, client)
    finally:
        system.close()


def schedule(ui: Ui, **fields: Any) -> dict[str, Any]:
    body = {
        "name": "nightly",
        "workflow": "echo",
        "input": {"message": "hi"},
        "spec": {"interval_ms": 3_600_000},
        "overlap": "skip",
        "missed": "skip",
    } | fields
    created = ui.api(ui.member).post("/schedules", body)
    assert created.status_code == 201, created.text
    made: dict[str, Any] = created.json()
    return made


def page_of(ui: Ui, schedule_id: str, **params: str) -> httpx.Response:
    response = ui.client.get(PAGE.format(id=schedule_id), params=params)
    assert response.status_code == 200, response.text
    return response


def action(schedule_id: str, name: str) -> str:
    return PAGE.format(id=schedule_id) + "/" + name


def controls(html: str, schedule_id: str) -> dict[str, dict[str, str]]:
    """The page's button forms for this schedule, by name (pause, resume, trigger)."""
    prefix = PAGE.format(id=schedule_id) + "/"
    return {a.removeprefix(prefix): f for a, f in Forms(html).forms.items() if a.startswith(prefix)}


def stored(ui: Ui, schedule_id: str) -> dict[str, Any]:
    view: dict[str, Any] = ui.api().get(f"/schedules/{schedule_id}").json()
    return view


def occurrences(ui: Ui, schedule_id: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (
        ui.api().get(f"/schedules/{schedule_id}/occurrences", limit=100, **params).json()["items"]
    )
    return items


def test_a_member_pauses_resumes_and_runs_a_schedule_now_each_once(ui: Ui) -> None:
    made = schedule(ui)
    sid = made["id"]
    ui.sign_in(ui.member)
    forms = controls(page_of(ui, sid).text, sid)
    assert set(forms) == {"pause", "trigger"}, "an active schedule can be paused, not resumed"
    assert forms["pause"]["version"] == str(made["version"])
    assert "version" not in forms["trigger"], "a trigger leaves the version alone"

    paused = ui.client.post(action(sid, "pause"), data=forms["pause"], follow_redirects=False)
    assert paused.status_code == 303
    assert paused.headers["location"] == f"{PAGE.format(id=sid)}?done=paused"
    shown = ui.client.get(paused.headers["location"]).text
    assert "Paused: no occurrence is generated" in shown
    assert stored(ui, sid)["state"] == "paused"
    version = stored(ui, sid)["version"]
    # The same form again replays the decision: no second edit, the same redirect.
    again = ui.client.post(action(sid, "pause"), data=forms["pause"], follow_redirects=False)
    assert (again.status_code, again.headers["location"]) == (303, paused.headers["location"])
    assert stored(ui, sid)["version"] == version == made["version"] + 1

    forms = controls(shown, sid)
    assert set(forms) == {"resume", "trigger"}, "a paused schedule can be resumed, not paused"
    resumed = ui.client.post(action(sid, "resume"), data=forms["resume"], follow_redirects=False)
    assert resumed.headers["location"] == f"{PAGE.format(id=sid)}?done=resumed"
    assert (
        "Resumed: occurrences are generated again"
        in ui.client.get(resumed.headers["location"]).text
    )
    assert stored(ui, sid)["state"] == "active"

    trigger = controls(ui.client.get(PAGE.format(id=sid)).text, sid)["trigger"]
    triggered = ui.client.post(action(sid, "trigger"), data=trigger, follow_redirects=False)
    assert triggered.status_code == 303
    made_now = [o for o in occurrences(ui, sid) if o["origin"] == "trigger"]
    assert len(made_now) == 1
    occurrence_id = made_now[0]["id"]
    assert triggered.headers["location"] == (
        f"{PAGE.format(id=sid)}?done=triggered&occurrence={occurrence_id}"
    )
    shown = ui.client.get(triggered.headers["location"]).text
    assert f"Triggered: occurrence {occurrence_id}" in shown
    row = re.search(rf'<tr data-occurrence-id="{occurrence_id}"[^>]*data-origin="trigger"', shown)
    assert row, "the new occurrence is in the decisions table with its origin"
    replayed = ui.client.post(action(sid, "trigger"), data=trigger, follow_redirects=False)
    assert replayed.headers["location"] == triggered.headers["location"]
    assert [o["id"] for o in occurrences(ui, sid) if o["origin"] == "trigger"] == [occurrence_id]

    # Each button is in the audit log once, named as the JSON route names it.
    admin = Principal("acme", "ada", Role.ADMIN)
    entries = audit.list_entries(ui.system.services, admin, audit.ListAudit(actor="mia"))["items"]
    done = sorted((e["action"], e["path"]) for e in entries if e["path"].startswith("/ui/"))
    assert done == sorted(
        [
            ("pause_schedule", action(sid, "pause")),
            ("resume_schedule", action(sid, "resume")),
            ("trigger_schedule", action(sid, "trigger")),
        ]
    )


def test_a_button_needs_the_forms_csrf_token(ui: Ui) -> None:
    sid = schedule(ui)["id"]
    ui.sign_in(ui.member)
    forms = controls(page_of(ui, sid).text, sid)
    other = TestClient(ui.system.http_app())
    other_form = Forms(other.get("/ui/").text).forms["/ui/sign-in"]
    other.post("/ui/sign-in", data={**other_form, "token": ui.admin})
    other_token = controls(other.get(PAGE.format(id=sid)).text, sid)["pause"]["csrf_token"]
    for name in ("pause", "trigger"):
        for why, csrf in (
            ("missing", None),
            ("wrong", "k1.d3Jvbmc"),
            ("the sign-in form's", other_form["csrf_token"]),
            ("another session's", other_token),
        ):
            data = {k: v for k, v in forms[name].items() if k != "csrf_token"}
            if csrf is not None:
                data["csrf_token"] = csrf
            response = ui.client.post(action(sid, name), data=data, follow_redirects=False)
            assert response.status_code == 403, (name, why)
            assert "csrf_token_invalid" in response.text, (name, why)
    assert stored(ui, sid)["state"] == "active"
    assert all(o["origin"] != "trigger" for o in occurrences(ui, sid))


def test_a_viewer_sees_no_button_and_is_refused_when_posting_anyway(ui: Ui) -> None:
    sid = schedule(ui)["id"]
    ui.sign_in(ui.viewer)
    html = page_of(ui, sid).text
    assert controls(html, sid) == {}
    assert Forms(html).buttons == ["Sign out", "Filter"], "a viewer may sign out and filter"
    token = Forms(html).forms["/ui/sign-out"]["csrf_token"]
    version = str(stored(ui, sid)["version"])
    for name in ("pause", "resume", "trigger"):
        data = {"csrf_token": token, "idempotency_key": f"viewer-{name}", "version": version}
        response = ui.client.post(action(sid, name), data=data, follow_redirects=False)
        assert response.status_code == 403, name
        assert "forbidden" in response.text, name
    assert stored(ui, sid)["state"] == "active"
    assert all(o["origin"] != "trigger" for o in occurrences(ui, sid))


def test_a_stale_page_says_the_schedule_changed_and_does_nothing(ui: Ui) -> None:
    made = schedule(ui)
    sid = made["id"]
    ui.sign_in(ui.member)
    stale = controls(page_of(ui, sid).text, sid)["pause"]
    # Someone else pauses and resumes it meanwhile: the page's version is behind.
    api = ui.api(ui.admin)
    assert api.post(f"/schedules/{sid}/pause", {"version": made["version"]}).status_code == 200
    assert api.post(f"/schedules/{sid}/resume", {"version": made["version"] + 1}).status_code == 200
    for attempt in ("first", "replayed"):
        response = ui.client.post(action(sid, "pause"), data=stale, follow_redirects=False)
        assert response.status_code == 409, attempt
        assert "Nothing was done: the schedule changed after this page showed it" in response.text
        assert f"(at version {made['version']})" in response.text
        fresh = controls(response.text, sid)["pause"]
        assert fresh["version"] == str(made["version"] + 2), "the page shows it as it is now"
        assert fresh["idempotency_key"] != stale["idempotency_key"]
    assert stored(ui, sid)["state"] == "active"
    assert stored(ui, sid)["version"] == made["version"] + 2
    # The fresh form acts.
    fresh_pause = ui.client.post(action(sid, "pause"), data=fresh, follow_redirects=False)
    assert fresh_pause.status_code == 303
    assert stored(ui, sid)["state"] == "paused"


def test_a_missing_or_malformed_version_or_key_is_refused(ui: Ui) -> None:
    sid = schedule(ui)["id"]
    ui.sign_in(ui.member)
    form = controls(page_of(ui, sid).text, sid)["pause"]
    too_long = "1" + "0" * 5000  # more digits than ``int`` parses, and than a version has
    malformed = ("", "two", "0", "-1", "9" * 30, too_long)
    for changes in ({"version": value} for value in malformed):
        response = ui.client.post(action(sid, "pause"), data=form | changes, follow_redirects=False)
        assert response.status_code == 400, changes
        assert "reload the page" in response.text
    without = {k: v for k, v in form.items() if k != "version"}
    assert ui.client.post(action(sid, "pause"), data=without).status_code == 400
    bad_key = ui.client.post(action(sid, "pause"), data=form | {"idempotency_key": "a b"})
    assert bad_key.status_code == 400
    assert "idempotency_key_required" in bad_key.text
    missing = ui.client.post(action("sch_missing", "pause"), data=form, follow_redirects=False)
    assert missing.status_code == 404
    assert stored(ui, sid)["state"] == "active"


def test_the_decisions_table_shows_origin_and_regression_numbers(
    sqlite_url: str, tmp_path: Path
) -> None:
    clock = FakeClock(datetime(2026, 5, 4, 12, 0, tzinfo=UTC))
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            made = schedule(
                ui,
                spec={"interval_ms": 60_000, "starts_at": "2026-05-04T12:01:00Z"},
                regression={
                    "metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.05}]
                },
            )
            sid = made["id"]
            clock.current = datetime(2026, 5, 4, 12, 5, 30, tzinfo=UTC)
            generate(system.services, 100)
            api = ui.api(ui.member)
            backfilled = api.post(
                f"/schedules/{sid}/backfill",
                {"from": "2026-05-04T12:00:00Z", "to": "2026-05-04T12:03:00Z"},
            )
            assert backfilled.status_code == 200, backfilled.text
            assert backfilled.json()["generated"] >= 1
            triggered = api.post(f"/schedules/{sid}/trigger")
            assert triggered.status_code == 201, triggered.text
            regressed = triggered.json()["id"]
            with system.store.transaction() as tx:
                tx.follow_through.record(
                    [
                        FollowThroughRecord(
                            occurrence_id=regressed,
                            tenant="acme",
                            schedule_id=sid,
                            run_id="run_now",
                            status="regressed",
                            reason=None,
                            previous_run_id="run_before",
                            regressions=[
                                {
                                    "path": "metrics.score",
                                    "previous": 0.9,
                                    "current": 0.5,
                                    "better": "higher",
                                    "tolerance": 0.05,
                                }
                            ],
                            recorded_at=clock.now(),
                        )
                    ]
                )
            ui.sign_in(ui.member)
            html = page_of(ui, sid).text
            origins = dict(
                re.findall(r'data-occurrence-id="([^"]+)"[^>]*data-origin="([a-z]+)"', html)
            )
            assert set(origins.values()) == {"schedule", "backfill", "trigger"}
            assert origins[regressed] == "trigger"
            row = html[html.index(f'<tr data-occurrence-id="{regressed}"') :]
            row = row[: row.index("</tr>")]
            assert "<td>trigger</td>" in row
            assert "<code>metrics.score</code>: 0.9 → 0.5" in row
            assert "higher is better, tolerance 0.05" in row
            assert "/ui/t/acme/runs/run_before" in row, "the baseline run is linked"
            assert "<td>scheduled</td>" in html and "<td>backfill</td>" in html

            # The state filter narrows the table to what GET …/occurrences?state= lists.
            filtered = page_of(ui, sid, state="scheduled").text
            listed = {o["id"] for o in occurrences(ui, sid, state="scheduled")}
            shown = set(re.findall(r'<tr data-occurrence-id="([^"]+)"', filtered))
            assert shown == listed and listed, "only the scheduled occurrences"
            assert len(shown) < len(origins), "fewer than all of them"
            assert '<option value="scheduled" selected>' in filtered
            bad = ui.client.get(PAGE.format(id=sid), params={"state": "exploded"})
            assert bad.status_code == 422, "a state the API refuses is its 422, as a page"
            assert bad.headers["content-type"].startswith("text/html")
    finally:
        system.close()


def test_the_timeline_window_follows_the_schedules_rhythm(sqlite_url: str, tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 5, 4, 12, 0, tzinfo=UTC))
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            every_second = schedule(ui, name="fast", spec={"interval_ms": 1000})["id"]
            daily = schedule(
                ui, name="daily", spec={"cron": "0 6 * * *", "time_zone": "Europe/Berlin"}
            )["id"]
            for _ in range(45):
                clock.advance(1)
                generate(system.services, 100)
            ui.sign_in(ui.member)
            fast = page_of(ui, every_second).text
            assert "Timeline of the last 30 seconds" in fast
            assert 'data-window-seconds="30"' in fast
            assert "a tick every 5 seconds" in fast
            xs = re.findall(
                r'<g class="mark" data-lane="decision"[^>]*transform="translate\(([0-9.]+) ', fast
            )
            assert len(xs) >= 25, "about thirty marks, one a second"
            assert len(set(xs)) == len(xs), "no two marks at one x position"
            slow = page_of(ui, daily).text
            assert "Timeline of the last 30 days" in slow
            assert "a tick every 7 days" in slow
    finally:
        system.close()


def test_filters_narrow_the_lists_and_paging_keeps_them(
    ui: Ui, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = ui.api(ui.member)
    for n in range(3):
        assert (
            api.post("/scheduled-starts", echo_start(business_request_id=f"e-{n}")).status_code
            == 201
        )
    other = echo_start(workflow="score", input={"score": 1}, business_request_id="s-0")
    assert api.post("/scheduled-starts", other).status_code == 201, "another workflow"
    monkeypatch.setattr(routes, "PAGE_SIZE", 2)
    ui.sign_in(ui.member)
    first = ui.client.get("/ui/t/acme/starts", params={"workflow": "echo", "state": "scheduled"})
    assert first.status_code == 200
    assert 'value="echo"' in first.text, "the form shows the filter it was sent"
    rows = re.findall(r'<tr data-start-id="([^"]+)"', first.text)
    assert len(rows) == 2
    link = re.search(r'<a href="([^"]+)">Next page</a>', first.text)
    assert link, "a next page"
    href = link.group(1).replace("&amp;", "&")
    assert "workflow=echo" in href and "state=scheduled" in href and "cursor=" in href
    second = ui.client.get(href)
    rest = re.findall(r'<tr data-start-id="([^"]+)"', second.text)
    assert len(rest) == 1 and not set(rest) & set(rows)
    assert "s-0" not in first.text + second.text, "the score start is filtered out"
    back = re.search(r'<a href="([^"]+)">First page</a>', second.text)
    assert back and back.group(1).replace("&amp;", "&") == (
        "/ui/t/acme/starts?state=scheduled&workflow=echo"
    )


def test_an_undecided_button_answers_202_and_the_same_form_learns_the_outcome(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Past the bounded wait the page says so and renders the button with the key it was
    sent with, so pressing it again asks for the same decision (OS-7)."""
    system = bootstrap.build(make_settings(sqlite_url, tmp_path, api_wait_seconds=1))
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            sid = schedule(ui)["id"]
            ui.sign_in(ui.member)
            form = controls(page_of(ui, sid).text, sid)["pause"]
            holder = system.store.engine.connect()
            holder.info["readonly"] = False
            holder.begin()
            holder.execute(
                sa.update(tables.schedules)
                .where(tables.schedules.c.id == sid)
                .values(updated_at=tables.schedules.c.updated_at)
            )
            try:
                waiting = ui.client.post(action(sid, "pause"), data=form, follow_redirects=False)
                assert waiting.status_code == 202
                assert "Pause is still being recorded; press Pause again" in waiting.text
                retry = controls(waiting.text, sid)["pause"]
                assert retry["idempotency_key"] == form["idempotency_key"]
                assert retry["version"] == form["version"], "the retry is the same request"
            finally:
                holder.commit()
                holder.close()
            deadline = time.monotonic() + 10
            while True:
                again = ui.client.post(action(sid, "pause"), data=retry, follow_redirects=False)
                if again.status_code != 202 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert again.status_code == 303
            assert stored(ui, sid)["state"] == "paused"
            assert stored(ui, sid)["version"] == 2, "decided once"
    finally:
        system.close()


@pytest.mark.parametrize(
    "regressions",
    [["metrics.score fell"], {"metrics.score": 0.5}, [{"path": "metrics.score"}]],
    ids=["text", "mapping", "no-numbers"],
)
def test_a_follow_through_of_another_shape_still_renders(
    sqlite_url: str, tmp_path: Path, regressions: Any
) -> None:
    """Rows written by an older release, or by hand, are shown as far as they can be: the
    page never fails on them."""
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            sid = schedule(ui)["id"]
            occurrence = ui.api(ui.member).post(f"/schedules/{sid}/trigger").json()["id"]
            record = FollowThroughRecord(
                occurrence_id=occurrence,
                tenant="acme",
                schedule_id=sid,
                run_id="run_now",
                status="regressed",
                reason=None,
                previous_run_id=None,
                regressions=regressions,
                recorded_at=datetime.now(UTC),
            )
            with system.store.transaction() as tx:
                tx.follow_through.record([record])
            ui.sign_in(ui.member)
            html = page_of(ui, sid).text
            row = html[html.index(f'<tr data-occurrence-id="{occurrence}"') :]
            row = row[: row.index("</tr>")]
            assert "regressed" in row
            assert "None" not in row
            if regressions == [{"path": "metrics.score"}]:
                assert "<code>metrics.score</code>: — → —" in row
    finally:
        system.close()


def drawn(html: str) -> set[str]:
    """The occurrences the timeline draws a mark for."""
    return set(
        re.findall(r'<g class="mark" data-lane="decision"[^>]*data-occurrence-id="([^"]+)"', html)
    )


def test_the_timeline_reads_its_window_by_instant_whatever_came_before(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large backfill of old instants, written after the window's first fires, and a
    history longer than the picture draws: the window's occurrences are all drawn, the
    newest first when there are too many."""
    clock = FakeClock(datetime(2026, 5, 4, 8, 0, tzinfo=UTC))
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            sid = schedule(ui, spec={"cron": "0 * * * *"})["id"]
            api = ui.api(ui.member)
            for _ in range(5):
                clock.advance(3600)
                generate(system.services, 1000)
            backfilled = api.post(
                f"/schedules/{sid}/backfill",
                {"from": "2026-03-01T00:00:00Z", "to": "2026-03-15T00:00:00Z"},
            )
            assert backfilled.json()["generated"] > 300, backfilled.text
            for _ in range(3):
                clock.advance(3600)
                generate(system.services, 1000)
            clock.advance(7)
            triggered = api.post(f"/schedules/{sid}/trigger").json()["id"]
            clock.advance(1)
            ui.sign_in(ui.member)
            html = page_of(ui, sid).text
            assert "Timeline of the last 30 hours" in html
            window = occurrences(ui, sid, **{"from": "2026-05-03T10:00:00Z"})
            assert len(window) == 9, "eight fires and the trigger"
            assert triggered in {o["id"] for o in window}
            assert drawn(html) == {o["id"] for o in window}

            monkeypatch.setattr(routes, "TIMELINE_MARKS", 4)
            html = page_of(ui, sid).text
            by_instant = sorted(window, key=lambda o: o["occurrence_at"], reverse=True)
            assert drawn(html) == {o["id"] for o in by_instant[:4]}, "the newest of the window"
            assert "more stored occurrences" in html
    finally:
        system.close()
