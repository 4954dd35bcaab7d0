"""Every string a request body may carry, at the longest length the API accepts, is stored
on both stores: never a 500 on one of them (SPEC FT-3, FT-7).

SQLite does not enforce ``VARCHAR(n)``; PostgreSQL refuses a longer value, so a column
narrower than what the schema admits is a 500 on PostgreSQL only. A member whose subject
had 41-200 characters could be added on SQLite but was a 500 there: the idempotency
record kept the subject as its ``resource_id`` in 40 characters. Such a member could
never be removed, its tokens stayed valid and its schedules were never auto-disabled.

The walk reads the request models' JSON schemas (what ``/openapi.json`` documents), so a
new string field is covered as soon as it exists: a field with ``maxLength`` is sent at that
length and must be accepted unless ``REFUSED_AT_MAX`` says why no value of that length is
valid; a field without one is sent very long and must be refused or stored, never a 500.
Each request is sent with a 255-character ``Idempotency-Key`` and replayed with it.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from typer.testing import CliRunner

from punctual import bootstrap
from punctual.adapters.http.routes.internal import TOKEN_HEADER, HostHoldBody
from punctual.adapters.http.schemas import REQUEST_BODIES
from punctual.adapters.stores.sql import tables as t
from punctual.cli.main import app as cli
from punctual.domain.permissions import Role
from punctual.ports.records import WorkerRecord
from punctual.ports.webhooks import SendResult
from punctual.settings import Settings
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker
from punctual.usecases.tenancy import identity
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import make_settings
from tests.support.api import Api, in_process, member_api

TENANT = "acme"
INTERNAL_TOKEN = "internal-token-for-the-field-length-tests-0123"
LONG_WORKFLOW = "w" * 200
"""A registered workflow with the longest name a request may give."""
LONG_CLASS = "c" * 64
"""A configured workload class with the longest name a request may give."""
UNBOUNDED_PROBE = 20_000
"""The length sent for a string the schema does not bound (well under the body limit)."""
KEY_LENGTH = 255

KEY = "<key>"
VALUE = "<value>"
"""Path steps of a walked leaf: a key of an object, or any of its values."""
LeafPath = tuple[str | int, ...]

MODELS: tuple[type[BaseModel], ...] = (*REQUEST_BODIES, HostHoldBody)
"""Every request body the API parses: the ``/v1`` ones and the host's internal hold."""


# --------------------------------------------------------------------------- the walk


@dataclass(frozen=True)
class Leaf:
    model: str
    path: LeafPath
    max_length: int | None

    @property
    def id(self) -> str:
        return f"{self.model}.{'.'.join(str(step) for step in self.path)}"


def _string_leaves(
    schema: dict[str, Any], defs: dict[str, Any], path: LeafPath
) -> Iterator[tuple[LeafPath, int | None]]:
    """(path, maxLength) of every string under ``schema``, through references and unions."""
    if "$ref" in schema:
        yield from _string_leaves(defs[schema["$ref"].rsplit("/", 1)[1]], defs, path)
        return
    for branch in [*schema.get("anyOf", []), *schema.get("oneOf", [])]:
        yield from _string_leaves(branch, defs, path)
    kind = schema.get("type")
    if kind == "string" and "format" not in schema:  # an instant is no free text
        yield path, schema.get("maxLength")
    elif kind == "object":
        for name, field in schema.get("properties", {}).items():
            yield from _string_leaves(field, defs, (*path, name))
        if "propertyNames" in schema:
            yield (*path, KEY), schema["propertyNames"].get("maxLength")
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            yield from _string_leaves(values, defs, (*path, VALUE))
    elif kind == "array" and isinstance(schema.get("items"), dict):
        yield from _string_leaves(schema["items"], defs, (*path, 0))


def string_leaves() -> list[Leaf]:
    """Every string of every request model, as the OpenAPI document describes it; a union
    of bounded and unbounded strings counts as its widest bound."""
    _, document = models_json_schema(
        [(model, "validation") for model in MODELS], ref_template="#/components/schemas/{model}"
    )
    defs: dict[str, Any] = document["$defs"]
    leaves: dict[tuple[str, LeafPath], Leaf] = {}
    for model in MODELS:
        for path, max_length in _string_leaves(defs[model.__name__], defs, ()):
            known = leaves.get((model.__name__, path))
            if known is None or (max_length or 0) > (known.max_length or 0):
                leaves[(model.__name__, path)] = Leaf(model.__name__, path, max_length)
    return sorted(leaves.values(), key=lambda leaf: leaf.id)


