"""The store's repositories of who may act and with what: identities, workflow
definitions, idempotency records and codec keys."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import Definition, DefinitionState
from punctual.ports.records import (
    IdempotencyRecord,
    KeyOutcome,
    LiveToken,
    MemberRecord,
    ProcessRecord,
    Resealed,
    SealedKind,
    SealedValue,
    Seek,
    TokenRecord,
    WorkerRecord,
)


class Identity(Protocol):
    def ensure_tenant(self, tenant: str, now: datetime) -> bool:
        """Create the tenant if absent; True if created. Idempotent."""

    def tenant_exists(self, tenant: str) -> bool: ...

    def upsert_member(self, tenant: str, subject: str, role: Role, now: datetime) -> bool:
        """Add a member or change its role; True if the member is new."""

    def member_role(self, tenant: str, subject: str) -> Role | None: ...

    def member_roles(self, members: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Role]:
        """Roles of (tenant, subject) pairs in one read; a pair that is no member is absent."""

    def remove_member(self, tenant: str, subject: str) -> bool: ...

    def members(self, tenant: str, at: Seek[tuple[datetime, str]]) -> list[MemberRecord]:
        """The page of the tenant's members ``at`` selects, in the order they joined
        (``created_at``, then ``subject``: the position ``at.after`` names)."""

    def subjects_with_role(self, tenant: str, role: Role) -> list[str]:
        """Members of the tenant with the role, sorted (notifications of a schedule whose
        creator left go to the admins, CR-4)."""

    def insert_token(
        self,
        token_id: str,
        tenant: str,
        subject: str,
        digest: str,
        now: datetime,
        expires_at: datetime | None,
    ) -> TokenRecord:
        """Store only the digest of a token; the secret is never stored."""

    def principal_for_digest(self, digest: str, now: datetime) -> Principal | None:
        """The principal of a live token: not revoked, not expired, still a member."""

    def live_token(self, digest: str, now: datetime) -> LiveToken | None:
        """``principal_for_digest`` with the token's expiry, for a process that remembers
        the answer for a while (it must not outlive the token)."""

    def list_tokens(self, tenant: str, at: Seek[int]) -> list[TokenRecord]:
        """The page of the tenant's tokens ``at`` selects, by ``seq``."""

    def revoke_token(self, tenant: str, token_id: str, now: datetime) -> bool:
        """Must be idempotent; False only when the token does not exist in the tenant."""

    def revoke_tokens_of(self, tenant: str, subject: str, now: datetime) -> int: ...


class Definitions(Protocol):
    def register(
        self,
        name: str,
        version: str,
        artifact: str,
        input_schema: dict[str, Any],
        execution_timeout_seconds: float,
        now: datetime,
    ) -> bool:
        """Insert a version if new. The first version of a name must become active; an
        existing version must keep its state (a restarting worker never re-activates)."""

    def get(self, name: str, version: str) -> Definition | None: ...

    def active(self, name: str) -> Definition | None:
        """The one active version of ``name``, if any."""

    def find(self, after_seq: int = 0, limit: int = 1000) -> list[tuple[int, Definition]]: ...

    def set_state(self, name: str, version: str, state: DefinitionState) -> None:
        """Activating a version must deprecate the previously active one of that name."""

    def upsert_worker(self, worker: WorkerRecord) -> None: ...

    def heartbeat_worker(self, worker_id: str, now: datetime) -> bool: ...

    def stop_worker(self, worker_id: str, now: datetime) -> None: ...

    def live_workers(self, since: datetime) -> list[WorkerRecord]:
        """Workers that heartbeated at or after ``since`` and have not stopped."""

    def prune_workers(self, before: datetime) -> list[str]:
        """Forget workers that stopped or went silent before ``before``; their ids."""


class Idempotency(Protocol):
    def try_claim(
        self,
        tenant: str,
        principal: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """Record the key in flight for ``owner``; False if any row exists for the key."""

    def take_over(
        self,
        tenant: str,
        principal: str,
        key: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """Adopt an in-flight key whose lease expired before ``now``."""

    def get(self, tenant: str, principal: str, key: str) -> IdempotencyRecord | None: ...

    def complete(
        self,
        tenant: str,
        principal: str,
        key: str,
        owner: str,
        status_code: int,
        response: Any,
        resource_id: str | None,
        now: datetime,
    ) -> bool:
        """Record the decided outcome; must fail (False) if ``owner`` lost the key."""

    def release(self, tenant: str, principal: str, key: str, owner: str) -> None: ...

    def claim_many(
        self,
        tenant: str,
        principal: str,
        keys: Sequence[tuple[str, str]],
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> set[str]:
        """``try_claim`` for many ``(key, fingerprint)`` pairs; returns the keys claimed.
        Must take the keys in one order (sorted), so overlapping claims cannot deadlock."""

    def get_many(
        self, tenant: str, principal: str, keys: Sequence[str]
    ) -> dict[str, IdempotencyRecord]: ...

    def complete_many(
        self,
        tenant: str,
        principal: str,
        owner: str,
        outcomes: Sequence[KeyOutcome],
        now: datetime,
    ) -> set[str]:
        """``complete`` for many keys; returns the keys recorded."""

    def release_many(self, tenant: str, principal: str, keys: Sequence[str], owner: str) -> None:
        """``release`` for many keys."""


class Keys(Protocol):
    """The codec key lifecycle's records (RT-2): the active key id, the processes that
    report which keys they hold, and the sealed values a rewrap moves to the active key.

    Liveness is judged on the store's clock (the database's on PostgreSQL, ``now`` on
    SQLite), so hosts with skewed clocks agree on which processes are live.
    """

    def lock(self) -> None:
        """Until commit, other ``lock`` callers wait: an activation and a process joining
        decide one at a time, so neither misses the other."""

    def active_key_id(self) -> str | None:
        """The key id ``punctual keys activate`` recorded; None before the first one."""

    def set_active_key_id(self, key_id: str, now: datetime) -> None: ...

    def heartbeat_process(self, process: ProcessRecord, now: datetime) -> None:
        """Insert or refresh the process's row (``heartbeat_at`` = the store's clock); a
        row marked stopped stays stopped."""

    def stop_process(self, process_id: str, now: datetime) -> None: ...

    def live_processes(self, liveness_seconds: float, now: datetime) -> list[ProcessRecord]:
        """Processes not stopped whose last heartbeat is less than ``liveness_seconds``
        old, oldest first."""

    def prune_processes(self, liveness_seconds: float, now: datetime) -> int:
        """Forget processes that stopped or have not been live for ``liveness_seconds``."""

    def sealed(
        self, kind: SealedKind, other_than: str, after_seq: int, limit: int
    ) -> list[SealedValue]:
        """Values of ``kind`` that may still be read and are sealed with a key other than
        ``other_than``, after ``after_seq`` in row order; starts being dispatched are left
        out (their claim holds a copy of the input)."""

    def reseal(self, kind: SealedKind, values: Sequence[Resealed]) -> set[str]:
        """Replace each value only while its row still holds exactly ``old`` and may still
        be read (a concurrent change or claim wins); the ids replaced. Never a version,
        ``updated_at`` or claim change: a rewrap is invisible to users and to dispatch."""
