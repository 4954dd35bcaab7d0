"""``/metrics`` of the in-process app (SPEC OP-4, docs/operations.md "Metrics"): the
process and runtime collectors, request durations by route template and status with no
raw path in any label, and the queue gauges read from the store at scrape time, on
SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from punctual import bootstrap
from punctual.adapters.http.timing import UNMATCHED
from punctual.adapters.observability import QueueGauges
from punctual.usecases.running.queues import QUEUE_READ_LOCK_TIMEOUT, QueueDepths
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


@pytest.mark.postgres
def test_a_scrape_behind_a_lock_answers_without_the_queue_gauges(
    pg_url: str, tmp_path: Path
) -> None:
    """A migration or an operator holding a table lock must not hang ``/metrics`` (or the
    pool's connections): the read gives up after its bound, the rest is served."""
    system = bootstrap.build(make_settings(pg_url, tmp_path))
    try:
        with in_process(system) as client, system.store.engine.connect() as holder:
            holder.exec_driver_sql("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")  # autobegun
            began = time.monotonic()
            families = scrape(client)
            waited = time.monotonic() - began
            holder.rollback()
            assert "punctual_due_backlog" not in families
            assert "process_cpu_seconds" in families
            assert waited < QUEUE_READ_LOCK_TIMEOUT + 10, "bounded by the lock timeout"
            assert "punctual_due_backlog" in scrape(client), "read again once the lock is gone"
    finally:
        system.close()


def test_one_scrape_reads_the_store_at_a_time() -> None:
    """A scrape that comes while another still reads leaves the gauges out at once."""
    reading, release = threading.Event(), threading.Event()

    def slow_read() -> QueueDepths:
        reading.set()
        assert release.wait(10)
        return QueueDepths(due_starts=3, due_oldest_seconds=1.0)

    gauges = QueueGauges(slow_read)
    first: list[Metric] = []
    worker = threading.Thread(target=lambda: first.extend(gauges.collect()))
    worker.start()
    try:
        assert reading.wait(10)
        assert list(gauges.collect()) == [], "the second scrape does not wait"
    finally:
        release.set()
        worker.join(10)
    assert first[0].name == "punctual_due_backlog"
    assert first[0].samples[0].value == 3


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
