"""``/metrics`` of the in-process app (SPEC OP-4, docs/operations.md "Metrics"): the
process and runtime collectors, request durations by route template and status with no
raw path in any label, and the queue gauges read from the store at scrape time, on
SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from punctual import bootstrap
from punctual.adapters.http.timing import UNMATCHED
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import echo_start, in_process, live_worker, member_api

DURATION = "punctual_http_request_duration_seconds"


def scrape(client: TestClient) -> dict[str, list[Sample]]:
    """Family name -> its samples."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(response.text)}


def value(families: dict[str, list[Sample]], name: str, **labels: str) -> float:
    (found,) = [s.value for s in families[name] if s.name == name and s.labels == labels]
    return found


def requests_counted(families: dict[str, list[Sample]]) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in families[DURATION]
        if s.name == f"{DURATION}_count"
    }


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    with in_process(system) as client:
        yield client


def test_the_process_and_runtime_collectors_are_on_the_process_registry(
    client: TestClient,
) -> None:
    families = scrape(client)
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"} <= set(
        families
    )
    assert {"python_gc_objects_collected", "python_gc_collections", "python_info"} <= set(families)
    assert value(families, "process_resident_memory_bytes") > 0


def test_requests_are_timed_by_route_template_and_status_never_by_raw_path(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client, tenant="acme-" + secrets.token_hex(3))
    run_id = "run_" + secrets.token_hex(12)
    assert api.get(f"/runs/{run_id}").status_code == 404
    assert api.get("/runs").status_code == 200
    assert client.get(f"/no/such/{run_id}").status_code == 404
    assert client.delete("/healthz").status_code == 405
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs-assets/swagger-ui.css").status_code == 200

    families = scrape(client)
    counted = requests_counted(families)
    assert counted[("GET", "/v1/tenants/{tenant}/runs/{run_id}", "404")] == 1
    assert counted[("GET", "/v1/tenants/{tenant}/runs", "200")] == 1
    assert counted[("GET", UNMATCHED, "404")] == 1
    assert counted[("DELETE", "/healthz", "405")] == 1
    assert counted[("GET", "/openapi.json", "200")] == 1
    assert counted[("GET", "/docs-assets/{path}", "200")] == 1
    buckets = [s for s in families[DURATION] if s.name == f"{DURATION}_bucket"]
    assert buckets, "the histogram has its buckets"
    for sample in (s for samples in families.values() for s in samples):
        for label in sample.labels.values():
            assert api.tenant not in label and run_id not in label, (sample.name, label)


def test_the_metrics_page_is_counted_after_it_answered(client: TestClient) -> None:
    scrape(client)
    assert requests_counted(scrape(client))[("GET", "/metrics", "200")] >= 1


def test_the_queue_gauges_follow_a_due_start_and_its_pending_run(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    families = scrape(client)
    assert value(families, "punctual_due_backlog") == 0
    assert value(families, "punctual_due_oldest_age_seconds") == 0
    for queue in ("interactive", "standard", "batch"):
        assert value(families, "punctual_runs_pending", task_queue=queue) == 0
        assert value(families, "punctual_runs_pending_oldest_age_seconds", task_queue=queue) == 0

    live_worker(system)
    api = member_api(system, client)
    created = api.create_due(echo_start(workload_class="batch"))
    assert created.status_code == 201, created.text
    families = scrape(client)
    assert value(families, "punctual_due_backlog") == 1
    assert value(families, "punctual_due_oldest_age_seconds") >= 0
    assert value(families, "punctual_runs_pending", task_queue="batch") == 0

    assert dispatch_due(system.services, "wrk_metrics", 10).claimed == 1
    families = scrape(client)
    assert value(families, "punctual_due_backlog") == 0
    assert value(families, "punctual_runs_pending", task_queue="batch") == 1
    assert value(families, "punctual_runs_pending", task_queue="standard") == 0
    assert value(families, "punctual_runs_pending_oldest_age_seconds", task_queue="batch") >= 0


def test_the_queue_gauges_are_left_out_while_the_store_cannot_be_read(
    system: bootstrap.Punctual, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable() -> None:
        raise RuntimeError("the database is unavailable")

    monkeypatch.setattr(system.store, "transaction", lambda **_: unreadable())
    families = scrape(client)
    assert "punctual_due_backlog" not in families
    assert "process_cpu_seconds" in families, "the rest of the page is served"


def test_the_internal_tree_is_timed_under_its_mount(database_url: str, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    settings = make_settings(database_url, tmp_path, internal_token=token)
    system = bootstrap.build(settings)
    try:
        with in_process(system) as client:
            assert client.get("/internal/health").status_code == 401
            assert (
                client.get("/internal/health", headers={"X-Internal-Token": token}).status_code
                == 200
            )
            counted = requests_counted(scrape(client))
    finally:
        system.close()
    assert counted[("GET", "/internal/health", "200")] == 1
    assert counted[("GET", "/internal/{path}", "401")] == 1, "refused by the guard"
