"""``/openapi.json`` tells the truth (IF-1, API.md "OpenAPI"): every route declares every
status it answers with a named schema, errors with the envelope and their codes, and the
named models are exactly what the routes answer (checked against live answers)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from punctual import bootstrap, resources
from punctual.domain.followthrough import FollowThroughStatus
from punctual.domain.permissions import Role
from punctual.domain.recurrence import DstAdjustment
from punctual.domain.runs import DefinitionState, RunState
from punctual.domain.schedules import (
    MissedPolicy,
    OccurrenceOrigin,
    OverlapPolicy,
    ScheduleState,
    VersionPolicy,
)
from punctual.domain.starts import StartState
from punctual.ports.records import CursorMove
from punctual.usecases.recurring.generation import generate
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import Api, echo_start, live_worker, member_api

NAMED = [
    "Start",
    "Schedule",
    "Occurrence",
    "Run",
    "Definition",
    "Notification",
    "Webhook",
    "Health",
    "Error",
    *(page.__name__ for page in resources.PAGES.values()),
]
BATCH_CREATE = ("post", "/v1/tenants/{tenant}/scheduled-starts/batch")
REF = re.compile(r"^#/components/schemas/(.+)$")


@pytest.fixture
def document(system: bootstrap.Punctual) -> dict[str, Any]:
    with TestClient(system.http_app()) as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, entries in document["paths"].items():
        for method, operation in entries.items():
            yield method, path, operation


def schema_of(answer: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = answer["content"]["application/json"]["schema"]
    return schema


def named(schema: dict[str, Any]) -> set[str]:
    """The component names a response schema is made of (a ref or a union of refs)."""
    parts = schema.get("anyOf", [schema])
    names = {REF.match(part.get("$ref", "")) for part in parts}
    assert None not in names, schema
    return {match.group(1) for match in names if match is not None}


def test_the_document_names_the_components_api_md_lists(document: dict[str, Any]) -> None:
    components = document["components"]["schemas"]
    for name in NAMED:
        assert name in components, name
    error = components["Error"]
    assert error["required"] == ["error"]
    detail = components["ErrorDetail"]
    assert set(detail["required"]) == {"code", "message", "details"}


def test_every_route_declares_each_status_with_a_named_schema(document: dict[str, Any]) -> None:
    for method, path, operation in operations(document):
        label = f"{method.upper()} {path}"
        answers = operation["responses"]
        assert answers, label
        for status, answer in answers.items():
            assert answer["description"], (label, status)
            if status == "204" or path == "/metrics":
                continue
            names = named(schema_of(answer))
            assert names, (label, status)
            if int(status) >= 400:
                assert names == {"Error"}, (label, status)
                assert "Codes: `" in answer["description"], (label, status)
                example = answer["content"]["application/json"]["example"]
                assert set(example["error"]) == {"code", "message", "details"}, label
                assert f"`{example['error']['code']}`" in answer["description"], label
        if not path.startswith("/v1/"):
            continue
        for status in ("401", "404", "422", "503"):
            assert status in answers, (label, status)
        if method != "get" and (method, path) != BATCH_CREATE:
            for status in ("400", "409", "413"):
                assert status in answers, (label, status)
            assert "InProgress" in named(schema_of(answers["202"])), label


def test_fastapi_default_validation_body_is_not_documented(document: dict[str, Any]) -> None:
    """The API answers 422 with the error envelope, never FastAPI's ``detail`` list."""
    components = document["components"]["schemas"]
    assert "HTTPValidationError" not in components
    assert "ValidationError" not in components
    for method, path, operation in operations(document):
        if "422" in operation["responses"]:
            assert named(schema_of(operation["responses"]["422"])) == {"Error"}, (method, path)


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    components = document["components"]["schemas"]
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                found.append(value["$ref"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document)
    assert found
    for ref in found:
        match = REF.match(ref)
        assert match is not None and match.group(1) in components, ref
    assert "$defs" not in str(document)


def test_request_bodies_are_named_components(document: dict[str, Any]) -> None:
    for method, path, operation in operations(document):
        body = operation.get("requestBody")
        if body is None:
            assert method in ("get", "delete") or path.endswith(
                (
                    "/cancel",
                    "/terminate",
                    "/read",
                    "/acknowledge",
                    "/test",
                    "/redeliver",
                    "/release",
                )
            ), (method, path)
            continue
        assert body["required"] is True
        assert named(schema_of(body)), (method, path)


ONE_OF_TWO = {("CreateScheduleBody", "spec"), ("CreateScheduleBody", "specs")} | {
    ("PutScheduleBody", "spec"),
    ("PutScheduleBody", "specs"),
}
"""A create sends ``spec`` or ``specs``, never both: neither has a default of its own."""


def test_every_optional_body_field_states_its_default(document: dict[str, Any]) -> None:
    """A generated client makes a field without a default required: every field a body may
    leave out says what leaving it out means."""
    components = document["components"]["schemas"]
    bodies = {
        ref.rsplit("/", 1)[-1]
        for _, _, operation in operations(document)
        if (body := operation.get("requestBody")) is not None
        for ref in [schema_of(body)["$ref"]]
    }
    bodies |= {"BatchCreateItem", "RegressionMetricBody"}
    undeclared = [
        (name, field)
        for name in sorted(bodies)
        for field, schema in components[name].get("properties", {}).items()
        if field not in components[name].get("required", [])
        and "default" not in schema
        and (name, field) not in ONE_OF_TWO
    ]
    assert undeclared == []


def test_a_start_s_optional_fields_state_their_defaults(document: dict[str, Any]) -> None:
    start = document["components"]["schemas"]["CreateStartBody"]
    assert "workload_class" in start["required"], "API.md: only time_zone, attributes, traceparent"
    assert start["properties"]["attributes"]["default"] == {}
    assert start["properties"]["time_zone"]["default"] is None


def test_operation_ids_are_the_route_names(document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids))
    assert {"create_start", "get_start", "cancel_start", "list_runs", "tenant_health"} <= set(ids)
    for identifier in ids:
        assert re.fullmatch(r"[a-z][a-z_]*", identifier), identifier


