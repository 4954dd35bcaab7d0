"""A client generated from ``/openapi.json`` works (IF-1): what a newcomer in another
language would do, done in Python with a maintained generator from the package index
(``openapi-python-client``). The generated package is typed from the document alone; it
drives create → get → cancel of a scheduled start against a real uvicorn on loopback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import holidays
import httpx
import pytest
from openapi_python_client import generate
from openapi_python_client.config import Config, ConfigFile, MetaType

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.support.api import register_demo
from tests.support.server import serving

PACKAGE = "punctual_generated"
TENANT = "acme"
TIMEOUT = httpx.Timeout(30.0)
"""Longer than the server's bounded wait (10 s in the tests), as a client's should be: an
answer that waited its full bound, or a loaded machine, must not look like a dead server."""


@pytest.fixture
def served(system: bootstrap.Punctual) -> Iterator[tuple[str, str]]:
    """The base URL of a real server and a member's token."""
    register_demo(system)
    token = identity.ensure_member_token(system.services, TENANT, "alice", Role.MEMBER).token
    with serving(system.http_app()) as url:
        yield url, token


def generated_package(url: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Fetch the document from the server, generate a client package from it, import it."""
    document = directory / "openapi.json"
    document.write_bytes(
        httpx.get(f"{url}/openapi.json", timeout=TIMEOUT).raise_for_status().content
    )
    config = Config.from_sources(
        ConfigFile(post_hooks=[], project_name_override=PACKAGE, package_name_override=PACKAGE),
        MetaType.NONE,
        document,
        "utf-8",
        overwrite=True,
        output_path=directory / PACKAGE,
    )
    problems = generate(config=config)
    # Every operation and model is generated: nothing in the document is beyond a generator.
    assert [f"{p.header}: {p.detail}" for p in problems] == []
    monkeypatch.syspath_prepend(str(directory))
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(PACKAGE)


def module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_generated_client_creates_gets_and_cancels_a_start(
    served: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = served
    package = generated_package(url, tmp_path, monkeypatch)
    api = module("api.scheduled_starts")
    create_start = importlib.import_module(f"{api.__name__}.create_start")
    get_start = importlib.import_module(f"{api.__name__}.get_start")
    cancel_start = importlib.import_module(f"{api.__name__}.cancel_start")
    models = module("models")

    start_at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    body = models.CreateStartBody.from_dict(
        {
            "workflow": "echo",
            "input": {"message": "from a generated client"},
            "business_request_id": "gen-1",
            "start_at": start_at.astimezone(ZoneInfo("Europe/Berlin")).isoformat(),
            "time_zone": "Europe/Berlin",
            "workload_class": "standard",
            "attributes": {"customer": "c-17"},
        }
    )
    with package.AuthenticatedClient(base_url=url, token=token, timeout=TIMEOUT) as client:
        created = create_start.sync_detailed(
            TENANT, client=client, body=body, idempotency_key="g-1"
        )
        assert created.status_code == 201
        start = created.parsed
        assert isinstance(start, models.Start)
        assert start.state.value == "scheduled" and start.version == 1
        assert start.start_at == start_at
        assert start.attributes.additional_properties == {"customer": "c-17"}
        assert start.dispatch is None

        replayed = create_start.sync(TENANT, client=client, body=body, idempotency_key="g-1")
        assert isinstance(replayed, models.Start) and replayed.id == start.id

        # What the document gives a default is optional in the generated model too.
        minimal = models.CreateStartBody(
            workflow="echo",
            input_={"message": "only what is required"},
            business_request_id="gen-2",
            start_at=start_at,
            workload_class="standard",
        )
        plain = create_start.sync(TENANT, client=client, body=minimal, idempotency_key="g-0")
        assert isinstance(plain, models.Start)
        assert plain.time_zone is None
        assert plain.attributes.additional_properties == {}

        fetched = get_start.sync(TENANT, start.id, client=client)
        assert isinstance(fetched, models.Start)
        assert (fetched.id, fetched.workflow, fetched.business_request_id) == (
            start.id,
            "echo",
            "gen-1",
        )

        stale = models.CancelBody(version=fetched.version + 1)
        refused = cancel_start.sync(
            TENANT, start.id, client=client, body=stale, idempotency_key="g-2"
        )
        assert isinstance(refused, models.Error)
        assert refused.error.code == "version_conflict"
        assert refused.error.details.additional_properties["current_version"] == 1

        cancel = models.CancelBody(version=fetched.version, reason="not needed")
        canceled = cancel_start.sync(
            TENANT, start.id, client=client, body=cancel, idempotency_key="g-3"
        )
        assert isinstance(canceled, models.Start)
        assert canceled.state.value == "canceled" and canceled.version == 2

        missing = get_start.sync(TENANT, "sst_unknown", client=client)
        assert isinstance(missing, models.Error) and missing.error.code == "not_found"


def test_a_generated_client_reads_pages_and_health(
    served: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = served
    package = generated_package(url, tmp_path, monkeypatch)
    list_definitions = module("api.tenant.list_definitions")
    tenant_health = module("api.tenant.tenant_health")
    list_starts = module("api.scheduled_starts.list_starts")
    models = module("models")
    with package.AuthenticatedClient(base_url=url, token=token, timeout=TIMEOUT) as client:
        definitions = list_definitions.sync(TENANT, client=client)
        assert isinstance(definitions, models.DefinitionPage)
        assert {d.name for d in definitions.items} >= {"echo", "sleep", "fail", "score"}
        page = list_starts.sync(TENANT, client=client, limit=10)
        assert isinstance(page, models.StartPage) and page.items == []
        report = tenant_health.sync(TENANT, client=client)
        assert isinstance(report, models.Health) and report.status.value == "ok"
        assert report.holidays_version == holidays.__version__
    with package.AuthenticatedClient(base_url=url, token="not-a-token", timeout=TIMEOUT) as client:
        refused = list_starts.sync(TENANT, client=client)
        assert isinstance(refused, models.Error) and refused.error.code == "unauthenticated"