LEAVES = string_leaves()
BOUNDED = [leaf for leaf in LEAVES if leaf.max_length is not None]
UNBOUNDED = [leaf for leaf in LEAVES if leaf.max_length is None]

REFUSED_AT_MAX: dict[str, str] = {
    "time_zone": "no IANA zone name has 64 characters (the longest has 32)",
    "subject_kind": "one of four kinds, none 20 characters long",
    "subject_id": "no record id has 200 characters: 404",
    "HostHoldBody.tenant": "tenant ids have at most 64 characters: 404",
}
"""Fields whose maximum admits no valid value (by field name, or model.field)."""


def refused_at_max(leaf: Leaf) -> bool:
    names = {f"{leaf.model}.{leaf.path[-1]}", str(leaf.path[-1])}
    return bool(names & set(REFUSED_AT_MAX))


def max_value(leaf: Leaf) -> str:
    """A valid value of exactly the maximum length where one exists."""
    assert leaf.max_length is not None
    length = leaf.max_length
    last = leaf.path[-1]
    if last == "workflow":
        assert length == len(LONG_WORKFLOW), "register a workflow with the new longest name"
        return LONG_WORKFLOW
    if last == "workload_class":
        assert length == len(LONG_CLASS), "configure a class with the new longest name"
        return LONG_CLASS
    if last == "url":
        prefix = "http://127.0.0.1:9/"
        return prefix + "p" * (length - len(prefix))
    return "a" * length


def placed(body: dict[str, Any], path: LeafPath, value: str) -> dict[str, Any]:
    """``body`` with ``value`` at ``path``; the base body holds every nested object, so a new
    nested structure fails here (with a KeyError naming it) until its base is added."""
    body = copy.deepcopy(body)
    *parents, field, last = ("", *path)
    container: Any = {"": body}
    for step in parents:
        container = container[step]
    if last == KEY:
        container[field] = {value: "v"}
    elif last == VALUE:
        container[field] = {"k": value}
    elif last == 0 and not isinstance(container[field][0], dict):
        container[field] = [value]
    else:
        container[field][last] = value
    return body


# --------------------------------------------------------------------------- the world


def key() -> str:
    """The longest ``Idempotency-Key`` a client may send, unique per request."""
    return secrets.token_hex(8).ljust(KEY_LENGTH, "k")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class AcceptingSender:
    """Every destination is allowed (the URLs name no real host) and nothing is sent."""

    def destination_problem(self, url: str) -> str | None:
        return None

    def send(self, url: str, body: bytes, headers: dict[str, str]) -> SendResult:
        raise AssertionError("no webhook is delivered in these tests")


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    classes = {LONG_CLASS: {"task_queue": "standard", "priority": 3}}
    return make_settings(
        database_url,
        tmp_path,
        internal_token=INTERNAL_TOKEN,
        workload_classes=classes,
        tenant_defaults={"allowed_workload_classes": ["standard", LONG_CLASS]},
    )


def _register_workflows(system: bootstrap.Punctual) -> None:
    """The demo's definitions and one with the longest name, loaded by a live worker."""
    app = load_app("punctual.demo:app")
    declared = declared_definitions(app)
    echo = next(item for item in declared if item.name == "echo")
    declared.append(
        DeclaredDefinition(
            name=LONG_WORKFLOW,
            version=echo.version,
            artifact=echo.artifact,
            input_schema=echo.input_schema,
            execution_timeout_seconds=echo.execution_timeout_seconds,
        )
    )
    now = system.services.clock.now()
    worker = WorkerRecord(
        id="wrk_field_lengths",
        engine="local",
        host="test",
        task_queues=["standard"],
        loaded=[(d.name, d.version, d.artifact) for d in declared],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    register_worker(system.services, worker, declared)


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    _register_workflows(system)
    system.services.webhooks = AcceptingSender()
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


Response = httpx.Response | httpx2.Response
"""What the in-process TestClient (httpx2) or a real httpx client returns."""
Send = Callable[[str], Response]
"""One request of a scenario, sent with the given ``Idempotency-Key``."""


def request(api: Api, method: str, suffix: str, body: Any = None) -> Send:
    def send(idempotency_key: str) -> Response:
        headers = api.headers(idempotency_key)
        return api.client.request(method, api.path(suffix), headers=headers, json=body)

    return send


def created(response: Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


# --------------------------------------------------------------------------- base bodies


def start_body() -> dict[str, Any]:
    return {
        "workflow": "echo",
        "input": {"message": "hi"},
        "business_request_id": "req-1",
        "start_at": iso(datetime.now(UTC) + timedelta(days=1)),
        "time_zone": "UTC",
        "workload_class": "standard",
        "attributes": {"team": "a"},
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }


REGRESSION = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]}


