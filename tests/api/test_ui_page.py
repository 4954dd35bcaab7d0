"""The operator page over HTTP, without a browser: session cookie, CSRF, CSP, escaping,
redirects, roles and tenant isolation (SPEC IF-4, API.md "The operator page")."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.http.ui.rendering import CONTENT_SECURITY_POLICY
from punctual.domain.permissions import Role
from punctual.usecases.recurring.generation import generate
from punctual.usecases.tenancy import identity
from tests.conftest import FakeClock, make_settings
from tests.support.api import Api, echo_start, in_process
from tests.support.ui import SESSION, Forms, Ui, make_ui

PAGES = ["schedules", "starts", "runs", "health"]


@pytest.fixture
def ui(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        with in_process(system) as client:
            yield make_ui(system, client)
    finally:
        system.close()


def session_cookie(response: httpx.Response) -> str:
    header = next(h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION))
    return header


def test_the_sign_in_form_carries_a_csrf_token_and_a_key_and_binds_a_strict_cookie(
    ui: Ui,
) -> None:
    response = ui.client.get("/ui/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    form = Forms(response.text).forms["/ui/sign-in"]
    assert form["csrf_token"] and form["idempotency_key"]
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("punctual_sign_in=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert 'type="password"' in response.text, "the token field does not echo the token"


def test_signing_in_sets_a_strict_http_only_session_cookie_without_the_token(ui: Ui) -> None:
    response = ui.sign_in(ui.member)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/t/acme/schedules"
    cookie = session_cookie(response)
    attributes = [part.strip() for part in cookie.split(";")]
    assert {"HttpOnly", "SameSite=Strict", "Path=/ui"} <= set(attributes)
    assert "Secure" not in attributes, "plain HTTP (loopback): a Secure cookie would be lost"
    value = attributes[0].split("=", 1)[1]
    assert ui.member not in value
    assert identity.digest(ui.member) not in value
    assert ui.member not in response.headers.get("location", "")
    page = ui.client.get("/ui/t/acme/schedules")
    assert page.status_code == 200
    assert "mia" in page.text and "(member)" in page.text


def test_over_https_the_session_cookie_is_secure_too(ui: Ui) -> None:
    with TestClient(ui.system.http_app(), base_url="https://testserver") as client:
        form = Forms(client.get("/ui/").text).forms["/ui/sign-in"]
        response = client.post(
            "/ui/sign-in", data={**form, "token": ui.member}, follow_redirects=False
        )
        assert response.status_code == 303
        attributes = [part.strip() for part in session_cookie(response).split(";")]
        assert {"Secure", "HttpOnly", "SameSite=Strict", "Path=/ui"} <= set(attributes)
        assert client.get("/ui/t/acme/health").status_code == 200


def test_sign_in_without_a_matching_csrf_token_is_refused(ui: Ui) -> None:
    form = Forms(ui.client.get("/ui/").text).forms["/ui/sign-in"]
    other_browser = TestClient(ui.system.http_app())
    foreign = Forms(other_browser.get("/ui/").text).forms["/ui/sign-in"]["csrf_token"]
    attempts = {
        "missing": {"token": ui.member},
        "garbage": {"token": ui.member, "csrf_token": "k1.bm90LWEtdG9rZW4"},
        "another browser's": {"token": ui.member, "csrf_token": foreign},
        "the page's own with a character appended": {
            "token": ui.member,
            "csrf_token": form["csrf_token"] + "!",
        },
    }
    for name, data in attempts.items():
        response = ui.client.post("/ui/sign-in", data=data, follow_redirects=False)
        assert response.status_code == 403, name
        assert "csrf_token_invalid" in response.text, name
        assert not any(h.startswith(SESSION) for h in response.headers.get_list("set-cookie"))
    # A token copied from the page is no use without the browser's own sign-in cookie.
    bare = TestClient(ui.system.http_app())
    response = bare.post("/ui/sign-in", data={**form, "token": ui.member}, follow_redirects=False)
    assert response.status_code == 403
    assert ui.client.get("/ui/t/acme/schedules", follow_redirects=False).status_code == 303


def test_a_bad_token_or_another_tenant_shows_the_form_again(ui: Ui) -> None:
    for token, tenant in (("pn_nobody", ""), (ui.member, "globex"), ("", "")):
        response = ui.sign_in(token, tenant)
        assert response.status_code == 401
        assert "unknown, revoked or expired" in response.text
        assert not any(
            h.startswith(f"{SESSION}=k") for h in response.headers.get_list("set-cookie")
        )
        assert 'action="/ui/sign-in"' in response.text
    assert ui.sign_in(ui.member, "acme").status_code == 303


def test_without_a_session_every_page_redirects_to_the_sign_in_form(ui: Ui) -> None:
    paths = [f"/ui/t/acme/{page}" for page in PAGES] + [
        "/ui/t/acme",
        "/ui/t/acme/schedules/sch_x",
        "/ui/t/acme/starts/st_x",
        "/ui/t/acme/runs/run_x",
        "/ui/t/other/health",
        "/ui/anything/else",
    ]
    for cookie in (None, "k1.AAAA", "not a sealed value"):
        headers = {"Cookie": f"{SESSION}={cookie}"} if cookie else None
        for path in paths:
            response = ui.client.get(path, headers=headers, follow_redirects=False)
            assert response.status_code == 303, path
            assert response.headers["location"] == "/ui/", path
    post = ui.client.post(
        "/ui/t/acme/health/findings/fnd_x/acknowledge",
        data={"csrf_token": "x", "idempotency_key": "k"},
        follow_redirects=False,
    )
    assert (post.status_code, post.headers["location"]) == (303, "/ui/")


def test_every_response_under_ui_sends_the_content_security_policy(ui: Ui) -> None:
    assert CONTENT_SECURITY_POLICY == "default-src 'self'; frame-ancestors 'none'"
    responses = [
        ui.client.get("/ui/"),
        ui.client.get("/ui/static/ui.css"),
        ui.client.get("/ui/t/acme/runs", follow_redirects=False),
        ui.client.post("/ui/sign-in", data={"token": "x"}),
        ui.sign_in("pn_nobody"),
        ui.sign_in(ui.member),
    ]
    responses += [ui.client.get(f"/ui/t/acme/{page}") for page in PAGES]
    responses += [ui.client.get("/ui/t/acme/runs/run_missing"), ui.client.get("/ui/nowhere")]
    statuses = set()
    for response in responses:
        statuses.add(response.status_code)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        if response.headers.get("content-type", "").startswith("text/html"):
            # Nothing the policy would refuse: no inline script, style or handler.
            assert "<script" not in response.text
            assert "<style" not in response.text
            assert " style=" not in response.text
            assert not re.search(r"\son[a-z]+=", response.text)
            assert response.headers["cache-control"] == "no-store"
    assert {200, 303, 401, 403, 404} <= statuses


def test_v1_never_accepts_the_session_cookie(ui: Ui) -> None:
    signed_in = ui.sign_in(ui.member)
    value = session_cookie(signed_in).split(";")[0].split("=", 1)[1]
    for path in ("/v1/tenants/acme/schedules", "/v1/tenants/acme/health"):
        response = ui.client.get(path, headers={"Cookie": f"{SESSION}={value}"})
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthenticated"
        as_bearer = ui.client.get(path, headers={"Authorization": f"Bearer {value}"})
        assert as_bearer.status_code == 401
    finding = ui.finding()
    posted = ui.client.post(
        f"/v1/tenants/acme/health/findings/{finding}/acknowledge",
        headers={"Cookie": f"{SESSION}={value}", "Idempotency-Key": "k-cookie"},
    )
    assert posted.status_code == 401
    assert not ui.acknowledged(finding)


def test_names_and_messages_are_shown_escaped(ui: Ui) -> None:
    hostile = "<script>alert('name')</script>"
    created = ui.api(ui.member).post(
        "/schedules",
        {
            "name": hostile,
            "workflow": "echo",
            "input": {"message": "hi"},
            "spec": {"interval_ms": 60_000},
            "overlap": "skip",
            "missed": "skip",
        },
    )
    assert created.status_code == 201, created.text
    ui.finding("st_hostile", "failed: <img src=x onerror=alert(1)>")
    ui.sign_in(ui.member)
    pages = [
        ui.client.get("/ui/t/acme/schedules").text,
        ui.client.get(f"/ui/t/acme/schedules/{created.json()['id']}").text,
        ui.client.get("/ui/t/acme/health").text,
    ]
    for page in pages[:2]:
        assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;" in page
        assert hostile not in page
    assert "failed: &lt;img src=x onerror=alert(1)&gt;" in pages[2]
    assert "<img src=x" not in pages[2]


def test_acknowledging_needs_the_forms_csrf_token(ui: Ui) -> None:
    finding = ui.finding()
    ui.sign_in(ui.member)
    action = f"/ui/t/acme/health/findings/{finding}/acknowledge"
    form = Forms(ui.client.get("/ui/t/acme/health").text).forms[action]
    other = TestClient(ui.system.http_app())
    form_of_other = Forms(other.get("/ui/").text).forms["/ui/sign-in"]
    other.post("/ui/sign-in", data={**form_of_other, "token": ui.admin})
    other_session_token = Forms(other.get("/ui/t/acme/health").text).forms[action]["csrf_token"]
    for name, csrf in (
        ("missing", None),
        ("wrong", "k1.d3Jvbmc"),
        ("the sign-in form's", form_of_other["csrf_token"]),
        ("another session's", other_session_token),
    ):
        data = {"idempotency_key": form["idempotency_key"]}
        if csrf is not None:
            data["csrf_token"] = csrf
        response = ui.client.post(action, data=data, follow_redirects=False)
        assert response.status_code == 403, name
        assert "csrf_token_invalid" in response.text
    assert not ui.acknowledged(finding)


def test_acknowledging_with_the_rendered_key_decides_once(ui: Ui) -> None:
    first, second = ui.finding("st_one"), ui.finding("st_two")
    ui.sign_in(ui.member)
    page = ui.client.get("/ui/t/acme/health").text
    forms = Forms(page).forms
    action = f"/ui/t/acme/health/findings/{first}/acknowledge"
    assert (
        forms[action]["idempotency_key"] != forms[action.replace(first, second)]["idempotency_key"]
    ), "every form has a key of its own"
    response = ui.client.post(action, data=forms[action], follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/ui/t/acme/health?acknowledged={first}"
    shown = ui.client.get(response.headers["location"]).text
    assert f"Finding {first} is acknowledged." in shown
    assert action not in Forms(shown).forms, "an acknowledged finding has no button"
    assert ui.acknowledged(first)
    # The same form sent again replays the decision.
    again = ui.client.post(action, data=forms[action], follow_redirects=False)
    assert again.status_code == 303
    # The same key for another finding is another request: refused, never applied.
    reused = ui.client.post(
        action.replace(first, second), data=forms[action], follow_redirects=False
    )
    assert reused.status_code == 409
    assert "idempotency_key_reused" in reused.text
    assert not ui.acknowledged(second)
    # A key that is not 1-255 visible ASCII characters is refused before anything runs.
    bad = ui.client.post(
        action.replace(first, second),
        data={**forms[action], "idempotency_key": "has space"},
        follow_redirects=False,
    )
    assert bad.status_code == 400
    # An acknowledged= notice is shown only for a finding that is acknowledged.
    notice = f"Finding {second} is acknowledged."
    assert notice not in ui.client.get(f"/ui/t/acme/health?acknowledged={second}").text


def test_a_viewer_sees_no_acknowledge_button_and_cannot_acknowledge(ui: Ui) -> None:
    finding = ui.finding()
    ui.sign_in(ui.viewer)
    page = ui.client.get("/ui/t/acme/health").text
    forms = Forms(page)
    assert "Acknowledge" not in forms.buttons
    assert forms.buttons == ["Sign out"], "a viewer may only sign out"
    assert not any("acknowledge" in action for action in forms.forms)
    # A hand-made form post with the viewer's own valid CSRF token is still forbidden.
    token = forms.forms["/ui/sign-out"]["csrf_token"]
    response = ui.client.post(
        f"/ui/t/acme/health/findings/{finding}/acknowledge",
        data={"csrf_token": token, "idempotency_key": "viewer-try"},
        follow_redirects=False,
    )
    assert response.status_code == 403
    assert "forbidden" in response.text
    assert not ui.acknowledged(finding)
    member = TestClient(ui.system.http_app())
    form = Forms(member.get("/ui/").text).forms["/ui/sign-in"]
    member.post("/ui/sign-in", data={**form, "token": ui.member})
    assert "Acknowledge" in Forms(member.get("/ui/t/acme/health").text).buttons


def test_another_tenants_pages_do_not_exist(ui: Ui) -> None:
    outsider = identity.ensure_member_token(ui.system.services, "globex", "gus", Role.ADMIN)
    theirs = Api(ui.client, outsider.token, "globex").post("/scheduled-starts", echo_start())
    assert theirs.status_code == 201, theirs.text
    ui.sign_in(ui.admin)
    for path in ("/ui/t/globex/schedules", "/ui/t/globex/health"):
        response = ui.client.get(path)
        assert response.status_code == 404, path
        assert "globex does not exist" in response.text
    response = ui.client.get(f"/ui/t/acme/starts/{theirs.json()['id']}")
    assert response.status_code == 404


def test_signing_out_clears_the_cookie_and_needs_the_csrf_token(ui: Ui) -> None:
    ui.sign_in(ui.member)
    form = Forms(ui.client.get("/ui/t/acme/runs").text).forms["/ui/sign-out"]
    refused = ui.client.post("/ui/sign-out", data={}, follow_redirects=False)
    assert refused.status_code == 403
    assert ui.client.get("/ui/t/acme/runs", follow_redirects=False).status_code == 200
    response = ui.client.post("/ui/sign-out", data=form, follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/ui/")
    cleared = session_cookie(response)
    assert cleared.startswith(f"{SESSION}=;") and "Max-Age=0" in cleared and "Path=/ui" in cleared
    assert ui.client.get("/ui/t/acme/runs", follow_redirects=False).status_code == 303


def test_a_revoked_token_ends_its_sessions_at_once(ui: Ui) -> None:
    ui.sign_in(ui.member)
    assert ui.client.get("/ui/t/acme/health").status_code == 200
    with ui.system.store.transaction() as tx:
        tx.identity.revoke_tokens_of("acme", "mia", ui.system.services.clock.now())
    response = ui.client.get("/ui/t/acme/health", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/ui/")
    assert "Max-Age=0" in session_cookie(response)


def test_a_tampered_session_is_sent_to_sign_in(ui: Ui) -> None:
    value = session_cookie(ui.sign_in(ui.member)).split(";")[0].split("=", 1)[1]
    key_id, payload = value.split(".", 1)
    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    for forged in (f"{key_id}.{flipped}", f"k9.{payload}", payload, value + "x"):
        response = ui.client.get(
            "/ui/t/acme/health", headers={"Cookie": f"{SESSION}={forged}"}, follow_redirects=False
        )
        assert response.status_code == 303, forged


def test_the_start_pages_never_show_the_input(ui: Ui) -> None:
    secret = "card-4111-1111-" + secrets.token_hex(4)
    created = ui.api(ui.member).post(
        "/scheduled-starts", echo_start(input={"message": secret}, attributes={"k": "v"})
    )
    assert created.status_code == 201, created.text
    ui.sign_in(ui.member)
    for path in ("/ui/t/acme/starts", f"/ui/t/acme/starts/{created.json()['id']}"):
        page = ui.client.get(path)
        assert page.status_code == 200
        assert created.json()["id"] in page.text
        assert secret not in page.text


def test_filters_and_a_bad_filter_answer_with_pages(ui: Ui) -> None:
    ui.api(ui.member).post("/scheduled-starts", echo_start(business_request_id="find-me"))
    ui.sign_in(ui.member)
    found = ui.client.get("/ui/t/acme/starts", params={"business_request_id": "find-me"})
    assert found.status_code == 200 and "find-me" in found.text
    none = ui.client.get("/ui/t/acme/starts", params={"state": "failed"})
    assert "No scheduled starts match." in none.text
    bad = ui.client.get("/ui/t/acme/runs", params={"state": "exploded"})
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("text/html")
    sid = (
        ui.api(ui.member)
        .post(
            "/schedules",
            {
                "name": "filtered",
                "workflow": "echo",
                "input": {"message": "hi"},
                "spec": {"interval_ms": 60_000},
                "overlap": "skip",
                "missed": "skip",
            },
        )
        .json()["id"]
    )
    bad = ui.client.get(f"/ui/t/acme/schedules/{sid}", params={"state": "exploded"})
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("text/html")


def test_a_session_sealed_by_one_api_process_works_on_another(
    database_url: str, tmp_path: Path
) -> None:
    """Every API process holds the key ring, so any of them opens the cookie and checks the
    CSRF token another one rendered (API.md "The operator page")."""
    settings = make_settings(database_url, tmp_path)
    first, second = bootstrap.build(settings), bootstrap.build(settings)
    try:
        with in_process(first) as one, in_process(second) as two:
            ui = make_ui(first, one)
            finding = ui.finding()
            ui.sign_in(ui.member)
            action = f"/ui/t/acme/health/findings/{finding}/acknowledge"
            form = Forms(one.get("/ui/t/acme/health").text).forms[action]
            two.cookies = one.cookies
            assert two.get("/ui/t/acme/health").status_code == 200
            response = two.post(action, data=form, follow_redirects=False)
            assert response.status_code == 303
            assert ui.acknowledged(finding)
    finally:
        first.close()
        second.close()


def test_a_session_ends_after_its_lifetime(sqlite_url: str, tmp_path: Path) -> None:
    clock = FakeClock()
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            ui.sign_in(ui.member)
            clock.advance(8 * 3600 - 60)
            assert client.get("/ui/t/acme/runs", follow_redirects=False).status_code == 200
            clock.advance(120)
            response = client.get("/ui/t/acme/runs", follow_redirects=False)
            assert (response.status_code, response.headers["location"]) == (303, "/ui/")
    finally:
        system.close()


def test_a_dst_gap_skip_is_a_mark_of_its_own(sqlite_url: str, tmp_path: Path) -> None:
    """``dst_gap: skip`` records the wall time that did not exist; the timeline shows it."""
    clock = FakeClock(datetime(2026, 3, 8, 5, 0, tzinfo=UTC))
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            created = ui.api(ui.member).post(
                "/schedules",
                {
                    "name": "gap-skipper",
                    "workflow": "echo",
                    "input": {"message": "hi"},
                    "spec": {
                        "cron": "30 2 * * *",
                        "time_zone": "America/New_York",
                        "dst_gap": "skip",
                    },
                    "overlap": "skip",
                    "missed": "skip",
                },
            )
            assert created.status_code == 201, created.text
            # The pass that reaches the next real fire (02:30 EDT on 9 March) records the
            # wall time of 8 March that did not exist.
            clock.current = datetime(2026, 3, 9, 6, 31, tzinfo=UTC)
            generate(system.services, 100)
            schedule_id = created.json()["id"]
            listed = ui.api().get(f"/schedules/{schedule_id}/occurrences").json()["items"]
            listed.sort(key=lambda o: o["occurrence_at"])
            decided = [(o["state"], o["reason"], o["dst_adjustment"]) for o in listed]
            assert decided == [("skipped", "dst_gap", "gap_skipped"), ("scheduled", None, None)]
            ui.sign_in(ui.member)
            page = client.get(f"/ui/t/acme/schedules/{schedule_id}").text
            marks = re.findall(r'<g class="mark" data-lane="decision" data-kind="([a-z_]+)"', page)
            assert marks == ["dst_skipped", "pending"]
            assert "DST: skipped, the time did not exist" in page
    finally:
        system.close()


def test_calendar_decisions_are_marks_of_their_own_with_their_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Specs, calendar, blackout and deadline are shown; a closed day is a mark of its own
    with the holiday's name in the table, and the list names each spec (RS-10)."""
    clock = FakeClock(datetime(2026, 12, 24, 12, 0, tzinfo=UTC))
    system = bootstrap.build(make_settings(sqlite_url, tmp_path), clock=clock)
    try:
        with in_process(system) as client:
            ui = make_ui(system, client)
            created = ui.api(ui.member).post(
                "/schedules",
                {
                    "name": "payroll",
                    "workflow": "echo",
                    "input": {"message": "hi"},
                    "specs": [
                        {"cron": "0 9 * * *", "time_zone": "Europe/Berlin"},
                        {"business_day": -1, "at": "17:30", "time_zone": "Europe/Berlin"},
                    ],
                    "calendar": {"holidays": [{"country": "DE", "subdivision": "BY"}]},
                    "blackouts": [
                        {"from": "2027-01-10T00:00:00Z", "to": "2027-01-11T00:00:00Z",
                         "reason": "audit"}
                    ],
                    "start_deadline_ms": 3_600_000,
                    "overlap": "skip",
                    "missed": "skip",
                },
            )  # fmt: skip
            assert created.status_code == 201, created.text
            # Closed days are decided by the pass that reaches the next fire (28 Dec).
            clock.current = datetime(2026, 12, 28, 8, 30, tzinfo=UTC)
            generate(system.services, 100)
            schedule_id = created.json()["id"]
            ui.sign_in(ui.member)
            page = client.get(f"/ui/t/acme/schedules/{schedule_id}").text
            marks = re.findall(r'<g class="mark" data-lane="decision" data-kind="([a-z_]+)"', page)
            assert "calendar_skipped" in marks
            assert "Christmas Day" in page
            assert "[1] last business day at 17:30 in Europe/Berlin" in page
            assert "public holidays of DE-BY" in page
            assert "(audit)" in page and "never started more than 3600 s late" in page
            listing = client.get("/ui/t/acme/schedules").text
            assert "[0] cron 0 9 * * * in Europe/Berlin" in listing
    finally:
        system.close()


