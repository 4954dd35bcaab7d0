"""Tenants, members and bearer tokens (SEC-1, SEC-5)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, Role, require
from punctual.domain.schedules import auto_disabled_status
from punctual.errors import InvalidRequest, Unauthenticated, not_found
from punctual.ports.records import Order
from punctual.ports.store import Tx
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import member_position, member_seek, page, read_page, seek
from punctual.usecases.kernel.projections import member_view, token_view, ts
from punctual.usecases.outbound.outbox import notify_auto_disabled
from punctual.usecases.recurring import history

TOKEN_BYTES = 32  # 256 bits of randomness


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret() -> str:
    return "pn_" + secrets.token_urlsafe(TOKEN_BYTES)


def authenticate(services: Services, token: str | None) -> Principal:
    """The principal behind a bearer token, or ``Unauthenticated``; as this process checked
    it less than ``auth_cache_seconds`` ago (never past the token's expiry), else from the
    store.

    The secret itself is never compared: the store looks the token up by the SHA-256
    digest of what was presented (an indexed equality). Timing can then tell an attacker
    at most how much of *their own guess's digest* matches some stored digest, which says
    nothing about any secret: finding a token from its digest means inverting SHA-256 over
    256 random bits. That is what protects the lookup (SPEC SEC-1); a second, in-memory
    comparison of the same digest would add nothing.
    """
    if not token:
        raise Unauthenticated("send 'Authorization: Bearer <token>'")
    token_digest, now = digest(token), services.clock.now()
    principal = services.principals.recall(token_digest, now)
    if principal is None:
        with services.store.transaction(readonly=True) as tx:
            live = tx.identity.live_token(token_digest, now)
        if live is None:
            raise Unauthenticated("the token is unknown, revoked or expired")
        services.principals.remember(token_digest, live)
        principal = live.principal
    return principal


def principal_of_digest(services: Services, token_digest: str, now: datetime) -> Principal | None:
    """The principal of a live token by its digest, from the store each time: a page session
    holds only the digest, and ends at once when its token is revoked."""
    with services.store.transaction(readonly=True) as tx:
        return tx.identity.principal_for_digest(token_digest, now)


@dataclass(frozen=True)
class IssuedToken:
    id: str
    token: str
    tenant: str
    subject: str
    expires_at: datetime | None


def issue_token(
    tx: Tx, tenant: str, subject: str, now: datetime, expires_at: datetime | None = None
) -> IssuedToken:
    secret = new_secret()
    record = tx.identity.insert_token(
        new_id("tok"), tenant, subject, digest(secret), now, expires_at
    )
    return IssuedToken(record.id, secret, tenant, subject, expires_at)


TENANT_MAX = 64
SUBJECT_MAX = 200
"""The longest tenant id and member subject the store keeps (API.md); the HTTP member and
token bodies take their bound from here."""


def ensure_member_token(
    services: Services,
    tenant: str,
    subject: str,
    role: Role,
    token: str | None = None,
) -> IssuedToken:
    """Host operation (CLI, first start): create tenant and member if needed, issue a token.

    ``token`` lets a developer choose the secret (``--dev-token``); it is stored hashed
    like any other and must be at least 32 characters.
    """
    if token is not None and len(token) < 32:
        raise InvalidRequest("a chosen token must be at least 32 characters long")
    for name, value, limit in (("tenant", tenant, TENANT_MAX), ("subject", subject, SUBJECT_MAX)):
        if not 1 <= len(value) <= limit:
            raise InvalidRequest(f"{name} must be 1 to {limit} characters long")
    now = services.clock.now()
    with services.store.transaction() as tx:
        tx.identity.ensure_tenant(tenant, now)
        tx.identity.upsert_member(tenant, subject, role, now)
        services.principals.forget_all()  # the member's role may have changed
        if token is None:
            return issue_token(tx, tenant, subject, now)
        if tx.identity.principal_for_digest(digest(token), now) is None:
            tx.identity.insert_token(new_id("tok"), tenant, subject, digest(token), now, None)
        return IssuedToken("", token, tenant, subject, None)


def bootstrap_default_tenant(services: Services, dev_token: str | None) -> IssuedToken | None:
    """On first start create tenant ``default`` with admin ``admin``; the token is returned
    (to print) only when it was created now or chosen with ``--dev-token``."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        created = tx.identity.ensure_tenant("default", now)
        if not created and dev_token is None:
            return None
        tx.identity.upsert_member("default", "admin", Role.ADMIN, now)
    return ensure_member_token(services, "default", "admin", Role.ADMIN, dev_token)


def _parse_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise InvalidRequest(
            f"role must be one of {', '.join(r.value for r in Role)}", code="validation_error"
        ) from None


def add_member(services: Services, principal: Principal, subject: str, role: str) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        parsed = _parse_role(role)
        if not subject or len(subject) > 200:
            raise InvalidRequest("subject must be 1 to 200 characters")
        require(principal, Action.ADMINISTER)
        tx.identity.upsert_member(principal.tenant, subject, parsed, now)
        services.principals.forget_all()  # the member's new role, here at once
        body = {"tenant": principal.tenant, "subject": subject, "role": parsed.value}
        return Outcome(Answer.CREATED, body, resource_id=subject)

    return mutation


def remove_member(services: Services, principal: Principal, subject: str) -> Mutation:
    """Removing a member revokes its tokens and auto-disables the schedules it created
    (CR-3): their runs would carry an identity that no longer belongs to the tenant. The
    admins are told (the creator is gone, CR-4)."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        if tx.identity.member_role(principal.tenant, subject) is None:
            raise not_found("member", subject)
        require(principal, Action.ADMINISTER)
        tx.identity.revoke_tokens_of(principal.tenant, subject, now)
        tx.identity.remove_member(principal.tenant, subject)
        services.principals.forget_all()
        status = auto_disabled_status(f"its creator {subject} was removed from the tenant")
        for schedule in tx.schedules.by_creator(principal.tenant, subject):
            if schedule.enabled and tx.schedules.compare_and_set(
                schedule.id, schedule.version, now, enabled=False, last_status=status
            ):
                notify_auto_disabled(services, tx, schedule, status, now)
                history.auto_disabled(tx, schedule, now)
                schedule_driver.mark_drifted(services, tx, schedule.id, now)
        return Outcome(Answer.REMOVED, None, resource_id=subject)

    return mutation


def create_token(
    services: Services, principal: Principal, subject: str, expires_at: datetime | None
) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        if tx.identity.member_role(principal.tenant, subject) is None:
            raise not_found("member", subject)
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("expires_at must be in the future", code="validation_error")
        require(principal, Action.ADMINISTER)
        issued = issue_token(tx, principal.tenant, subject, now, expires_at)
        body = {
            "id": issued.id,
            "token": issued.token,
            "subject": subject,
            "expires_at": ts(expires_at),
        }
        # The secret is shown once: a replay answers without it.
        recorded = {**body, "token": None}
        return Outcome(Answer.CREATED, body, resource_id=issued.id, recorded_body=recorded)

    return mutation


def list_tokens(
    services: Services,
    principal: Principal,
    limit: int,
    cursor: str | None,
    order: str | None = None,
) -> dict[str, Any]:
    """Admins only; newest first unless ``order`` is ``oldest``."""
    at = seek(limit, cursor, order, legacy=Order.OLDEST)
    require(principal, Action.ADMINISTER)
    return read_page(services, principal, at, lambda tx: tx.identity.list_tokens, token_view)


def list_members(
    services: Services,
    principal: Principal,
    limit: int,
    cursor: str | None,
    order: str | None = None,
) -> dict[str, Any]:
    """Admins only; the tenant's members, the latest to join first unless ``order`` is
    ``oldest`` (a role change keeps a member's place)."""
    at = member_seek(limit, cursor, order)
    require(principal, Action.ADMINISTER)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.identity.members(principal.tenant, at)
    keyed = [((m.created_at, m.subject), m) for m in rows]
    return page(keyed, at, member_view, member_position)


def revoke_token(services: Services, principal: Principal, token_id: str) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        require(principal, Action.ADMINISTER)
        if not tx.identity.revoke_token(principal.tenant, token_id, now):
            raise not_found("token", token_id)
        services.principals.forget_all()
        return Outcome(Answer.REMOVED, None, resource_id=token_id)

    return mutation