def schedule_body() -> dict[str, Any]:
    return {
        "name": "nightly",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {
            "cron": "30 2 * * *",
            "time_zone": "Europe/Berlin",
            "dst_gap": "shift_to_gap_end",
            "dst_overlap": "first",
        },
        "overlap": "skip",
        "missed": "skip",
        "version_policy": "active_at_fire",
        "workload_class": "standard",
        "regression": copy.deepcopy(REGRESSION),
        "source": "deploy/schedules.toml",
    }


WEBHOOK = {"url": "http://127.0.0.1:9/hook", "events": ["regression"], "secret": "s3cret"}

BASES: dict[str, Callable[[], dict[str, Any]]] = {
    "CreateStartBody": start_body,
    "BatchCreateBody": lambda: {"items": [{**start_body(), "idempotency_key": "item-1"}]},
    "RescheduleBody": lambda: {
        "start_at": iso(datetime.now(UTC) + timedelta(days=2)),
        "time_zone": "UTC",
    },
    "CancelBody": lambda: {"reason": "not needed"},
    "MemberBody": lambda: {"subject": "dora", "role": "member"},
    "TokenBody": lambda: {"subject": "dora"},
    "CreateScheduleBody": schedule_body,
    "PatchScheduleBody": schedule_body,
    "PutScheduleBody": schedule_body,
    "TriggerBody": lambda: {"overlap": "allow_all"},
    "BackfillBody": lambda: {"overlap": "allow_all"},
    "RegressionBody": lambda: copy.deepcopy(REGRESSION),
    "TransferBody": lambda: {"to": "dora"},
    "CreateWebhookBody": lambda: dict(WEBHOOK),
    "PatchWebhookBody": lambda: dict(WEBHOOK),
    "PlaceHoldBody": lambda: {"subject_kind": "tenant", "reason": "incident"},
    "HostHoldBody": lambda: {"tenant": TENANT, "subject_kind": "tenant", "reason": "legal"},
}
"""A valid body per model, holding every nested object the walk may place a value in."""


# --------------------------------------------------------------------------- scenarios


def _start(api: Api) -> dict[str, Any]:
    return created(api.post("/scheduled-starts", start_body()))


def _schedule(api: Api) -> dict[str, Any]:
    return created(api.post("/schedules", schedule_body()))


def _member(api: Api, subject: str) -> None:
    created(api.post("/members", {"subject": subject, "role": "member"}))


def _webhook(api: Api) -> dict[str, Any]:
    return created(api.post("/webhooks", dict(WEBHOOK)))


def _members(api: Api, body: dict[str, Any]) -> list[Send]:
    path = f"/members/{quote(body['subject'], safe='')}"
    return [request(api, "POST", "/members", body), request(api, "DELETE", path)]


def _token(api: Api, body: dict[str, Any]) -> list[Send]:
    _member(api, body["subject"])
    return [request(api, "POST", "/tokens", body)]


def _patch_schedule(api: Api, body: dict[str, Any]) -> list[Send]:
    schedule = _schedule(api)
    changes = {**body, "version": schedule["version"]}
    return [request(api, "PATCH", f"/schedules/{schedule['id']}", changes)]


def _put_schedule(api: Api, body: dict[str, Any]) -> list[Send]:
    path = f"/schedules/by-name/{quote(body['name'], safe='')}"
    return [request(api, "PUT", path, body)]


def _backfill(api: Api, body: dict[str, Any]) -> list[Send]:
    schedule = _schedule(api)
    now = datetime.now(UTC)
    window = {"from": iso(now - timedelta(days=3)), "to": iso(now - timedelta(hours=1))}
    return [request(api, "POST", f"/schedules/{schedule['id']}/backfill", {**body, **window})]


def _transfer(api: Api, body: dict[str, Any]) -> list[Send]:
    _member(api, body["to"])
    schedule = _schedule(api)
    moved = {**body, "version": schedule["version"]}
    return [request(api, "POST", f"/schedules/{schedule['id']}/transfer", moved)]


def _host_hold(api: Api, body: dict[str, Any]) -> list[Send]:
    def send(idempotency_key: str) -> Response:
        del idempotency_key  # the internal tree takes none
        headers = {TOKEN_HEADER: INTERNAL_TOKEN}
        return api.client.post("/internal/holds", headers=headers, json=body)

    return [send]


def _with_version(api: Api, suffix: str, made: dict[str, Any], body: dict[str, Any]) -> Send:
    return request(api, "POST", suffix.format(id=made["id"]), {**body, "version": made["version"]})


