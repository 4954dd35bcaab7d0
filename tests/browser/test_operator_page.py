"""The operator page in real headless Chromium against a real uvicorn (SPEC IF-4).

Each page is checked with axe-core (WCAG 2 A and AA), for browser errors (a CSP refusal
is one) and kept as a screenshot (see conftest.py for where).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from punctual import bootstrap
from punctual.domain.timeutil import parse_rfc3339
from tests.browser import scenario
from tests.browser.conftest import RUN_AXE, WCAG_TAGS, Browser
from tests.conftest import FakeClock, make_settings
from tests.support.server import serving

pytestmark = pytest.mark.browser

DST_MOVED = {"gap_shifted", "overlap_second"}


@dataclass
class Site:
    system: bootstrap.Punctual
    clock: FakeClock
    data: scenario.Scenario


@pytest.fixture
def site(sqlite_url: str, tmp_path: Path) -> Iterator[Site]:
    clock = FakeClock(scenario.SCENARIO_START)
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with serving(system.http_app()) as url:
            yield Site(system, clock, scenario.build(system, clock, url))
    finally:
        system.close()


@pytest.fixture
def browser(site: Site, browser_for: Any) -> Browser:
    made: Browser = browser_for(site.data.url)
    return made


def expected_kind(occurrence: dict[str, Any]) -> str:
    """What API.md's occurrence fields say was decided (the timeline's legend, as a rule)."""
    state, reason = occurrence["state"], occurrence["reason"]
    if occurrence.get("range") and reason == "missed":
        return "missed"
    if state == "skipped":
        if reason == "overlap":
            return "skipped_overlap"
        if reason == "dst_gap" or occurrence["dst_adjustment"] == "gap_skipped":
            return "dst_skipped"
        return "skipped"
    if state == "dispatched":
        return "fired_dst_moved" if occurrence["dst_adjustment"] in DST_MOVED else "fired"
    if state in {"failed", "canceled"}:
        return state
    return "pending"


def test_an_operator_signs_in_and_sees_next_fire_times_with_dst_flags(
    site: Site, browser: Browser
) -> None:
    browser.open("/ui/t/acme/schedules")
    assert browser.path == "/ui/", "without a session the page sends the browser to sign in"
    browser.check("01-sign-in")

    browser.sign_in(site.data.member_token)
    assert browser.path == "/ui/t/acme/schedules"
    assert "olga" in browser.find(".who").text
    with site.data.api() as api:
        expected = api.get(f"/schedules/{site.data.dst_schedule_id}").json()["next_fire_times"]
        preview = api.get(
            "/schedule-preview",
            params={"cron": "30 2 * 3 0", "time_zone": "America/New_York", "count": 5},
        ).json()["items"]
    row = browser.find(f"tr[data-schedule-id='{site.data.dst_schedule_id}']")
    fires = row.find_elements(By.CSS_SELECTOR, "ol.fires li")
    assert [li.get_attribute("data-fire-at") for li in fires] == expected
    flagged = {li.get_attribute("data-fire-at"): li.get_attribute("data-dst") for li in fires}
    assert flagged == {item["fire_at"]: item["dst_adjustment"] for item in preview}
    shifted = [li for li in fires if li.get_attribute("data-dst") == "gap_shifted"]
    assert len(shifted) == 1
    assert "DST: moved to the end of a gap" in shifted[0].text
    assert "2027-03-14 03:00 (UTC-04:00)" in shifted[0].text
    # The name is shown as text, never as markup.
    names = [a.text for a in browser.find_all("#schedules td a")]
    assert "hourly-scores <b>&amp;</b>" in names
    browser.check("02-schedules")


def test_the_timeline_has_one_mark_per_decision_of_the_occurrences_api(
    site: Site, browser: Browser
) -> None:
    schedule_id = site.data.timeline_schedule_id
    browser.sign_in(site.data.member_token)
    browser.open(f"/ui/t/acme/schedules/{schedule_id}")
    with site.data.api() as api:
        listed = api.get(f"/schedules/{schedule_id}/occurrences", params={"limit": 100}).json()
    now = site.clock.now()
    recent = [
        o
        for o in listed["items"]
        if parse_rfc3339((o.get("range") or {}).get("last") or o["occurrence_at"])
        >= now - timedelta(days=7)
    ]
    expected = {o["id"]: expected_kind(o) for o in recent}
    assert set(expected.values()) >= {"fired", "fired_dst_moved", "skipped_overlap", "missed"}

    marks = browser.find_all("#timeline g.mark[data-lane='decision']")
    shown = {m.get_attribute("data-occurrence-id"): m.get_attribute("data-kind") for m in marks}
    assert len(marks) == len(recent)
    assert shown == expected

    followed = {o["id"]: o["follow_through"]["status"] for o in recent if o["follow_through"]}
    assert set(followed.values()) == {"ok", "regressed", "not_comparable"}
    follow_marks = browser.find_all("#timeline g.mark[data-lane='follow_through']")
    assert {
        m.get_attribute("data-occurrence-id"): m.get_attribute("data-kind") for m in follow_marks
    } == {oid: f"follow_through_{status}" for oid, status in followed.items()}

    # Every kind has a text label: in the legend and in each mark's title.
    legend = {
        li.get_attribute("data-legend-kind"): li.text for li in browser.find_all(".legend li")
    }
    for kind in expected.values():
        assert legend[kind].strip(), f"{kind} has no label"
    titles = [m.find_element(By.TAG_NAME, "title").get_attribute("textContent") for m in marks]
    assert all(title.strip() for title in titles)
    missed = next(m for m in marks if m.get_attribute("data-kind") == "missed")
    assert "4 fire time(s)" in missed.find_element(By.TAG_NAME, "title").get_attribute(
        "textContent"
    )
    # The equivalent table lists the same decisions.
    rows = browser.find_all("#decisions tbody tr[data-occurrence-id]")
    assert {r.get_attribute("data-occurrence-id"): r.get_attribute("data-kind") for r in rows} == (
        expected
    )
    # Each decision names its origin, and a regression its numbers and its baseline run.
    assert {r.get_attribute("data-origin") for r in rows} == {"schedule"}
    regressed = next(o for o in recent if (o["follow_through"] or {}).get("status") == "regressed")
    row = browser.find(f"#decisions tr[data-occurrence-id='{regressed['id']}']")
    cells = row.find_elements(By.TAG_NAME, "td")
    assert cells[2].text == "scheduled"
    follow = cells[-1].text
    assert "metrics.score: 0.9 → 0.5" in follow
    assert "higher is better, tolerance 0" in follow
    assert f"compared with run {regressed['follow_through']['previous_run_id']}" in follow
    assert browser.find("h1").text == "Schedule hourly-scores <b>&amp;</b>"
    assert browser.find("#timeline-heading").text == "Timeline of the last 30 hours"
    browser.check("03-schedule-timeline")


def test_a_one_second_schedules_marks_spread_across_the_timeline(
    site: Site, browser: Browser
) -> None:
    schedule_id = scenario.every_second(site.system, site.clock, site.data)
    browser.sign_in(site.data.member_token)
    browser.open(f"/ui/t/acme/schedules/{schedule_id}")
    assert browser.find("#timeline-heading").text == "Timeline of the last 30 seconds"
    picture = browser.find("#timeline")
    assert picture.get_attribute("data-window-seconds") == "30"
    assert "a tick every 5 seconds" in browser.find("#timeline .axis-label").text
    marks = browser.find_all("#timeline g.mark[data-lane='decision']")
    assert len(marks) >= 25, "about one mark a second of the last thirty"
    # Where Chromium drew them: each at an x of its own, across most of the picture.
    centres = sorted(m.rect["x"] + m.rect["width"] / 2 for m in marks)
    apart = [b - a for a, b in pairwise(centres)]
    assert min(apart) > 5, f"marks overlap: {apart}"
    assert centres[-1] - centres[0] > 0.7 * picture.rect["width"]
    assert {m.get_attribute("data-kind") for m in marks} >= {"fired", "skipped_overlap"}
    browser.check("13-schedule-every-second")


def test_a_member_pauses_resumes_and_runs_a_schedule_now(site: Site, browser: Browser) -> None:
    schedule_id = site.data.timeline_schedule_id
    page = f"/ui/t/acme/schedules/{schedule_id}"
    browser.sign_in(site.data.member_token)
    browser.open(page)
    assert browser.find_all("button.control-resume") == [], "an active schedule is not resumed"
    assert browser.find_all("button.control-trigger")
    browser.check("14-schedule-controls")

    browser.submit(browser.find("button.control-pause"))
    assert browser.path == f"{page}?done=paused"
    assert browser.find("#notice").text.startswith("Paused:")
    assert "state\npaused" in browser.find("dl.facts").text.lower()
    assert browser.find_all("button.control-pause") == []
    browser.check("15-schedule-paused")

    browser.submit(browser.find("button.control-resume"))
    assert browser.path == f"{page}?done=resumed"
    assert browser.find("#notice").text.startswith("Resumed:")
    assert "state\nactive" in browser.find("dl.facts").text.lower()

    rows = browser.find_all("#decisions tbody tr")
    before = {r.get_attribute("data-occurrence-id") for r in rows}
    browser.submit(browser.find("button.control-trigger"))
    assert browser.path.startswith(f"{page}?done=triggered&occurrence=")
    rows = browser.find_all("#decisions tbody tr[data-occurrence-id]")
    new = [r for r in rows if r.get_attribute("data-occurrence-id") not in before]
    assert len(new) == 1, "one new occurrence"
    occurrence_id = new[0].get_attribute("data-occurrence-id")
    assert new[0].get_attribute("data-origin") == "trigger"
    assert "trigger" in new[0].find_elements(By.TAG_NAME, "td")[2].text
    assert f"Triggered: occurrence {occurrence_id}" in browser.find("#notice").text
    assert browser.find_all(f"#timeline g.mark[data-occurrence-id='{occurrence_id}']")
    with site.data.api() as api:
        view = api.get(f"/schedules/{schedule_id}").json()
        listed = api.get(f"/schedules/{schedule_id}/occurrences", params={"limit": 100}).json()
    assert view["state"] == "active"
    assert [o["id"] for o in listed["items"] if o["origin"] == "trigger"] == [occurrence_id]
    browser.check("16-schedule-triggered")


def test_filters_narrow_the_lists(site: Site, browser: Browser) -> None:
    browser.sign_in(site.data.member_token)
    browser.open("/ui/t/acme/runs")
    every = {r.get_attribute("data-run-id") for r in browser.find_all("#runs tbody tr")}
    Select(browser.find("#filter-state")).select_by_value("failed")
    browser.submit(browser.find("form.filters button"))
    assert "state=failed" in browser.path
    failed = {r.get_attribute("data-run-id") for r in browser.find_all("#runs tbody tr")}
    assert failed == {site.data.run_ids[2]}, "the one failed run"
    assert failed < every
    assert Select(browser.find("#filter-state")).first_selected_option.text == "failed"
    browser.check("17-runs-filtered")

    browser.open("/ui/t/acme/starts")
    browser.find("#filter-workflow").send_keys("score")
    browser.submit(browser.find("form.filters button"))
    assert "workflow=score" in browser.path
    assert browser.find_all("#starts tbody tr") == []
    assert "No scheduled starts match." in browser.find("main").text

    schedule_id = site.data.timeline_schedule_id
    browser.open(f"/ui/t/acme/schedules/{schedule_id}")
    shown = len(browser.find_all("#decisions tbody tr"))
    Select(browser.find("#filter-state")).select_by_value("skipped")
    browser.submit(browser.find("form.filters button"))
    assert browser.path.startswith(f"/ui/t/acme/schedules/{schedule_id}?state=skipped")
    assert browser.path.endswith("#decisions-heading"), "back at the table, not the top"
    with site.data.api() as api:
        listed = api.get(
            f"/schedules/{schedule_id}/occurrences", params={"state": "skipped", "limit": 100}
        ).json()["items"]
    rows = browser.find_all("#decisions tbody tr[data-occurrence-id]")
    assert {r.get_attribute("data-occurrence-id") for r in rows} == {o["id"] for o in listed}
    assert 0 < len(rows) < shown
    browser.check("18-decisions-filtered")


def test_starts_and_runs_show_state_result_and_error_but_never_the_input(
    site: Site, browser: Browser
) -> None:
    browser.sign_in(site.data.member_token)
    browser.open("/ui/t/acme/starts")
    assert browser.find(f"tr[data-start-id='{site.data.start_id}']")
    assert scenario.PROTECTED_MESSAGE not in browser.driver.page_source
    browser.check("04-starts")

    browser.open(f"/ui/t/acme/starts/{site.data.start_id}")
    page = browser.driver.page_source
    assert scenario.PROTECTED_MESSAGE not in page
    assert "appt-&lt;42&gt;" in page
    browser.check("05-start")

    browser.open("/ui/t/acme/runs")
    listed = {r.get_attribute("data-run-id") for r in browser.find_all("#runs tbody tr")}
    assert set(site.data.run_ids) <= listed
    browser.check("06-runs")

    regressed, failed = site.data.run_ids[1], site.data.run_ids[2]
    browser.open(f"/ui/t/acme/runs/{regressed}")
    facts = browser.find("dl.facts").text.lower()  # the labels are styled in capitals
    assert "state\ncompleted" in facts
    assert "workflow\nscore" in facts
    assert "pinned definition version\n1" in facts
    assert '"score": 0.5' in browser.find("#result").text
    browser.check("07-run-completed")

    browser.open(f"/ui/t/acme/runs/{failed}")
    facts = browser.find("dl.facts").text.lower()
    with site.data.api() as api:
        run = api.get(f"/runs/{failed}").json()
    assert run["state"] == "failed"
    assert "state\nfailed" in facts
    assert f"error\n{run['error'].get('code') or 'error'}: the score could not be read" in facts
    assert f"attempts\n{run['attempts']}" in facts
    browser.check("08-run-failed")


def test_a_member_acknowledges_a_finding_and_sees_it_acknowledged(
    site: Site, browser: Browser
) -> None:
    finding_id = site.data.finding_id
    browser.sign_in(site.data.member_token)
    browser.open("/ui/t/acme/health")
    row = browser.find(f"tr[data-finding-id='{finding_id}']")
    assert row.get_attribute("data-acknowledged") == "false"
    assert "<script>alert('finding')</script>" in row.text, "the message is shown as text"
    assert browser.find("#health-status").text == "degraded"
    browser.check("09-health-open")

    browser.submit(row.find_element(By.CSS_SELECTOR, "button.acknowledge"))
    assert browser.path == f"/ui/t/acme/health?acknowledged={finding_id}"
    assert browser.find("#notice").text == f"Finding {finding_id} is acknowledged."
    row = browser.find(f"tr[data-finding-id='{finding_id}']")
    assert row.get_attribute("data-acknowledged") == "true"
    assert "acknowledged by olga" in row.text
    assert row.find_elements(By.CSS_SELECTOR, "button.acknowledge") == []
    with site.data.api() as api:
        findings = {f["id"]: f for f in api.get("/health").json()["findings"]}
    assert findings[finding_id]["acknowledged"] is True
    assert findings[finding_id]["acknowledged_by"] == "olga"
    browser.check("10-health-acknowledged")

    # Sending the same rendered form again replays the decision; nothing changes.
    browser.driver.back()
    browser.driver.refresh()
    assert (
        browser.find(f"tr[data-finding-id='{finding_id}']").get_attribute("data-acknowledged")
        == "true"
    )


def test_a_viewer_sees_no_acknowledge_pause_or_trigger_button(site: Site, browser: Browser) -> None:
    browser.sign_in(site.data.viewer_token)
    assert browser.path == "/ui/t/acme/schedules"
    browser.open("/ui/t/acme/health")
    row = browser.find(f"tr[data-finding-id='{site.data.finding_id}']")
    assert row.get_attribute("data-acknowledged") == "false"
    assert "open" in row.text
    assert browser.find_all("button.acknowledge") == []
    assert browser.find_all("form[action*='acknowledge']") == []
    assert "vic" in browser.find(".who").text
    browser.check("11-health-viewer")
    browser.open(f"/ui/t/acme/schedules/{site.data.timeline_schedule_id}")
    assert browser.find_all(".controls button") == []
    assert [b.text for b in browser.find_all("main button")] == ["Filter"]
    browser.check("11b-schedule-viewer")


def test_signing_out_ends_the_session(site: Site, browser: Browser) -> None:
    browser.sign_in(site.data.member_token)
    assert browser.path == "/ui/t/acme/schedules"
    browser.submit(browser.find(".who button"))
    assert browser.path == "/ui/"
    assert browser.driver.get_cookie("punctual_session") is None
    browser.open("/ui/t/acme/runs")
    assert browser.path == "/ui/"


def test_a_wrong_token_is_refused_on_the_form(site: Site, browser: Browser) -> None:
    browser.sign_in("pn_not-a-token-of-anyone")
    assert browser.path == "/ui/sign-in"
    assert "unknown, revoked or expired" in browser.find("[role=alert]").text
    assert browser.driver.get_cookie("punctual_session") is None
    browser.check("12-sign-in-refused")


def test_the_accessibility_check_reports_a_violation_it_is_shown(
    chromium: Any, axe_source: str
) -> None:
    """The axe harness is live: a page with an image without a text alternative fails."""
    chromium.get("data:text/html,<!doctype html><title>t</title><main><img src='x.png'></main>")
    chromium.execute_script(axe_source)
    violations = chromium.execute_async_script(RUN_AXE, WCAG_TAGS)
    assert "image-alt" in {v["id"] for v in violations}
    assert "html-has-lang" in {v["id"] for v in violations}
