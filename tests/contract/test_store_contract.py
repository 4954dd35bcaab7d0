"""The Store contract: every promise in ``punctual.ports.store`` as a named test.

Each test runs over every adapter through the ``database_url`` fixture (a real SQLite file
and a fresh PostgreSQL database). Time is passed in as fixed instants: no test sleeps.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.ids import new_id
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import DefinitionState, RunState
from punctual.domain.starts import LastError, StartState
from punctual.errors import Unavailable
from punctual.ports.records import (
    DispatchedStart,
    EncryptedInput,
    LiveToken,
    NewRun,
    NewStart,
    Order,
    RunClaim,
    RunFilter,
    Seek,
    StartFilter,
    StoreEndedRun,
    WorkerRecord,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TENANT = "acme"
OTHER_TENANT = "globex"
INPUT = EncryptedInput("k1", b"\x00ciphertext\xff")
CREATED = T0 - timedelta(hours=1)
"""When the starts of a test were accepted (before any of them comes due)."""
LOADED = [("report", "v1")]
QUEUES = ["default"]
OLDEST = Order.OLDEST


def at(seconds: float) -> datetime:
    """An instant relative to T0."""
    return T0 + timedelta(seconds=seconds)


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_start(
    *,
    tenant: str = TENANT,
    start_at: datetime = T0,
    workflow: str = "report",
    business_request_id: str = "order-1",
    workload_class: str = "default",
) -> NewStart:
    return NewStart(
        id=new_id("st"),
        tenant=tenant,
        workflow=workflow,
        business_request_id=business_request_id,
        start_at=start_at,
        time_zone=None,
        workload_class=workload_class,
        attributes={"team": "billing"},
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        input=INPUT,
        created_by="alice",
        run_id=new_id("run"),
    )


def insert_starts(store: SqlStore, *starts: NewStart, now: datetime = CREATED) -> list[str]:
    with store.transaction() as tx:
        for start in starts:
            tx.starts.insert(start, now)
    return [start.id for start in starts]


def new_run(
    *,
    tenant: str = TENANT,
    workflow: str = "report",
    version: str = "v1",
    queue: str = "default",
    priority: int = 3,
    run_id: str | None = None,
    origin_id: str | None = None,
    started_by: str = "alice",
    schedule_id: str | None = None,
) -> NewRun:
    origin: dict[str, Any] = {"source": "scheduled_start", "id": origin_id or new_id("st")}
    if schedule_id is not None:
        origin = {
            "source": "schedule",
            "id": origin_id or new_id("occ"),
            "schedule_id": schedule_id,
        }
    return NewRun(
        id=run_id or new_id("run"),
        tenant=tenant,
        workflow=workflow,
        definition_version=version,
        artifact="artifact-1",
        origin=origin,
        started_by=started_by,
        input=INPUT,
        task_queue=queue,
        priority=priority,
        traceparent=None,
        timeout_seconds=60.0,
    )


def insert_runs(store: SqlStore, *runs: NewRun, now: datetime = T0) -> list[str]:
    with store.transaction() as tx:
        assert tx.runs.insert_new(list(runs), now) == len(runs)
    return [run.id for run in runs]


def claim_runs(
    store: SqlStore,
    worker: str = "wrk-a",
    *,
    limit: int = 10,
    now: datetime = T0,
    lease_seconds: float = 30,
    queues: list[str] | None = None,
    loaded: list[tuple[str, str]] | None = None,
) -> list[str]:
    with store.transaction() as tx:
        claimed = tx.runs.claim_pending(
            worker,
            QUEUES if queues is None else queues,
            LOADED if loaded is None else loaded,
            limit,
            lease_seconds,
            now,
        )
    return [run.id for run in claimed]


EXPIRED = -1.0
"""A lease that has already run out when it is taken: leases are timed by the store's clock
(the database's on PostgreSQL, FT-2), which a test cannot move, so expiry is tested this way."""


def worker_record(
    worker_id: str, heartbeat_at: datetime, stopped_at: datetime | None = None
) -> WorkerRecord:
    return WorkerRecord(
        id=worker_id,
        engine="local",
        host="host-1",
        task_queues=["default"],
        loaded=[("report", "v1", "artifact-1")],
        slots=4,
        started_at=at(-600),
        heartbeat_at=heartbeat_at,
        stopped_at=stopped_at,
    )


# --- transactions -------------------------------------------------------------------------


def test_transaction_commits_on_success(store: SqlStore) -> None:
    with store.transaction() as tx:
        assert tx.identity.ensure_tenant(TENANT, T0)
    with store.transaction(readonly=True) as tx:
        assert tx.identity.tenant_exists(TENANT)


def test_transaction_rolls_back_on_exception(store: SqlStore) -> None:
    class Boom(Exception):
        pass

    [start_id] = insert_starts(store, new_start())
    with pytest.raises(Boom), store.transaction() as tx:
        tx.identity.ensure_tenant(TENANT, T0)
        assert tx.starts.compare_and_set(start_id, 1, T0, state=StartState.CANCELED.value)
        raise Boom
    with store.transaction(readonly=True) as tx:
        assert not tx.identity.tenant_exists(TENANT)
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert (start.state, start.version) == (StartState.SCHEDULED, 1)


def test_transaction_raises_unavailable_when_database_is_down(
    database_url: str, tmp_path: Path
) -> None:
    if database_url.startswith("sqlite"):
        down = f"sqlite:///{tmp_path / 'no-such-directory' / 'punctual.db'}"
    else:
        # Nothing listens on port 1: the connection is refused at once.
        down = sa.engine.make_url(database_url).set(port=1).render_as_string(False)
    unreachable = SqlStore(down)
    try:
        with pytest.raises(Unavailable) as raised, unreachable.transaction():
            pass
        assert raised.value.code == "store_unavailable"
    finally:
        unreachable.dispose()


# --- identity: tenants, members, tokens ---------------------------------------------------


def test_ensure_tenant_is_idempotent(store: SqlStore) -> None:
    with store.transaction() as tx:
        assert not tx.identity.tenant_exists(TENANT)
        assert tx.identity.ensure_tenant(TENANT, T0) is True
        assert tx.identity.ensure_tenant(TENANT, at(1)) is False
        assert tx.identity.tenant_exists(TENANT)


def test_upsert_member_adds_then_changes_role(store: SqlStore) -> None:
    with store.transaction() as tx:
        assert tx.identity.upsert_member(TENANT, "alice", Role.MEMBER, T0) is True
        assert tx.identity.member_role(TENANT, "alice") is Role.MEMBER
        assert tx.identity.upsert_member(TENANT, "alice", Role.ADMIN, at(1)) is False
        assert tx.identity.member_role(TENANT, "alice") is Role.ADMIN
        assert tx.identity.member_role(OTHER_TENANT, "alice") is None


def test_members_page_by_when_they_joined_either_way(store: SqlStore) -> None:
    with store.transaction() as tx:
        # Two members joined in the same instant: the subject orders them.
        for subject, joined in (("carol", T0), ("alice", at(1)), ("bob", at(1)), ("dave", at(2))):
            tx.identity.upsert_member(TENANT, subject, Role.MEMBER, joined)
        tx.identity.upsert_member(OTHER_TENANT, "erin", Role.ADMIN, at(3))
        tx.identity.upsert_member(TENANT, "carol", Role.ADMIN, at(9))  # keeps its place

    def walk(order: Order) -> list[str]:
        seen: list[str] = []
        after: tuple[datetime, str] | None = None
        with store.transaction(readonly=True) as tx:
            while page := tx.identity.members(TENANT, Seek(3, after, order)):
                seen.extend(member.subject for member in page)
                after = (page[-1].created_at, page[-1].subject)
        return seen

    assert walk(Order.NEWEST) == ["dave", "bob", "alice", "carol"]
    assert walk(OLDEST) == ["carol", "alice", "bob", "dave"]
    with store.transaction(readonly=True) as tx:
        [carol] = tx.identity.members(TENANT, Seek(1, None, OLDEST))
    assert (carol.tenant, carol.role, carol.created_at) == (TENANT, Role.ADMIN, T0)


def test_remove_member(store: SqlStore) -> None:
    with store.transaction() as tx:
        tx.identity.upsert_member(TENANT, "alice", Role.MEMBER, T0)
        assert tx.identity.remove_member(TENANT, "alice") is True
        assert tx.identity.member_role(TENANT, "alice") is None
        assert tx.identity.remove_member(TENANT, "alice") is False


def _member_with_token(
    store: SqlStore,
    secret: str = "secret-1",
    *,
    tenant: str = TENANT,
    subject: str = "alice",
    expires_at: datetime | None = None,
) -> str:
    token_id = new_id("tok")
    with store.transaction() as tx:
        tx.identity.ensure_tenant(tenant, T0)
        tx.identity.upsert_member(tenant, subject, Role.MEMBER, T0)
        tx.identity.insert_token(token_id, tenant, subject, digest_of(secret), T0, expires_at)
    return token_id


def test_principal_for_digest_of_a_live_token(store: SqlStore) -> None:
    _member_with_token(store)
    with store.transaction(readonly=True) as tx:
        principal = tx.identity.principal_for_digest(digest_of("secret-1"), at(60))
    assert principal == Principal(tenant=TENANT, subject="alice", role=Role.MEMBER)


def test_principal_for_digest_refuses_unknown_digest(store: SqlStore) -> None:
    _member_with_token(store)
    with store.transaction(readonly=True) as tx:
        assert tx.identity.principal_for_digest(digest_of("secret-2"), at(60)) is None


def test_principal_for_digest_refuses_revoked_token(store: SqlStore) -> None:
    token_id = _member_with_token(store)
    with store.transaction() as tx:
        assert tx.identity.revoke_token(TENANT, token_id, at(10))
    with store.transaction(readonly=True) as tx:
        assert tx.identity.principal_for_digest(digest_of("secret-1"), at(60)) is None


def test_principal_for_digest_refuses_expired_token(store: SqlStore) -> None:
    _member_with_token(store, expires_at=at(3600))
    with store.transaction(readonly=True) as tx:
        assert tx.identity.principal_for_digest(digest_of("secret-1"), at(3599)) is not None
        assert tx.identity.principal_for_digest(digest_of("secret-1"), at(3601)) is None


def test_live_token_carries_the_expiry_it_must_not_be_trusted_past(store: SqlStore) -> None:
    _member_with_token(store, expires_at=at(3600))
    _member_with_token(store, "secret-2", subject="bob")
    with store.transaction(readonly=True) as tx:
        expiring = tx.identity.live_token(digest_of("secret-1"), at(60))
        lasting = tx.identity.live_token(digest_of("secret-2"), at(60))
        assert tx.identity.live_token(digest_of("secret-1"), at(3600)) is None
    assert expiring == LiveToken(Principal(TENANT, "alice", Role.MEMBER), at(3600))
    assert lasting == LiveToken(Principal(TENANT, "bob", Role.MEMBER), None)


def test_principal_for_digest_refuses_token_of_removed_member(store: SqlStore) -> None:
    _member_with_token(store)
    with store.transaction() as tx:
        assert tx.identity.remove_member(TENANT, "alice")
    with store.transaction(readonly=True) as tx:
        assert tx.identity.principal_for_digest(digest_of("secret-1"), at(60)) is None


def test_principal_for_digest_follows_a_role_change(store: SqlStore) -> None:
    _member_with_token(store)
    with store.transaction() as tx:
        tx.identity.upsert_member(TENANT, "alice", Role.VIEWER, at(5))
        principal = tx.identity.principal_for_digest(digest_of("secret-1"), at(60))
    assert principal is not None
    assert principal.role is Role.VIEWER


def test_list_tokens_pages_by_seq_within_tenant(store: SqlStore) -> None:
    ids = [_member_with_token(store, f"secret-{i}", expires_at=at(99)) for i in range(3)]
    _member_with_token(store, "secret-other", tenant=OTHER_TENANT)
    with store.transaction(readonly=True) as tx:
        first = tx.identity.list_tokens(TENANT, Seek(2, None, OLDEST))
        rest = tx.identity.list_tokens(TENANT, Seek(2, first[-1].seq, OLDEST))
        newest = tx.identity.list_tokens(TENANT, Seek(2))
        older = tx.identity.list_tokens(TENANT, Seek(2, newest[-1].seq))
    assert [token.id for token in first + rest] == ids
    assert [token.id for token in newest + older] == ids[::-1]
    assert first[0].seq < first[1].seq < rest[0].seq
    assert {token.tenant for token in first + rest} == {TENANT}
    assert first[0].expires_at == at(99)
    assert first[0].revoked_at is None


def test_revoke_token_is_idempotent(store: SqlStore) -> None:
    token_id = _member_with_token(store)
    with store.transaction() as tx:
        assert tx.identity.revoke_token(TENANT, token_id, at(10)) is True
        assert tx.identity.revoke_token(TENANT, token_id, at(20)) is True
        [token] = tx.identity.list_tokens(TENANT, Seek(10))
    assert token.revoked_at == at(10)


def test_revoke_token_is_false_only_for_a_token_not_in_the_tenant(store: SqlStore) -> None:
    token_id = _member_with_token(store)
    with store.transaction() as tx:
        assert tx.identity.revoke_token(TENANT, new_id("tok"), at(10)) is False
        assert tx.identity.revoke_token(OTHER_TENANT, token_id, at(10)) is False
        assert tx.identity.principal_for_digest(digest_of("secret-1"), at(11)) is not None


def test_revoke_tokens_of_revokes_every_live_token_of_the_subject(store: SqlStore) -> None:
    first = _member_with_token(store, "secret-1")
    _member_with_token(store, "secret-2")
    _member_with_token(store, "secret-bob", subject="bob")
    _member_with_token(store, "secret-3", tenant=OTHER_TENANT)
    with store.transaction() as tx:
        tx.identity.revoke_token(TENANT, first, at(1))
        assert tx.identity.revoke_tokens_of(TENANT, "alice", at(2)) == 1
        assert tx.identity.revoke_tokens_of(TENANT, "alice", at(3)) == 0
        assert tx.identity.principal_for_digest(digest_of("secret-2"), at(4)) is None
        assert tx.identity.principal_for_digest(digest_of("secret-bob"), at(4)) is not None
        assert tx.identity.principal_for_digest(digest_of("secret-3"), at(4)) is not None


# --- definitions and workers --------------------------------------------------------------


def _register(store: SqlStore, version: str, artifact: str = "artifact-1") -> bool:
    with store.transaction() as tx:
        return tx.definitions.register(
            "report", version, artifact, {"type": "object"}, 30.0, at(len(version))
        )


def test_first_registered_version_becomes_active(store: SqlStore) -> None:
    assert _register(store, "v1") is True
    with store.transaction(readonly=True) as tx:
        active = tx.definitions.active("report")
    assert active is not None
    assert (active.version, active.state) == ("v1", DefinitionState.ACTIVE.value)
    assert active.input_schema == {"type": "object"}
    assert active.execution_timeout_seconds == 30.0


def test_second_registered_version_does_not_become_active(store: SqlStore) -> None:
    _register(store, "v1")
    assert _register(store, "v2") is True
    with store.transaction(readonly=True) as tx:
        active = tx.definitions.active("report")
        second = tx.definitions.get("report", "v2")
    assert active is not None
    assert active.version == "v1"
    assert second is not None
    assert second.state != DefinitionState.ACTIVE.value


def test_reregistering_a_version_keeps_its_state_and_artifact(store: SqlStore) -> None:
    _register(store, "v1", "artifact-1")
    _register(store, "v2", "artifact-2")
    with store.transaction() as tx:
        tx.definitions.set_state("report", "v2", DefinitionState.ACTIVE)
        tx.definitions.set_state("report", "v1", DefinitionState.RETIRED)
    # A restarting worker registers both again, with a rebuilt artifact.
    assert _register(store, "v1", "artifact-9") is False
    assert _register(store, "v2", "artifact-9") is False
    with store.transaction(readonly=True) as tx:
        v1 = tx.definitions.get("report", "v1")
        v2 = tx.definitions.get("report", "v2")
    assert v1 is not None
    assert v2 is not None
    assert (v1.state, v1.artifact) == (DefinitionState.RETIRED.value, "artifact-1")
    assert (v2.state, v2.artifact) == (DefinitionState.ACTIVE.value, "artifact-2")


def test_activating_a_version_deprecates_the_previous_active_one(store: SqlStore) -> None:
    _register(store, "v1")
    _register(store, "v2")
    with store.transaction() as tx:
        tx.definitions.register("other", "v1", "artifact-o", {}, 5.0, T0)
        tx.definitions.set_state("report", "v2", DefinitionState.ACTIVE)
        active = tx.definitions.active("report")
        v1 = tx.definitions.get("report", "v1")
        other = tx.definitions.active("other")
    assert active is not None
    assert active.version == "v2"
    assert v1 is not None
    assert v1.state == DefinitionState.DEPRECATED.value
    assert other is not None
    assert other.version == "v1"


def test_activating_the_active_version_keeps_it_active(store: SqlStore) -> None:
    _register(store, "v1")
    with store.transaction() as tx:
        tx.definitions.set_state("report", "v1", DefinitionState.ACTIVE)
        active = tx.definitions.active("report")
    assert active is not None
    assert active.version == "v1"


def test_active_is_none_for_an_unknown_or_retired_name(store: SqlStore) -> None:
    _register(store, "v1")
    with store.transaction() as tx:
        assert tx.definitions.active("unknown") is None
        assert tx.definitions.get("report", "v9") is None
        tx.definitions.set_state("report", "v1", DefinitionState.RETIRED)
        assert tx.definitions.active("report") is None


def test_definitions_find_pages_by_seq(store: SqlStore) -> None:
    for version in ("v1", "v2", "v3"):
        _register(store, version)
    with store.transaction(readonly=True) as tx:
        first = tx.definitions.find(0, 2)
        rest = tx.definitions.find(first[-1][0], 2)
    assert [d.version for _, d in first + rest] == ["v1", "v2", "v3"]


def test_live_workers_respects_heartbeat_and_stopped_at(store: SqlStore) -> None:
    since = at(-30)
    with store.transaction() as tx:
        tx.definitions.upsert_worker(worker_record("wrk-fresh", heartbeat_at=at(-1)))
        tx.definitions.upsert_worker(worker_record("wrk-edge", heartbeat_at=since))
        tx.definitions.upsert_worker(worker_record("wrk-silent", heartbeat_at=at(-31)))
        tx.definitions.upsert_worker(
            worker_record("wrk-stopped", heartbeat_at=at(-1), stopped_at=at(-1))
        )
        live = tx.definitions.live_workers(since)
    assert {worker.id for worker in live} == {"wrk-fresh", "wrk-edge"}
    fresh = next(worker for worker in live if worker.id == "wrk-fresh")
    assert fresh == worker_record("wrk-fresh", heartbeat_at=at(-1))


def test_heartbeat_keeps_a_worker_live_until_it_stops(store: SqlStore) -> None:
    with store.transaction() as tx:
        tx.definitions.upsert_worker(worker_record("wrk-a", heartbeat_at=at(-60)))
        assert tx.definitions.live_workers(at(-30)) == []
        assert tx.definitions.heartbeat_worker("wrk-a", at(-10)) is True
        assert [w.id for w in tx.definitions.live_workers(at(-30))] == ["wrk-a"]
        tx.definitions.stop_worker("wrk-a", at(-5))
        assert tx.definitions.live_workers(at(-30)) == []
        assert tx.definitions.heartbeat_worker("wrk-a", at(-1)) is False
        assert tx.definitions.heartbeat_worker("wrk-unknown", at(-1)) is False


def test_upsert_worker_replaces_what_it_reports(store: SqlStore) -> None:
    with store.transaction() as tx:
        tx.definitions.upsert_worker(worker_record("wrk-a", heartbeat_at=at(-60)))
        restarted = WorkerRecord(
            id="wrk-a",
            engine="local",
            host="host-2",
            task_queues=["default", "bulk"],
            loaded=[("report", "v2", "artifact-2")],
            slots=8,
            started_at=at(-5),
            heartbeat_at=at(-5),
            stopped_at=None,
        )
        tx.definitions.upsert_worker(restarted)
        assert tx.definitions.live_workers(at(-30)) == [restarted]


def test_prune_workers_forgets_silent_and_stopped_workers(store: SqlStore) -> None:
    with store.transaction() as tx:
        tx.definitions.upsert_worker(worker_record("wrk-live", heartbeat_at=at(-1)))
        tx.definitions.upsert_worker(worker_record("wrk-silent", heartbeat_at=at(-7200)))
        tx.definitions.upsert_worker(
            worker_record("wrk-stopped", heartbeat_at=at(-1), stopped_at=at(-7200))
        )
        assert tx.definitions.prune_workers(at(-3600)) == ["wrk-silent", "wrk-stopped"]
        assert [w.id for w in tx.definitions.live_workers(at(-3600))] == ["wrk-live"]


# --- idempotency keys ---------------------------------------------------------------------

KEY = (TENANT, "alice", "key-1")


def _claim_key(store: SqlStore, owner: str, lease_until: datetime, now: datetime = T0) -> bool:
    with store.transaction() as tx:
        return tx.idempotency.try_claim(*KEY, "fp-1", owner, lease_until, now)


def test_try_claim_records_the_key_in_flight(store: SqlStore) -> None:
    assert _claim_key(store, "owner-a", at(30)) is True
    with store.transaction(readonly=True) as tx:
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert (record.state, record.owner, record.fingerprint) == ("in_flight", "owner-a", "fp-1")
    assert record.lease_until == at(30)
    assert record.status_code is None


def test_try_claim_refuses_a_second_claim(store: SqlStore) -> None:
    assert _claim_key(store, "owner-a", at(30)) is True
    with store.transaction() as tx:
        assert tx.idempotency.try_claim(*KEY, "fp-2", "owner-b", at(90), at(60)) is False
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert (record.owner, record.fingerprint) == ("owner-a", "fp-1")


def test_idempotency_keys_belong_to_tenant_and_principal(store: SqlStore) -> None:
    with store.transaction() as tx:
        assert tx.idempotency.try_claim(TENANT, "alice", "k", "fp", "o1", at(30), T0)
        assert tx.idempotency.try_claim(TENANT, "bob", "k", "fp", "o2", at(30), T0)
        assert tx.idempotency.try_claim(OTHER_TENANT, "alice", "k", "fp", "o3", at(30), T0)
        assert tx.idempotency.get(TENANT, "carol", "k") is None


def test_take_over_is_refused_while_the_lease_is_live(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        assert tx.idempotency.take_over(*KEY, "owner-b", at(60), at(10)) is False
        # Expired *before* now: at the lease's last instant it is still held.
        assert tx.idempotency.take_over(*KEY, "owner-b", at(60), at(30)) is False
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert record.owner == "owner-a"


def test_take_over_adopts_a_key_whose_lease_expired(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        assert tx.idempotency.take_over(*KEY, "owner-b", at(90), at(31)) is True
        record = tx.idempotency.get(*KEY)
        assert record is not None
        assert (record.owner, record.lease_until, record.state) == ("owner-b", at(90), "in_flight")
        # The previous owner lost the key: its outcome must not be recorded.
        assert not tx.idempotency.complete(*KEY, "owner-a", 201, {"id": "x"}, None, at(32))


def test_take_over_is_refused_for_a_decided_key(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        assert tx.idempotency.complete(*KEY, "owner-a", 201, {"id": "st_1"}, "st_1", at(1))
        assert tx.idempotency.take_over(*KEY, "owner-b", at(120), at(60)) is False


def test_complete_records_the_outcome_for_the_owner(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    body = {"id": "st_1", "state": "scheduled", "nested": [1, 2.5, None, True]}
    with store.transaction() as tx:
        assert tx.idempotency.complete(*KEY, "owner-a", 201, body, "st_1", at(1)) is True
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert (record.state, record.status_code, record.response) == ("done", 201, body)


def test_complete_is_refused_for_another_owner(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        assert tx.idempotency.complete(*KEY, "owner-b", 201, {}, None, at(1)) is False
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert record.state == "in_flight"


def test_complete_is_refused_once_decided(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        assert tx.idempotency.complete(*KEY, "owner-a", 201, {"first": 1}, None, at(1))
        assert not tx.idempotency.complete(*KEY, "owner-a", 409, {"second": 2}, None, at(2))
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert (record.status_code, record.response) == (201, {"first": 1})


def test_complete_is_refused_for_an_unknown_key(store: SqlStore) -> None:
    with store.transaction() as tx:
        assert tx.idempotency.complete(*KEY, "owner-a", 201, {}, None, at(1)) is False
        assert tx.idempotency.get(*KEY) is None


def test_release_forgets_only_the_owners_in_flight_key(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        tx.idempotency.release(*KEY, "owner-b")
        assert tx.idempotency.get(*KEY) is not None
        tx.idempotency.release(*KEY, "owner-a")
        assert tx.idempotency.get(*KEY) is None
    # The retry can claim the key again.
    assert _claim_key(store, "owner-c", at(60), at(1)) is True


def test_release_keeps_a_decided_key(store: SqlStore) -> None:
    _claim_key(store, "owner-a", at(30))
    with store.transaction() as tx:
        tx.idempotency.complete(*KEY, "owner-a", 201, {"id": "st_1"}, "st_1", at(1))
        tx.idempotency.release(*KEY, "owner-a")
        record = tx.idempotency.get(*KEY)
    assert record is not None
    assert record.state == "done"


# --- scheduled starts ---------------------------------------------------------------------


def test_insert_start_is_scheduled_at_version_1_due_at_start_at(store: SqlStore) -> None:
    new = new_start(start_at=at(600))
    with store.transaction() as tx:
        inserted = tx.starts.insert(new, T0)
    with store.transaction(readonly=True) as tx:
        fetched = tx.starts.get(TENANT, new.id)
    assert fetched == inserted
    assert (fetched.state, fetched.version, fetched.attempts) == (StartState.SCHEDULED, 1, 0)
    assert fetched.due_at == at(600)
    assert (fetched.start_at, fetched.created_at, fetched.updated_at) == (at(600), T0, T0)
    assert (fetched.run_id, fetched.created_by, fetched.attributes) == (
        new.run_id,
        "alice",
        {"team": "billing"},
    )
    assert fetched.dispatch is None
    assert fetched.last_error is None
    with store.transaction(readonly=True) as tx:
        assert tx.starts.earliest_due(T0) == at(600)


def test_get_start_is_tenant_scoped(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start())
    with store.transaction(readonly=True) as tx:
        assert tx.starts.get(OTHER_TENANT, start_id) is None
        assert tx.starts.get(TENANT, new_id("st")) is None


def test_compare_and_set_applies_at_the_expected_version_and_bumps_it(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start())
    with store.transaction() as tx:
        assert (
            tx.starts.compare_and_set(start_id, 1, at(5), start_at=at(900), due_at=at(900)) is True
        )
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert (start.version, start.start_at, start.due_at, start.updated_at) == (
        2,
        at(900),
        at(900),
        at(5),
    )


def test_compare_and_set_refuses_a_stale_version(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start())
    with store.transaction() as tx:
        assert tx.starts.compare_and_set(start_id, 1, at(1), state=StartState.CANCELED.value)
        assert not tx.starts.compare_and_set(start_id, 1, at(2), state=StartState.SCHEDULED.value)
        assert not tx.starts.compare_and_set(start_id, 3, at(2), state=StartState.SCHEDULED.value)
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert (start.state, start.version, start.updated_at) == (StartState.CANCELED, 2, at(1))


def test_mark_dispatched_many_applies_only_at_each_claimed_version(store: SqlStore) -> None:
    fresh, stale = insert_starts(
        store, new_start(start_at=at(-1)), new_start(start_at=at(-1), business_request_id="o-2")
    )
    with store.transaction() as tx:
        claims = {c.id: c for c in tx.starts.claim_due(T0, 10, "runner-a", 30)}
        assert tx.starts.compare_and_set(stale, 1, at(1), state=StartState.CANCELED.value)
        won = tx.starts.mark_dispatched_many(
            [
                DispatchedStart(claims[fresh].token, 1, "v1", "sha256:aa"),
                DispatchedStart(claims[stale].token, 1, "v1", "sha256:aa"),
            ],
            at(2),
        )
        dispatched = tx.starts.get(TENANT, fresh)
        canceled = tx.starts.get(TENANT, stale)
    assert won == {fresh}
    assert dispatched is not None and canceled is not None
    assert (dispatched.state, dispatched.version, dispatched.attempts) == (
        StartState.DISPATCHED,
        2,
        1,
    )
    assert dispatched.dispatch is not None
    assert (dispatched.dispatch.definition_version, dispatched.dispatch.artifact) == (
        "v1",
        "sha256:aa",
    )
    assert (canceled.state, canceled.version) == (StartState.CANCELED, 2)


def test_compare_and_set_records_a_retry_with_its_last_error(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start())
    error = LastError("version_not_loaded", "no worker has report v1 loaded", at(1))
    with store.transaction() as tx:
        assert tx.starts.compare_and_set(
            start_id,
            1,
            at(1),
            attempts=1,
            last_error=error,
            next_attempt_at=at(6),
            due_at=at(6),
        )
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert (start.attempts, start.last_error, start.due_at) == (1, error, at(6))


def _claim_due(
    store: SqlStore,
    now: datetime,
    limit: int = 10,
    runner: str = "runner-a",
    lease_seconds: float = 30,
) -> list[str]:
    with store.transaction() as tx:
        claims = tx.starts.claim_due(now, limit, runner, lease_seconds)
    return [claim.id for claim in claims]


def test_claim_due_returns_only_due_starts(store: SqlStore) -> None:
    due, exactly_due, later = insert_starts(
        store, new_start(start_at=at(-10)), new_start(start_at=T0), new_start(start_at=at(1))
    )
    assert set(_claim_due(store, T0)) == {due, exactly_due}
    assert _claim_due(store, T0) == []
    assert _claim_due(store, at(1)) == [later]


def test_claim_due_takes_the_oldest_first_within_its_limit(store: SqlStore) -> None:
    # Inserted newest first, so insertion order disagrees with due order.
    newest, middle, oldest = insert_starts(
        store,
        new_start(start_at=at(-10)),
        new_start(start_at=at(-20)),
        new_start(start_at=at(-30)),
    )
    assert set(_claim_due(store, T0, limit=2)) == {oldest, middle}
    assert _claim_due(store, T0, limit=2) == [newest]


def test_claim_due_moves_the_start_to_dispatching_with_a_claim_token(store: SqlStore) -> None:
    new = new_start(start_at=at(-1))
    insert_starts(store, new)
    with store.transaction() as tx:
        [claim] = tx.starts.claim_due(T0, 10, "runner-a", 30)
        start = tx.starts.get(TENANT, new.id)
    assert (claim.id, claim.tenant, claim.workflow, claim.run_id) == (
        new.id,
        TENANT,
        "report",
        new.run_id,
    )
    # A claim is not a user-visible transition (FT-5): the version stays, the token moves.
    assert (claim.version, claim.attempts, claim.input) == (1, 0, INPUT)
    assert (claim.claimed_by, claim.claim_seq) == ("runner-a", 1)
    assert (claim.created_by, claim.workload_class, claim.traceparent) == (
        "alice",
        "default",
        new.traceparent,
    )
    assert claim.origin == {"source": "scheduled_start", "id": new.id}
    assert start is not None
    assert (start.state, start.version, start.updated_at) == (StartState.DISPATCHING, 1, T0)


def test_claim_due_skips_a_start_whose_lease_is_live(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    assert _claim_due(store, T0, runner="runner-a", lease_seconds=30) == [start_id]
    assert _claim_due(store, at(10), runner="runner-b") == []
    assert _claim_due(store, at(29), runner="runner-b") == []


def test_claim_due_reclaims_a_start_whose_lease_expired(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    assert _claim_due(store, T0, runner="runner-a", lease_seconds=EXPIRED) == [start_id]
    with store.transaction() as tx:
        [claim] = tx.starts.claim_due(at(31), 10, "runner-b", 30)
        start = tx.starts.get(TENANT, start_id)
    assert (claim.id, claim.version, claim.claimed_by, claim.claim_seq) == (
        start_id,
        1,
        "runner-b",
        2,
    )
    assert start is not None
    assert (start.state, start.version) == (StartState.DISPATCHING, 1)
    with store.transaction() as tx:
        # The reclaimed start now has a live lease again.
        assert tx.starts.claim_due(at(40), 10, "runner-c", 30) == []


def test_claim_due_ignores_terminal_starts(store: SqlStore) -> None:
    canceled, dispatched = insert_starts(
        store, new_start(start_at=at(-5)), new_start(start_at=at(-5))
    )
    with store.transaction() as tx:
        tx.starts.compare_and_set(canceled, 1, at(-4), state=StartState.CANCELED.value)
        tx.starts.compare_and_set(dispatched, 1, at(-4), state=StartState.DISPATCHED.value)
    assert _claim_due(store, T0) == []
    with store.transaction(readonly=True) as tx:
        assert tx.starts.earliest_due(T0) is None


def test_claim_due_returns_nothing_when_limit_is_zero(store: SqlStore) -> None:
    insert_starts(store, new_start(start_at=at(-1)))
    assert _claim_due(store, T0, limit=0) == []


def test_a_start_returned_to_scheduled_is_due_at_its_next_attempt(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    with store.transaction() as tx:
        [claim] = tx.starts.claim_due(T0, 10, "runner-a", 30)
        assert tx.starts.compare_and_set(
            start_id,
            claim.version,
            at(1),
            state=StartState.SCHEDULED.value,
            attempts=1,
            next_attempt_at=at(20),
            due_at=at(20),
            claimed_by=None,
            lease_until=None,
        )
    assert _claim_due(store, at(19)) == []
    with store.transaction(readonly=True) as tx:
        assert tx.starts.earliest_due(T0) == at(20)
    assert _claim_due(store, at(20)) == [start_id]


def test_earliest_due(store: SqlStore) -> None:
    with store.transaction(readonly=True) as tx:
        assert tx.starts.earliest_due(T0) is None
    claimed, _waiting = insert_starts(
        store, new_start(start_at=at(-10)), new_start(start_at=at(100))
    )
    with store.transaction(readonly=True) as tx:
        assert tx.starts.earliest_due(T0) == at(-10)
    assert _claim_due(store, T0, lease_seconds=30) == [claimed]
    with store.transaction(readonly=True) as tx:
        # A claimed start comes due again when its lease expires: 30 s after the claim on
        # the store's clock (on PostgreSQL the database's, which ran on a little since).
        lease_expiry = tx.starts.earliest_due(T0)
    assert lease_expiry is not None and at(25) < lease_expiry <= at(30)
    with store.transaction() as tx:
        tx.starts.compare_and_set(claimed, 1, at(1), state=StartState.DISPATCHED.value)
        assert tx.starts.earliest_due(T0) == at(100)


def test_count_pending_counts_scheduled_and_dispatching(store: SqlStore) -> None:
    ids = insert_starts(
        store,
        new_start(start_at=at(-1)),
        new_start(start_at=at(60)),
        new_start(start_at=at(60), workload_class="bulk"),
        new_start(start_at=at(60)),
        new_start(start_at=at(60), tenant=OTHER_TENANT),
    )
    assert _claim_due(store, T0) == [ids[0]]
    with store.transaction() as tx:
        tx.starts.compare_and_set(ids[3], 1, T0, state=StartState.CANCELED.value)
        assert tx.starts.count_pending(TENANT) == 3
        assert tx.starts.count_pending(TENANT, "bulk") == 1
        assert tx.starts.count_pending(TENANT, "default") == 2
        assert tx.starts.count_pending(OTHER_TENANT) == 1
        assert tx.starts.count_pending("nobody") == 0


def test_count_in_state(store: SqlStore) -> None:
    first, _second = insert_starts(store, new_start(), new_start())
    insert_starts(store, new_start(tenant=OTHER_TENANT))
    with store.transaction() as tx:
        tx.starts.compare_and_set(first, 1, T0, state=StartState.FAILED.value)
        assert tx.starts.count_in_state(TENANT, StartState.FAILED) == 1
        assert tx.starts.count_in_state(TENANT, StartState.SCHEDULED) == 1
        assert tx.starts.count_in_state(OTHER_TENANT, StartState.FAILED) == 0


def test_count_pending_of_workflow_spans_tenants(store: SqlStore) -> None:
    ids = insert_starts(
        store,
        new_start(start_at=at(-1)),
        new_start(start_at=at(60), tenant=OTHER_TENANT),
        new_start(start_at=at(60), workflow="other"),
        new_start(start_at=at(60)),
    )
    _claim_due(store, T0)
    with store.transaction() as tx:
        tx.starts.compare_and_set(ids[3], 1, T0, state=StartState.CANCELED.value)
        assert tx.starts.count_pending_of_workflow("report") == 2
        assert tx.starts.count_pending_of_workflow("other") == 1
        assert tx.starts.count_pending_of_workflow("unknown") == 0


def test_stalled_lists_claimed_starts_whose_lease_expired(store: SqlStore) -> None:
    live, stalled = insert_starts(store, new_start(start_at=at(-20)), new_start(start_at=at(-10)))
    assert _claim_due(store, at(-15), lease_seconds=60) == [live]
    # Leases run on the store's clock, so "expired 30 s ago" is a lease of -30 s.
    assert _claim_due(store, at(-10), lease_seconds=-30) == [stalled]
    with store.transaction(readonly=True) as tx:
        assert tx.starts.stalled(TENANT, 10, T0, 10) == [stalled]
        assert tx.starts.stalled(OTHER_TENANT, 10, T0, 10) == []
        assert tx.starts.stalled(TENANT, 60, T0, 10) == []


def test_find_starts_filters_by_state_workflow_and_business_request_id(store: SqlStore) -> None:
    a, b, c, d = insert_starts(
        store,
        new_start(business_request_id="order-1"),
        new_start(business_request_id="order-2", workflow="invoice"),
        new_start(business_request_id="order-1", workflow="invoice"),
        new_start(business_request_id="order-1"),
    )
    insert_starts(store, new_start(tenant=OTHER_TENANT))
    with store.transaction() as tx:
        tx.starts.compare_and_set(d, 1, T0, state=StartState.CANCELED.value)

        def ids(where: StartFilter) -> list[str]:
            return [start.id for _, start in tx.starts.find(TENANT, where, Seek(100, None, OLDEST))]

        assert ids(StartFilter()) == [a, b, c, d]
        assert ids(StartFilter(business_request_id="order-1")) == [a, c, d]
        assert ids(StartFilter(workflow="invoice")) == [b, c]
        assert ids(StartFilter(state="canceled")) == [d]
        assert ids(StartFilter(state="scheduled", business_request_id="order-1")) == [a, c]
        assert ids(StartFilter(workflow="invoice", business_request_id="order-2")) == [b]


@pytest.mark.parametrize("order", list(Order))
def test_find_starts_pages_either_way(store: SqlStore, order: Order) -> None:
    ids = insert_starts(store, *(new_start() for _ in range(5)))
    seen: list[str] = []
    after: int | None = None
    with store.transaction(readonly=True) as tx:
        while page := tx.starts.find(TENANT, StartFilter(), Seek(2, after, order)):
            assert len(page) <= 2
            seen.extend(start.id for _, start in page)
            after = page[-1][0]
    assert seen == (ids if order is OLDEST else ids[::-1])


@pytest.mark.postgres
def test_get_with_lock_waits_at_most_the_lock_timeout(pg_url: str) -> None:
    # SQLite has no row locks: its writers queue on the busy timeout instead (dialects.py).
    store = SqlStore(pg_url)
    try:
        [start_id] = insert_starts(store, new_start())
        with store.transaction() as holder:
            assert holder.starts.get(TENANT, start_id, lock=True) is not None
            began = time.monotonic()
            with (
                pytest.raises(Unavailable) as raised,
                store.transaction(lock_timeout=0.2) as waiter,
            ):
                waiter.starts.get(TENANT, start_id, lock=True)
            assert time.monotonic() - began < 5
            assert raised.value.code == "store_busy"
    finally:
        store.dispose()


# --- runs ---------------------------------------------------------------------------------


def test_insert_new_creates_pending_runs(store: SqlStore) -> None:
    new = new_run(priority=2)
    insert_runs(store, new, now=at(-5))
    with store.transaction(readonly=True) as tx:
        run = tx.runs.get(TENANT, new.id)
    assert run is not None
    assert (run.state, run.attempts, run.cancel_requested) == (RunState.PENDING, 0, False)
    assert (run.workflow, run.definition_version, run.artifact) == ("report", "v1", "artifact-1")
    assert (run.task_queue, run.priority, run.started_by) == ("default", 2, "alice")
    assert run.origin == new.origin
    assert (run.created_at, run.started_at, run.ended_at) == (at(-5), None, None)
    assert (run.result, run.error) == (None, None)


def test_insert_new_leaves_an_existing_run_untouched(store: SqlStore) -> None:
    first = new_run()
    insert_runs(store, first, now=T0)
    retry = new_run(run_id=first.id, version="v2", queue="bulk", priority=5, started_by="mallory")
    with store.transaction() as tx:
        assert tx.runs.insert_new([retry, new_run()], at(10)) == 1
        run = tx.runs.get(TENANT, first.id)
    assert run is not None
    assert (run.definition_version, run.task_queue, run.priority, run.started_by) == (
        "v1",
        "default",
        3,
        "alice",
    )
    assert (run.origin, run.created_at) == (first.origin, T0)


def test_insert_new_leaves_a_claimed_run_untouched(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    assert claim_runs(store) == [run_id]
    with store.transaction() as tx:
        assert tx.runs.insert_new([new_run(run_id=run_id)], at(1)) == 0
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.attempts) == (RunState.RUNNING, 1)


def test_get_run_is_tenant_scoped(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    with store.transaction(readonly=True) as tx:
        assert tx.runs.get(OTHER_TENANT, run_id) is None


def test_claim_pending_takes_priority_first_then_age(store: SqlStore) -> None:
    [low_old] = insert_runs(store, new_run(priority=3), now=at(-30))
    [high_new] = insert_runs(store, new_run(priority=1), now=at(-10))
    [low_new] = insert_runs(store, new_run(priority=3), now=at(-20))
    [mid] = insert_runs(store, new_run(priority=2), now=at(-5))
    order = [claim_runs(store, limit=1) for _ in range(5)]
    assert order == [[high_new], [mid], [low_old], [low_new], []]


def test_claim_pending_only_for_loaded_versions_and_served_queues(store: SqlStore) -> None:
    ok, _other_version, _other_workflow, _other_queue = insert_runs(
        store,
        new_run(),
        new_run(version="v2"),
        new_run(workflow="invoice"),
        new_run(queue="bulk"),
    )
    assert claim_runs(store, loaded=[]) == []
    assert claim_runs(store, queues=[]) == []
    assert claim_runs(store, loaded=[("report", "v1"), ("invoice", "v2")]) == [ok]
    assert claim_runs(store, loaded=[("report", "v3")], queues=["default", "bulk"]) == []


def test_claim_pending_respects_its_limit(store: SqlStore) -> None:
    insert_runs(store, *(new_run() for _ in range(5)))
    assert claim_runs(store, limit=0) == []
    assert len(claim_runs(store, limit=3)) == 3
    assert len(claim_runs(store, limit=3)) == 2


def test_claim_pending_starts_the_run_as_attempt_1(store: SqlStore) -> None:
    new = new_run()
    insert_runs(store, new)
    with store.transaction() as tx:
        [claim] = tx.runs.claim_pending("wrk-a", QUEUES, LOADED, 10, 30, at(1))
        run = tx.runs.get(TENANT, new.id)
    assert (claim.id, claim.attempt, claim.input, claim.origin) == (new.id, 1, INPUT, new.origin)
    assert (claim.workflow, claim.definition_version, claim.timeout_seconds) == (
        "report",
        "v1",
        60.0,
    )
    assert run is not None
    assert (run.state, run.attempts) == (RunState.RUNNING, 1)
    if store.dialect == "postgresql":  # the database's clock, like the lease (FT-2)
        assert run.claimed_at is not None
        assert abs((run.claimed_at - datetime.now(UTC)).total_seconds()) < 60
    else:
        assert run.claimed_at == at(1)
    assert run.started_at is None  # set when the body begins (mark_started)
    assert claim.claim_token == "wrk-a/1"


def test_each_claim_of_a_run_is_a_new_attempt(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    attempts: list[int] = []
    for round_ in range(3):
        now = at(100 * round_)
        with store.transaction() as tx:
            [claim] = tx.runs.claim_pending("wrk-a", QUEUES, LOADED, 1, EXPIRED, now)
            attempts.append(claim.attempt)
            assert tx.runs.release_lost(now + timedelta(seconds=1), max_attempts=10) == (1, [])
    assert attempts == [1, 2, 3]
    with store.transaction(readonly=True) as tx:
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.attempts) == (RunState.PENDING, 3)


def test_a_claimed_run_is_not_claimed_again(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    assert claim_runs(store, "wrk-a") == [run_id]
    assert claim_runs(store, "wrk-b", now=at(3600)) == []


def test_finish_records_the_outcome_of_the_current_attempt(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    claim_runs(store, "wrk-a")
    with store.transaction() as tx:
        assert tx.runs.finish(run_id, "wrk-a", 1, RunState.COMPLETED, {"rows": 3}, None, at(9))
        run = tx.runs.get(TENANT, run_id)
        # The outcome is recorded once; a duplicate report is refused.
        assert not tx.runs.finish(run_id, "wrk-a", 1, RunState.FAILED, None, {"x": 1}, at(10))
    assert run is not None
    assert (run.state, run.result, run.error, run.ended_at) == (
        RunState.COMPLETED,
        {"rows": 3},
        None,
        at(9),
    )


def test_finish_is_refused_for_another_worker_or_attempt(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    claim_runs(store, "wrk-a", lease_seconds=EXPIRED)
    with store.transaction() as tx:
        tx.runs.release_lost(at(31), max_attempts=5)
        [claim] = tx.runs.claim_pending("wrk-b", QUEUES, LOADED, 1, 60, at(32))
        assert claim.attempt == 2
        assert not tx.runs.finish(run_id, "wrk-a", 1, RunState.COMPLETED, 1, None, at(33))
        assert not tx.runs.finish(run_id, "wrk-a", 2, RunState.COMPLETED, 1, None, at(33))
        assert not tx.runs.finish(run_id, "wrk-b", 1, RunState.COMPLETED, 1, None, at(33))
        run = tx.runs.get(TENANT, run_id)
        assert run is not None
        assert run.state is RunState.RUNNING
        assert tx.runs.finish(run_id, "wrk-b", 2, RunState.FAILED, None, {"type": "E"}, at(34))


def test_finish_is_refused_after_terminate(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    claim_runs(store, "wrk-a")
    with store.transaction() as tx:
        tx.runs.terminate(TENANT, run_id, at(5), "operator stopped it")
        assert not tx.runs.finish(run_id, "wrk-a", 1, RunState.COMPLETED, {"late": 1}, None, at(6))
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.result, run.ended_at) == (RunState.TERMINATED, None, at(5))
    assert run.error == {"code": "terminated", "message": "operator stopped it"}


def test_terminate_records_terminated_at_once_and_only_for_active_runs(store: SqlStore) -> None:
    running, done = insert_runs(store, new_run(), new_run())
    assert set(claim_runs(store, "wrk-a", limit=2)) == {running, done}
    [pending] = insert_runs(store, new_run(), now=at(1))
    with store.transaction() as tx:
        assert tx.runs.finish(done, "wrk-a", 1, RunState.COMPLETED, 1, None, at(1))
        for run_id in (pending, running, done):
            tx.runs.terminate(TENANT, run_id, at(2), "stop")
        # Idempotent: terminating again keeps the first record.
        tx.runs.terminate(TENANT, running, at(3), "again")
        runs = [tx.runs.get(TENANT, run_id) for run_id in (pending, running, done)]
    assert [(r.state, r.ended_at) for r in runs if r] == [
        (RunState.TERMINATED, at(2)),
        (RunState.TERMINATED, at(2)),
        (RunState.COMPLETED, at(1)),
    ]
    assert runs[1] is not None
    assert runs[1].error == {"code": "terminated", "message": "stop"}


def test_terminate_of_another_tenants_run_changes_nothing(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    with store.transaction() as tx:
        tx.runs.terminate(OTHER_TENANT, run_id, at(1), "not yours")
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert run.state is RunState.PENDING


def test_terminate_ends_a_pending_run(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    with store.transaction() as tx:
        tx.runs.terminate(TENANT, run_id, at(1), "no longer wanted")
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.ended_at) == (RunState.TERMINATED, at(1))
    assert claim_runs(store, now=at(2)) == []


def test_request_cancel_ends_an_unclaimed_pending_run_canceled(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, run_id, at(1))
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.ended_at, run.cancel_requested) == (RunState.CANCELED, at(1), True)
    assert claim_runs(store, now=at(2)) == []


def test_request_cancel_only_flags_a_running_run(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    claim_runs(store, "wrk-a")
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, run_id, at(1))
        tx.runs.request_cancel(TENANT, run_id, at(2))
        [flags] = tx.runs.flags([run_id])
        run = tx.runs.get(TENANT, run_id)
        assert tx.runs.finish(run_id, "wrk-a", 1, RunState.CANCELED, None, None, at(3))
    assert (flags.id, flags.state, flags.cancel_requested) == (run_id, "running", True)
    assert run is not None
    assert (run.state, run.ended_at, run.cancel_requested) == (RunState.RUNNING, None, True)


def test_request_cancel_leaves_finished_and_foreign_runs_alone(store: SqlStore) -> None:
    [done] = insert_runs(store, new_run())
    assert claim_runs(store, "wrk-a") == [done]
    [foreign] = insert_runs(store, new_run())
    with store.transaction() as tx:
        assert tx.runs.finish(done, "wrk-a", 1, RunState.COMPLETED, 7, None, at(1))
        tx.runs.request_cancel(TENANT, done, at(2))
        tx.runs.request_cancel(OTHER_TENANT, foreign, at(2))
        finished = tx.runs.get(TENANT, done)
        other = tx.runs.get(TENANT, foreign)
    assert finished is not None
    assert (finished.state, finished.cancel_requested, finished.ended_at) == (
        RunState.COMPLETED,
        False,
        at(1),
    )
    assert other is not None
    assert (other.state, other.cancel_requested) == (RunState.PENDING, False)


def test_flags_of_no_runs_is_empty(store: SqlStore) -> None:
    with store.transaction(readonly=True) as tx:
        assert tx.runs.flags([]) == []


def test_release_lost_requeues_running_runs_whose_lease_expired(store: SqlStore) -> None:
    [lost] = insert_runs(store, new_run())
    assert claim_runs(store, "wrk-a", lease_seconds=EXPIRED) == [lost]
    [alive] = insert_runs(store, new_run())
    assert claim_runs(store, "wrk-b", lease_seconds=60) == [alive]
    with store.transaction() as tx:
        assert tx.runs.release_lost(at(11), max_attempts=3) == (1, [])
        assert tx.runs.release_lost(at(11), max_attempts=3) == (0, [])
        requeued = tx.runs.get(TENANT, lost)
        running = tx.runs.get(TENANT, alive)
    assert requeued is not None
    assert (requeued.state, requeued.attempts) == (RunState.PENDING, 1)
    assert running is not None
    assert running.state is RunState.RUNNING
    # The dead worker's late result is refused; the next claim is attempt 2.
    with store.transaction() as tx:
        assert not tx.runs.finish(lost, "wrk-a", 1, RunState.COMPLETED, 1, None, at(12))
        [again] = tx.runs.claim_pending("wrk-c", QUEUES, LOADED, 1, 60, at(12))
    assert (again.id, again.attempt) == (lost, 2)


def test_release_lost_fails_a_run_after_max_attempts(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    results: list[tuple[int, list[StoreEndedRun]]] = []
    for round_ in range(2):
        now = at(100 * round_)
        claim_runs(store, now=now, lease_seconds=EXPIRED)
        with store.transaction() as tx:
            results.append(tx.runs.release_lost(now + timedelta(seconds=11), max_attempts=2))
    failed = StoreEndedRun(TENANT, run_id, new_run().workflow, 2, "failed")
    assert results == [(1, []), (0, [failed])]
    with store.transaction(readonly=True) as tx:
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    assert (run.state, run.attempts, run.ended_at) == (RunState.FAILED, 2, at(111))
    assert run.error is not None and run.error["code"] == "worker_lost"
    assert claim_runs(store, now=at(200)) == []


def test_renew_leases_keeps_a_run_from_being_released(store: SqlStore) -> None:
    [run_id] = insert_runs(store, new_run())
    claim_runs(store, "wrk-a", lease_seconds=EXPIRED)
    with store.transaction() as tx:
        # Not its claim (another worker, or an earlier attempt): ignored.
        assert tx.runs.renew_leases([RunClaim(run_id, "wrk-b/1")], 1000, at(1)) == set()
        assert tx.runs.renew_leases([RunClaim(run_id, "wrk-a/0")], 1000, at(1)) == set()
        assert tx.runs.renew_leases([RunClaim(run_id, "wrk-a/1")], 60, at(1)) == {run_id}
        assert tx.runs.renew_leases([], 60, at(1)) == set()
        assert tx.runs.release_lost(at(30), max_attempts=3) == (0, [])
        assert tx.runs.renew_leases([RunClaim(run_id, "wrk-a/1")], EXPIRED, at(1)) == {run_id}
        assert tx.runs.release_lost(at(2), max_attempts=3) == (1, [])


def test_time_out_pending_ends_runs_no_worker_picked_up(store: SqlStore) -> None:
    [running] = insert_runs(store, new_run(), now=T0)
    assert claim_runs(store, now=at(1), lease_seconds=300) == [running]
    [stale] = insert_runs(store, new_run(), now=T0)
    [young] = insert_runs(store, new_run(), now=at(100))
    with store.transaction() as tx:
        ended = tx.runs.time_out_pending(at(50), at(200), 50.0)
        assert [(run.id, run.state) for run in ended] == [(stale, "timed_out")]
        runs = [tx.runs.get(TENANT, run_id) for run_id in (stale, young, running)]
    assert [run.state for run in runs if run] == [
        RunState.TIMED_OUT,
        RunState.PENDING,
        RunState.RUNNING,
    ]
    assert runs[0] is not None
    assert runs[0].ended_at == at(200)
    assert runs[0].error is not None


def test_count_unfinished_spans_tenants_and_ignores_finished_runs(store: SqlStore) -> None:
    [running] = insert_runs(store, new_run())
    assert claim_runs(store) == [running]
    _pending, canceled, _foreign, _v2 = insert_runs(
        store,
        new_run(),
        new_run(),
        new_run(tenant=OTHER_TENANT),
        new_run(version="v2"),
    )
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, canceled, at(1))
        assert tx.runs.count_unfinished("report", "v1") == 3
        assert tx.runs.count_unfinished("report", "v2") == 1
        assert tx.runs.count_unfinished("invoice", "v1") == 0


def test_find_runs_filters_and_pages(store: SqlStore) -> None:
    origin = new_id("st")
    a, b, c, d = insert_runs(
        store,
        new_run(origin_id=origin),
        new_run(workflow="invoice"),
        new_run(),
        new_run(workflow="invoice", origin_id=origin),
    )
    insert_runs(store, new_run(tenant=OTHER_TENANT, origin_id=origin))
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, c, at(1))

        def ids(where: RunFilter, after: int | None = None, limit: int = 100) -> list[str]:
            return [run.id for _, run in tx.runs.find(TENANT, where, Seek(limit, after, OLDEST))]

        assert ids(RunFilter()) == [a, b, c, d]
        assert ids(RunFilter(workflow="invoice")) == [b, d]
        assert ids(RunFilter(state="canceled")) == [c]
        assert ids(RunFilter(origin_id=origin)) == [a, d]
        assert ids(RunFilter(workflow="report", state="pending")) == [a]
        first = tx.runs.find(TENANT, RunFilter(), Seek(3, None, OLDEST))
        assert [run.id for _, run in first] == [a, b, c]
        assert ids(RunFilter(), after=first[-1][0]) == [d]
        newest = tx.runs.find(TENANT, RunFilter(), Seek(3))
        assert [run.id for _, run in newest] == [d, c, b]
        older = tx.runs.find(TENANT, RunFilter(), Seek(3, newest[-1][0]))
        assert [run.id for _, run in older] == [a]


def test_find_runs_by_schedule_and_by_source(store: SqlStore) -> None:
    one_off, nightly, hourly = insert_runs(
        store, new_run(), new_run(schedule_id="sch_nightly"), new_run(schedule_id="sch_hourly")
    )
    insert_runs(store, new_run(tenant=OTHER_TENANT, schedule_id="sch_nightly"))
    with store.transaction(readonly=True) as tx:

        def ids(where: RunFilter) -> list[str]:
            return [run.id for _, run in tx.runs.find(TENANT, where, Seek(100))]

        assert ids(RunFilter(schedule_id="sch_nightly")) == [nightly]
        assert ids(RunFilter(source="schedule")) == [hourly, nightly]
        assert ids(RunFilter(source="scheduled_start")) == [one_off]
        assert ids(RunFilter(schedule_id="sch_hourly", source="scheduled_start")) == []


# --- findings -----------------------------------------------------------------------------


def _raise(
    store: SqlStore, kind: str = "start_failed", subject: str = "st_1", tenant: str = TENANT
) -> bool:
    with store.transaction() as tx:
        return tx.findings.raise_finding(tenant, kind, subject, "error", f"{subject} failed", T0)


def test_raise_finding_once_per_tenant_kind_and_subject(store: SqlStore) -> None:
    assert _raise(store) is True
    assert _raise(store) is False
    assert _raise(store, kind="engine_unavailable") is True
    assert _raise(store, subject="st_2") is True
    assert _raise(store, tenant=OTHER_TENANT) is True
    with store.transaction(readonly=True) as tx:
        findings = tx.findings.find(TENANT)
    assert [(f.kind, f.subject_id) for f in findings] == [
        ("start_failed", "st_1"),
        ("engine_unavailable", "st_1"),
        ("start_failed", "st_2"),
    ]
    assert findings[0].message == "st_1 failed"
    assert (findings[0].severity, findings[0].created_at) == ("error", T0)


def test_clear_removes_a_finding_so_it_can_be_raised_again(store: SqlStore) -> None:
    _raise(store)
    with store.transaction() as tx:
        tx.findings.clear(TENANT, "start_failed", "st_1")
        assert tx.findings.find(TENANT) == []
    assert _raise(store) is True


def test_get_finding_is_tenant_scoped(store: SqlStore) -> None:
    _raise(store)
    with store.transaction(readonly=True) as tx:
        [finding] = tx.findings.find(TENANT)
        assert tx.findings.get(TENANT, finding.id) == finding
        assert tx.findings.get(OTHER_TENANT, finding.id) is None
        assert tx.findings.get(TENANT, new_id("fnd")) is None


def test_acknowledge_is_idempotent(store: SqlStore) -> None:
    _raise(store)
    with store.transaction() as tx:
        [finding] = tx.findings.find(TENANT)
        first = tx.findings.acknowledge(TENANT, finding.id, "alice", at(10))
        second = tx.findings.acknowledge(TENANT, finding.id, "bob", at(20))
    assert first is not None
    assert (first.acknowledged_at, first.acknowledged_by) == (at(10), "alice")
    assert second == first


def test_acknowledge_an_unknown_or_foreign_finding_returns_none(store: SqlStore) -> None:
    _raise(store)
    with store.transaction() as tx:
        [finding] = tx.findings.find(TENANT)
        assert tx.findings.acknowledge(TENANT, new_id("fnd"), "alice", at(1)) is None
        assert tx.findings.acknowledge(OTHER_TENANT, finding.id, "alice", at(1)) is None
        unchanged = tx.findings.get(TENANT, finding.id)
    assert unchanged is not None
    assert unchanged.acknowledged_at is None


def test_find_findings_oldest_first_within_limit(store: SqlStore) -> None:
    for i in range(5):
        _raise(store, subject=f"st_{i}")
    with store.transaction(readonly=True) as tx:
        page = tx.findings.find(TENANT, 0, 3)
    assert [f.subject_id for f in page] == ["st_0", "st_1", "st_2"]


# --- concurrent claimers ------------------------------------------------------------------

CLAIMERS = 8


def _race(work: Callable[[int], list[str]]) -> list[list[str]]:
    """Run ``work`` on CLAIMERS threads released together; re-raise the first failure."""
    barrier = threading.Barrier(CLAIMERS)
    results: list[list[str]] = [[] for _ in range(CLAIMERS)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
    return results


def test_concurrent_claim_due_claims_every_start_exactly_once(store: SqlStore) -> None:
    ids = insert_starts(store, *(new_start(start_at=at(-i)) for i in range(200)))

    def claim_until_empty(index: int) -> list[str]:
        claimed: list[str] = []
        while True:
            with store.transaction() as tx:
                page = tx.starts.claim_due(T0, 10, f"runner-{index}", 60)
            if not page:
                return claimed
            assert len(page) <= 10
            claimed.extend(claim.id for claim in page)

    claimed = [start_id for page in _race(claim_until_empty) for start_id in page]
    assert [item for item, n in Counter(claimed).items() if n > 1] == []
    assert sorted(claimed) == sorted(ids)
    with store.transaction(readonly=True) as tx:
        assert tx.starts.count_in_state(TENANT, StartState.DISPATCHING) == 200


def test_concurrent_claim_pending_claims_every_run_exactly_once(store: SqlStore) -> None:
    ids = insert_runs(store, *(new_run(priority=1 + i % 5) for i in range(100)))

    def claim_until_empty(index: int) -> list[str]:
        claimed: list[str] = []
        while page := claim_runs(store, f"wrk-{index}", limit=5, lease_seconds=60):
            assert len(page) <= 5
            claimed.extend(page)
        return claimed

    claimed = [run_id for page in _race(claim_until_empty) for run_id in page]
    assert [item for item, n in Counter(claimed).items() if n > 1] == []
    assert sorted(claimed) == sorted(ids)
    with store.transaction(readonly=True) as tx:
        assert tx.runs.count_unfinished("report", "v1") == 100
        runs = [tx.runs.get(TENANT, run_id) for run_id in ids]
    assert {(run.state, run.attempts) for run in runs if run} == {(RunState.RUNNING, 1)}