SCENARIOS: dict[str, Callable[[Api, dict[str, Any]], list[Send]]] = {
    "CreateStartBody": lambda api, body: [request(api, "POST", "/scheduled-starts", body)],
    "BatchCreateBody": lambda api, body: [request(api, "POST", "/scheduled-starts/batch", body)],
    "RescheduleBody": lambda api, body: [
        _with_version(api, "/scheduled-starts/{id}/reschedule", _start(api), body)
    ],
    "CancelBody": lambda api, body: [
        _with_version(api, "/scheduled-starts/{id}/cancel", _start(api), body)
    ],
    "MemberBody": _members,
    "TokenBody": _token,
    "CreateScheduleBody": lambda api, body: [request(api, "POST", "/schedules", body)],
    "PatchScheduleBody": _patch_schedule,
    "PutScheduleBody": _put_schedule,
    "TriggerBody": lambda api, body: [
        request(api, "POST", f"/schedules/{_schedule(api)['id']}/trigger", body)
    ],
    "BackfillBody": _backfill,
    "RegressionBody": lambda api, body: [
        request(api, "POST", "/schedules", {**schedule_body(), "regression": body})
    ],
    "TransferBody": _transfer,
    "CreateWebhookBody": lambda api, body: [request(api, "POST", "/webhooks", body)],
    "PatchWebhookBody": lambda api, body: [
        request(api, "PATCH", f"/webhooks/{_webhook(api)['id']}", body)
    ],
    "PlaceHoldBody": lambda api, body: [request(api, "POST", "/holds", body)],
    "HostHoldBody": _host_hold,
}
"""How each model reaches the store: the requests that send it (after any setup)."""


def _answers(response: Response) -> list[tuple[int, Any]]:
    """The status of the answer, and of each item of a batch answer."""
    answers = [(response.status_code, response.text)]
    if response.status_code == 200 and response.request.url.path.endswith("/batch"):
        answers += [(item["status"], item["body"]) for item in response.json()["items"]]
    return answers


def exercise(api: Api, leaf: Leaf, value: str) -> list[list[tuple[int, Any]]]:
    """Send the leaf's scenario with ``value`` placed, each request replayed with its key;
    the answers of each request, never a 5xx, and each replay answered alike."""
    base = BASES[leaf.model]()
    if leaf.path[0] == "specs" and "spec" in base:
        base["specs"] = [base.pop("spec")]  # a body sends spec or specs, not both
    body = placed(base, leaf.path, value)
    answered = []
    for send in SCENARIOS[leaf.model](api, body):
        idempotency_key = key()
        first = send(idempotency_key)
        for status, text in _answers(first):
            assert status < 500, f"{leaf.id}: {status} {text}"
        again = send(idempotency_key)
        assert again.status_code == first.status_code, (leaf.id, again.text)
        answered.append(_answers(first))
    return answered


# --------------------------------------------------------------------------- the tests


def test_the_walk_finds_the_fields_it_must_and_every_model_has_a_scenario() -> None:
    ids = {leaf.id for leaf in LEAVES}
    expected = {
        "MemberBody.subject",
        "BatchCreateBody.items.0.business_request_id",
        "BatchCreateBody.items.0.idempotency_key",
        "CreateStartBody.attributes.<key>",
        "CreateStartBody.attributes.<value>",
        "CreateScheduleBody.spec.cron",
        "CreateScheduleBody.regression.metrics.0.path",
        "CreateWebhookBody.events.0",
        "HostHoldBody.tenant",
    }
    assert expected <= ids, expected - ids
    walked = {leaf.model for leaf in LEAVES}
    assert walked <= set(SCENARIOS), walked - set(SCENARIOS)
    assert set(SCENARIOS) == set(BASES)


@pytest.mark.parametrize("leaf", BOUNDED, ids=[leaf.id for leaf in BOUNDED])
def test_a_string_at_its_maximum_length_is_stored_on_both_stores(admin: Api, leaf: Leaf) -> None:
    answered = exercise(admin, leaf, max_value(leaf))
    statuses = [status for answers in answered for status, _ in answers]
    if refused_at_max(leaf):
        assert any(400 <= status < 500 for status in statuses), (leaf.id, answered)
    else:
        assert all(200 <= status < 300 for status in statuses), (leaf.id, answered)


@pytest.mark.parametrize("leaf", UNBOUNDED, ids=[leaf.id for leaf in UNBOUNDED])
def test_a_very_long_unbounded_string_is_refused_or_stored(admin: Api, leaf: Leaf) -> None:
    exercise(admin, leaf, "a" * UNBOUNDED_PROBE)