def test_the_page_is_not_part_of_the_openapi_document(ui: Ui) -> None:
    paths = ui.client.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/ui")]


def test_an_unexpected_error_is_a_page_of_its_own_that_tells_nothing(
    ui: Ui, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("internal detail /var/lib/secret")

    ui.sign_in(ui.member)
    monkeypatch.setattr("punctual.usecases.running.runs.list_runs", broken)
    response = ui.client.get("/ui/t/acme/runs")
    assert response.status_code == 500
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["content-type"].startswith("text/html")
    assert "internal detail" not in response.text
    assert "it was logged" in response.text


def test_an_acknowledgement_on_the_page_is_in_the_audit_log(ui: Ui) -> None:
    from punctual.domain.permissions import Principal
    from punctual.usecases.kernel import audit

    finding = ui.finding()
    ui.sign_in(ui.member)
    action = f"/ui/t/acme/health/findings/{finding}/acknowledge"
    form = Forms(ui.client.get("/ui/t/acme/health").text).forms[action]
    assert ui.client.post(action, data=form, follow_redirects=False).status_code == 303
    assert ui.client.post(action, data=form, follow_redirects=False).status_code == 303
    admin = Principal("acme", "ada", Role.ADMIN)
    entries = audit.list_entries(ui.system.services, admin, audit.ListAudit(subject_id=finding))[
        "items"
    ]
    assert len(entries) == 1, "a replay is not a second decision"
    entry = entries[0]
    assert (entry["actor"], entry["action"], entry["method"], entry["path"]) == (
        "mia",
        "acknowledge_finding",
        "POST",
        action,
    )
    assert entry["status"] == 200


def test_a_host_wide_finding_has_no_acknowledge_button(ui: Ui) -> None:
    from punctual.usecases.tenancy.health import HOST

    with ui.system.store.transaction() as tx:
        tx.findings.raise_finding(
            HOST, "engine_unavailable", "engine", "error", "engine down", datetime.now(UTC)
        )
    tenant_finding = ui.finding()
    ui.sign_in(ui.admin)
    page = ui.client.get("/ui/t/acme/health").text
    actions = [a for a in Forms(page).forms if "acknowledge" in a]
    assert actions == [f"/ui/t/acme/health/findings/{tenant_finding}/acknowledge"]
    assert "engine down" in page and "host-wide" in page


def _refused_as_invalid(response: httpx.Response, where: str) -> None:
    """The page's own validation error: a 422 page, never a 500 (SPEC FT-3)."""
    assert response.status_code == 422, (where, response.status_code)
    assert response.headers["content-type"].startswith("text/html"), where
    assert "validation_error" in response.text, where


def test_a_nul_in_a_query_or_path_parameter_is_a_validation_error_page(ui: Ui) -> None:
    finding = ui.finding()
    ui.sign_in(ui.member)
    queries = {
        "/ui/t/acme/schedules": ["cursor"],
        "/ui/t/acme/starts": ["state", "workflow", "business_request_id", "cursor"],
        "/ui/t/acme/runs": ["state", "workflow", "cursor"],
        "/ui/t/acme/health": ["acknowledged"],
        "/ui/t/acme/schedules/sch_x": ["state", "cursor", "done", "occurrence", "unknown"],
        "/ui/": ["unknown"],
    }
    for path, names in queries.items():
        for name in names:
            for value in ("\x00", "a\x00b"):
                response = ui.client.get(path, params={name: value}, follow_redirects=False)
                _refused_as_invalid(response, f"{path}?{name}")
        nameless = ui.client.get(path, params={"a\x00": "1"}, follow_redirects=False)
        _refused_as_invalid(nameless, f"{path} with a NUL in a parameter's name")
    for path in (
        "/ui/t/acme/schedules/sch%00x",
        "/ui/t/acme/starts/st%00x",
        "/ui/t/acme/runs/run%00x",
        "/ui/t/ac%00me/schedules",
        "/ui/t/ac%00me",
        "/ui/elsewhere%00",
    ):
        _refused_as_invalid(ui.client.get(path, follow_redirects=False), path)
    action = f"/ui/t/acme/health/findings/{finding}%00/acknowledge"
    form = Forms(ui.client.get("/ui/t/acme/health").text).forms[action.replace("%00", "")]
    _refused_as_invalid(ui.client.post(action, data=form, follow_redirects=False), action)
    assert not ui.acknowledged(finding)


def test_a_nul_in_a_form_field_is_a_validation_error_page(ui: Ui) -> None:
    sign_in = Forms(ui.client.get("/ui/").text).forms["/ui/sign-in"]
    filled = {**sign_in, "token": ui.member, "tenant": "acme"}
    for name in [*filled, "extra\x00"]:
        data = {**filled, name: f"{filled.get(name, '')}\x00"}
        response = ui.client.post("/ui/sign-in", data=data, follow_redirects=False)
        _refused_as_invalid(response, f"sign-in {name}")
        assert not any(
            h.startswith(f"{SESSION}=k") for h in response.headers.get_list("set-cookie")
        )

    finding = ui.finding()
    assert ui.sign_in(ui.member).status_code == 303
    page = Forms(ui.client.get("/ui/t/acme/health").text).forms
    action = f"/ui/t/acme/health/findings/{finding}/acknowledge"
    for form_action, form in ((action, page[action]), ("/ui/sign-out", page["/ui/sign-out"])):
        for name in [*form, "extra\x00"]:
            data = {**form, name: f"{form.get(name, '')}\x00"}
            response = ui.client.post(form_action, data=data, follow_redirects=False)
            _refused_as_invalid(response, f"{form_action} {name}")
    assert not ui.acknowledged(finding)
    assert ui.client.get("/ui/t/acme/health").status_code == 200, "still signed in"