def test_query_parameters_state_what_they_hold(document: dict[str, Any]) -> None:
    starts = document["paths"]["/v1/tenants/{tenant}/scheduled-starts"]["get"]
    parameters = {p["name"]: p["schema"] for p in starts["parameters"]}
    assert parameters["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "title": "Limit",
    }
    assert set(parameters["state"]["enum"]) == {s.value for s in StartState}
    preview = document["paths"]["/v1/tenants/{tenant}/schedule-preview"]["get"]
    names = {p["name"] for p in preview["parameters"]}
    assert {"from", "cron", "time_zone", "interval_ms", "starts_at", "count"} <= names


def test_examples_come_from_the_contract(document: dict[str, Any]) -> None:
    components = document["components"]["schemas"]
    [start] = components["Start"]["examples"]
    resources.Start.model_validate(start)
    [schedule] = components["Schedule"]["examples"]
    resources.Schedule.model_validate(schedule)
    create = components["CreateStartBody"]["examples"][0]
    assert create["business_request_id"] == "appt-42"


@pytest.mark.parametrize(
    ("alias", "values"),
    [
        (resources.StartState, StartState),
        (resources.RunState, RunState),
        (resources.DefinitionState, DefinitionState),
        (resources.DstAdjustment, DstAdjustment),
        (resources.FollowThroughStatus, FollowThroughStatus),
        (resources.Overlap, OverlapPolicy),
        (resources.Missed, MissedPolicy),
        (resources.VersionPolicy, VersionPolicy),
        (resources.Role, Role),
        (resources.ScheduleState, ScheduleState),
        (resources.OccurrenceOrigin, OccurrenceOrigin),
    ],
)
def test_documented_choices_are_the_domain_s(alias: Any, values: Any) -> None:
    assert set(typing.get_args(alias)) == {member.value for member in values}


# --------------------------------------------------------------------------- live answers