SUBJECT = "s" * 200


def test_a_member_with_a_200_character_subject_is_added_and_removed(
    system: bootstrap.Punctual, admin: Api
) -> None:
    added_key, removed_key = key(), key()
    body = {"subject": SUBJECT, "role": "member"}
    added = admin.post("/members", body, key=added_key)
    assert added.status_code == 201, added.text
    assert admin.post("/members", body, key=added_key).json() == added.json()
    issued = created(admin.post("/tokens", {"subject": SUBJECT}, key=key()))
    member = Api(admin.client, issued["token"], TENANT)
    assert member.get("/definitions").status_code == 200
    schedule = created(member.post("/schedules", schedule_body(), key=key()))

    removed = admin.delete(f"/members/{SUBJECT}", key=removed_key)
    assert removed.status_code == 204, removed.text
    assert admin.delete(f"/members/{SUBJECT}", key=removed_key).status_code == 204

    assert member.get("/definitions").status_code == 401
    disabled = admin.get(f"/schedules/{schedule['id']}").json()
    assert disabled["enabled"] is False, disabled
    assert SUBJECT in disabled["last_status"], disabled
    entries = admin.get("/audit", subject_id=SUBJECT).json()["items"]
    assert {entry["action"] for entry in entries} >= {"add_member", "remove_member"}, entries


@pytest.mark.parametrize("label", ["a" * 63, "\u00e4"], ids=["ascii labels", "punycode labels"])
def test_a_webhook_url_that_is_nearly_all_host_is_stored(admin: Api, label: str) -> None:
    """A read shows the URL cut after its host: as long as the host, or longer once an
    internationalised name is spelt in ASCII (each ``\u00e4`` label becomes ``xn--4ca``)."""
    prefix, labels = "http://", [label]
    while len(prefix + ".".join([*labels, label]) + "/") <= 2048:
        labels.append(label)
    url = prefix + ".".join(labels) + "/"
    hook = created(admin.post("/webhooks", {"url": url}, key=key()))
    assert len(hook["url"]) > 400, hook["url"]
    assert admin.get(f"/webhooks/{hook['id']}").json()["url"] == hook["url"]


def test_the_idempotency_record_keeps_a_200_character_resource_id(
    system: bootstrap.Punctual,
) -> None:
    """At the store: a decided key records the longest resource id an outcome names (a
    member's subject) and reads its answer back."""
    now = system.services.clock.now()
    longest_key = "k" * KEY_LENGTH
    with system.store.transaction() as tx:
        assert tx.idempotency.try_claim(TENANT, SUBJECT, longest_key, "f" * 64, "o", now, now)
        assert tx.idempotency.complete(TENANT, SUBJECT, longest_key, "o", 204, None, SUBJECT, now)
    with system.store.transaction(readonly=True) as tx:
        record = tx.idempotency.get(TENANT, SUBJECT, longest_key)
    assert record is not None
    assert (record.state, record.status_code) == ("done", 204)


@pytest.mark.parametrize(
    ("option", "longest"), [("--tenant", identity.TENANT_MAX), ("--subject", identity.SUBJECT_MAX)]
)
def test_tokens_create_takes_the_longest_tenant_and_subject_and_refuses_longer(
    database_url: str, tmp_path: Path, option: str, longest: int
) -> None:
    """The host command checks what the HTTP models check: a longer tenant or subject is
    a one-line ``validation_error`` (exit 2) that creates nothing, on both stores (SQLite
    would keep it, PostgreSQL would refuse it as a driver error)."""
    env = {"PUNCTUAL_CODEC__KEY_FILE": str(tmp_path / "cli.keys")}

    def tokens_create(value: str) -> Any:
        names = {"--tenant": "acme", "--subject": "alice", option: value}
        args = ["tokens", "create", "--role", "member", "--database-url", database_url]
        args += [part for pair in names.items() for part in pair]
        return CliRunner().invoke(cli, args, env=env)

    made = tokens_create("x" * longest)
    assert made.exit_code == 0, made.output
    refused = tokens_create("y" * (longest + 1))
    assert refused.exit_code == 2, refused.output
    assert refused.output.count("\n") == 1, refused.output
    assert f"{option[2:]} must be 1 to {longest} characters long" in refused.output
    assert "y" * 20 not in refused.output, "the error quotes no input"
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        with system.store.engine.connect() as conn:
            members = conn.execute(sa.select(t.members.c.tenant, t.members.c.subject)).all()
    finally:
        system.close()
    assert all("y" not in tenant + subject for tenant, subject in members), members
