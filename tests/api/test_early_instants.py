"""Instants before the year 1000 are RFC 3339 with a four-digit year everywhere (API.md:
answers are UTC with ``Z``): in the API's answers, for the typed client and on the page.

A start's ``start_at`` cannot lie in the past, but a schedule's interval may start in
the year 5, a backfill may cover its first days and the preview may start there. The
platform's ``strftime("%Y")`` writes the year 5 as ``5``, which no RFC 3339 parser reads.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from punctual import bootstrap
from punctual.client import PunctualClient
from punctual.domain.permissions import Role
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from tests.support.api import Api, live_worker
from tests.support.server import serving
from tests.support.ui import Forms

DAY = timedelta(days=1)
FIRST = datetime(5, 1, 1, tzinfo=UTC)
FIRES = [FIRST + DAY, FIRST + 2 * DAY]
RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def instant(text: Any) -> datetime:
    """An instant as the API writes it: RFC 3339, UTC, milliseconds."""
    assert isinstance(text, str) and RFC3339_UTC.fullmatch(text), text
    return datetime.fromisoformat(text)


def test_instants_before_the_year_1000_are_rfc3339_for_the_api_the_client_and_the_page(
    system: bootstrap.Punctual,
) -> None:
    live_worker(system)
    token = identity.ensure_member_token(system.services, "acme", "mia", Role.MEMBER).token
    spec = {"interval_ms": int(DAY.total_seconds() * 1000), "starts_at": "0005-01-01T00:00:00Z"}
    with serving(system.http_app()) as url, httpx.Client(base_url=url) as http:
        api = Api(http, token, "acme")
        body = {
            "name": "antiquity",
            "workflow": "echo",
            "input": {"message": "ave"},
            "spec": spec,
            "overlap": "allow_all",
            "missed": "skip",
        }
        created = api.post("/schedules", body)
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        window = {"from": "0005-01-01T00:00:00Z", "to": "0005-01-03T00:00:00Z"}
        filled = api.post(f"/schedules/{sid}/backfill", {**window, "overlap": "allow_all"})
        assert filled.status_code == 200, filled.text
        assert sorted(instant(o["occurrence_at"]) for o in filled.json()["items"]) == FIRES
        listed = api.get(f"/schedules/{sid}/occurrences").json()["items"]
        assert sorted(instant(o["occurrence_at"]) for o in listed) == FIRES
        preview = api.get(
            "/schedule-preview",
            interval_ms=spec["interval_ms"],
            starts_at=spec["starts_at"],
            count=2,
            **{"from": "0005-01-01T00:00:00Z"},
        )
        assert preview.status_code == 200, preview.text
        assert [instant(item["fire_at"]) for item in preview.json()["items"]] == FIRES
        refused = api.post(f"/schedules/{sid}/backfill", {**window, "from": window["to"]})
        assert refused.status_code == 422, refused.text
        assert "(0005-01-03T00:00:00.000Z)" in refused.json()["error"]["message"]

        dispatch_due(system.services, "runner", 10)
        run_ids = [o["run_id"] for o in api.get(f"/schedules/{sid}/occurrences").json()["items"]]
        assert all(run_ids), "every backfilled occurrence was dispatched"
        origins = [api.get(f"/runs/{run_id}").json()["origin"] for run_id in run_ids]
        assert sorted(instant(origin["occurrence_at"]) for origin in origins) == FIRES

        with PunctualClient(url, token, "acme") as client:
            occurrences = client.list_occurrences(sid).items
            assert sorted(o.occurrence_at for o in occurrences) == FIRES
            previewed = client.preview_schedule(
                interval_ms=spec["interval_ms"], starts_at=FIRST, after=FIRST, count=2
            )
            assert [item.fire_at for item in previewed.items] == FIRES
            runs = [client.get_run(run_id) for run_id in run_ids]
            assert sorted(r.origin.occurrence_at for r in runs if r.origin.occurrence_at) == FIRES
            assert client.get_schedule(sid).id == sid

        form = Forms(http.get("/ui/").text).forms["/ui/sign-in"]
        signed_in = http.post("/ui/sign-in", data={**form, "token": token})
        assert signed_in.status_code == 303, signed_in.text
        for page in (f"/ui/t/acme/schedules/{sid}", "/ui/t/acme/schedules", "/ui/t/acme/runs"):
            shown = http.get(page)
            assert shown.status_code == 200, (page, shown.text)
        run_page = http.get(f"/ui/t/acme/runs/{run_ids[0]}")
        assert run_page.status_code == 200, run_page.text
        shown_at = r'datetime="0005-01-0[23]T00:00:00\.000Z">0005-01-0[23] 00:00:00 UTC<'
        assert re.search(shown_at, run_page.text), "the occurrence's instant, padded"