def undeclared(value: Any, where: str = "") -> list[str]:
    """Fields of an answer that its model does not declare, anywhere in the tree."""
    found: list[str] = []
    if isinstance(value, resources.Resource):
        found += [f"{where}.{name}" for name in value.model_extra or {}]
        for name in type(value).model_fields:
            found += undeclared(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += undeclared(item, f"{where}[{index}]")
    return found


def exactly(model: type[BaseModel], body: Any) -> Any:
    """``body`` parsed by ``model``, which must declare every field the API sent."""
    parsed = model.model_validate(body)
    assert undeclared(parsed, model.__name__) == []
    return parsed


def test_the_models_are_exactly_what_the_routes_answer(system: bootstrap.Punctual) -> None:
    """One of every resource, read and changed through the API, parsed by its model: no
    field missing (pydantic refuses) and none undeclared. Mutations are resent with their
    key while they answer ``202 in_progress``, as a client does (a loaded machine can
    outlast the bounded wait); the ``202`` model is checked on its own below."""
    live_worker(system)
    with TestClient(system.http_app()) as client:
        admin = member_api(system, client, subject="root", role=Role.ADMIN)
        alice = member_api(system, client, subject="alice")
        check = _Checker()

        start = check(resources.Start, admin.post("/scheduled-starts", echo_start()), 201)
        check(resources.StartPage, admin.get("/scheduled-starts"))
        check(
            resources.Start,
            admin.post(f"/scheduled-starts/{start.id}/cancel", {"version": 1, "reason": "r"}),
        )
        due = check(resources.Start, admin.create_due(echo_start()), 201)
        dispatch_due(system.services, "runner-openapi", 10)
        dispatched = check(resources.Start, admin.get(f"/scheduled-starts/{due.id}"))
        assert dispatched.dispatch is not None
        run = check(resources.Run, admin.get(f"/runs/{dispatched.dispatch.run_id}"))
        check(resources.Run, admin.post(f"/runs/{run.id}/cancel", None))
        check(resources.RunPage, admin.get("/runs"))
        batch = {"items": [{"idempotency_key": "b-1", **echo_start()}, {"idempotency_key": "b-2"}]}
        result = check(resources.BatchCreateResult, admin.post("/scheduled-starts/batch", batch))
        assert [type(item.body) for item in result.items] == [resources.Start, resources.Error]

        cron = {
            "name": "nightly",
            "workflow": "score",
            "input": {"score": 1},
            "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
            "overlap": "skip",
            "missed": "catch_up",
            "regression": {"metrics": [{"path": "metrics.score", "better": "higher"}]},
        }
        schedule = check(resources.Schedule, alice.post("/schedules", cron), 201)
        check(resources.SchedulePage, admin.get("/schedules"))
        check(
            resources.Schedule,
            admin.post(f"/schedules/{schedule.id}/pause", {"version": 1}),
        )
        behind = _behind(system, alice)
        generate(system.services, 100)
        listed = f"/schedules/{behind}/occurrences"
        waiting = check(resources.OccurrencePage, alice.get(listed, state="scheduled")).items
        cancel = {"version": waiting[0].version}
        check(resources.Occurrence, alice.post(f"{listed}/{waiting[0].id}/cancel", cancel))
        dispatch_due(system.services, "runner-openapi", 10)
        page = check(resources.OccurrencePage, alice.get(listed))
        assert {item.state for item in page.items} >= {"skipped", "canceled", "dispatched"}
        assert any(item.range is not None for item in page.items)
        preview = {"cron": "30 2 * * *", "time_zone": "Europe/Berlin", "count": 3}
        check(resources.SchedulePreview, admin.get("/schedule-preview", **preview))

        check(resources.DefinitionPage, admin.get("/definitions"))
        check(
            resources.Member,
            admin.post("/members", {"subject": "bob", "role": "viewer"}),
            201,
        )
        check(resources.IssuedToken, admin.post("/tokens", {"subject": "bob"}), 201)
        check(resources.TokenPage, admin.get("/tokens"))

        # Removing alice auto-disables her schedules and tells the admins.
        assert admin.delete("/members/alice").status_code == 204
        notes = check(resources.NotificationPage, admin.get("/notifications"))
        assert notes.items
        check(
            resources.Notification,
            admin.post(f"/notifications/{notes.items[0].id}/read", None),
        )

        hook = {"url": "http://127.0.0.1:9/hook", "secret": "s"}
        webhook = check(resources.Webhook, admin.post("/webhooks", hook), 201)
        check(resources.WebhookPage, admin.get("/webhooks"))
        check(resources.Webhook, admin.get(f"/webhooks/{webhook.id}"))
        check(resources.Queued, admin.post(f"/webhooks/{webhook.id}/test"), 202)
        deliveries = check(resources.DeliveryPage, admin.get(f"/webhooks/{webhook.id}/deliveries"))
        assert deliveries.items

        with system.store.transaction() as tx:
            tx.findings.raise_finding(
                admin.tenant, "start_failed", due.id, "error", "m", system.services.clock.now()
            )
        health = check(resources.Health, admin.get("/health"))
        assert health.findings and health.workers
        finding = health.findings[0]
        check(
            resources.Finding,
            admin.post(f"/health/findings/{finding.id}/acknowledge", None),
        )

        check(resources.Error, admin.get("/scheduled-starts/sst_none"), 404)
        check(resources.InProgress, _in_progress(), 202)
        check(resources.Liveness, client.get("/healthz"))
        check(resources.Readiness, client.get("/readyz"))


class _Checker:
    def __call__(self, model: type[BaseModel], response: Any, status: int = 200) -> Any:
        if isinstance(response, dict):
            return exactly(model, response)
        assert response.status_code == status, response.text
        return exactly(model, response.json())


def _in_progress() -> dict[str, Any]:
    from punctual.usecases.kernel.idempotency import IN_PROGRESS_BODY

    return dict(IN_PROGRESS_BODY)


def _behind(system: bootstrap.Punctual, api: Api) -> str:
    """An interval schedule ten fires behind, as after downtime: generation records a
    missed range and catches up on the rest."""
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    body = {
        "name": "behind",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000, "starts_at": first.isoformat()},
        "overlap": "allow_all",
        "missed": "catch_up",
        "max_catch_up": 2,
        "catch_up_window": 240,
    }
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    schedule_id: str = response.json()["id"]
    with system.store.transaction() as tx:
        tx.schedules.move_cursors([CursorMove(schedule_id, first - timedelta(seconds=1), first)])
    return schedule_id
