"""Tenants, members and bearer tokens."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore
from punctual.adapters.stores.sql.reads import paged
from punctual.adapters.stores.sql.rows import record_from_row
from punctual.domain.permissions import Principal, Role
from punctual.ports.records import LiveToken, MemberRecord, Order, Seek, TokenRecord


class SqlIdentity:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def ensure_tenant(self, tenant: str, now: datetime) -> bool:
        return insert_ignore(self._conn, t.tenants, [{"id": tenant, "created_at": now}], ["id"]) > 0

    def tenant_exists(self, tenant: str) -> bool:
        query = sa.select(t.tenants.c.id).where(t.tenants.c.id == tenant)
        return self._conn.execute(query).first() is not None

    def upsert_member(self, tenant: str, subject: str, role: Role, now: datetime) -> bool:
        """Add the member or change its role; True if it was new."""
        inserted = insert_ignore(
            self._conn,
            t.members,
            [{"tenant": tenant, "subject": subject, "role": role.value, "created_at": now}],
            ["tenant", "subject"],
        )
        if not inserted:
            self._conn.execute(
                sa.update(t.members)
                .where(t.members.c.tenant == tenant, t.members.c.subject == subject)
                .values(role=role.value)
            )
        return inserted > 0

    def member_role(self, tenant: str, subject: str) -> Role | None:
        query = sa.select(t.members.c.role).where(
            t.members.c.tenant == tenant, t.members.c.subject == subject
        )
        role = self._conn.execute(query).scalar_one_or_none()
        return Role(role) if role is not None else None

    def member_roles(self, members: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Role]:
        wanted = set(members)
        if not wanted:
            return {}
        m = t.members.c
        query = sa.select(m.tenant, m.subject, m.role).where(
            sa.tuple_(m.tenant, m.subject).in_(sorted(wanted))
        )
        return {(r.tenant, r.subject): Role(r.role) for r in self._conn.execute(query)}

    def subjects_with_role(self, tenant: str, role: Role) -> list[str]:
        m = t.members.c
        query = (
            sa.select(m.subject).where(m.tenant == tenant, m.role == role.value).order_by(m.subject)
        )
        return list(self._conn.execute(query).scalars())

    def members(self, tenant: str, at: Seek[tuple[datetime, str]]) -> list[MemberRecord]:
        """Keyset paging on ``(created_at, subject)``: members have no ``seq``, and a
        tenant's are few, so no index is needed beyond the key's ``tenant``."""
        m = t.members.c
        query = sa.select(t.members).where(m.tenant == tenant)
        newest = at.order is Order.NEWEST
        if at.after is not None:
            joined, subject = at.after
            past = (m.created_at < joined) if newest else (m.created_at > joined)
            tied = (m.subject < subject) if newest else (m.subject > subject)
            query = query.where(sa.or_(past, sa.and_(m.created_at == joined, tied)))
        keys = (m.created_at.desc(), m.subject.desc()) if newest else (m.created_at, m.subject)
        rows = self._conn.execute(query.order_by(*keys).limit(at.limit)).mappings()
        return [
            MemberRecord(r["tenant"], r["subject"], Role(r["role"]), r["created_at"]) for r in rows
        ]

    def remove_member(self, tenant: str, subject: str) -> bool:
        result = self._conn.execute(
            sa.delete(t.members).where(t.members.c.tenant == tenant, t.members.c.subject == subject)
        )
        return result.rowcount > 0

    def insert_token(
        self,
        token_id: str,
        tenant: str,
        subject: str,
        digest: str,
        now: datetime,
        expires_at: datetime | None,
    ) -> TokenRecord:
        self._conn.execute(
            sa.insert(t.tokens).values(
                id=token_id,
                tenant=tenant,
                subject=subject,
                digest=digest,
                created_at=now,
                expires_at=expires_at,
            )
        )
        return TokenRecord(token_id, tenant, subject, now, expires_at, None)

    def principal_for_digest(self, digest: str, now: datetime) -> Principal | None:
        live = self.live_token(digest, now)
        return None if live is None else live.principal

    def live_token(self, digest: str, now: datetime) -> LiveToken | None:
        """The live token behind a digest (not revoked, not expired, still a member).

        An indexed equality lookup of the SHA-256 digest of the presented secret: its timing
        can only reveal how the presented digest compares with stored digests, which does
        not help find a 256-bit random secret (see ``usecases.identity.authenticate``).
        """
        query = (
            sa.select(
                t.tokens.c.tenant, t.tokens.c.subject, t.members.c.role, t.tokens.c.expires_at
            )
            .join(
                t.members,
                sa.and_(
                    t.members.c.tenant == t.tokens.c.tenant,
                    t.members.c.subject == t.tokens.c.subject,
                ),
            )
            .where(
                t.tokens.c.digest == digest,
                t.tokens.c.revoked_at.is_(None),
                sa.or_(t.tokens.c.expires_at.is_(None), t.tokens.c.expires_at > now),
            )
        )
        row = self._conn.execute(query).mappings().first()
        if row is None:
            return None
        principal = Principal(tenant=row["tenant"], subject=row["subject"], role=Role(row["role"]))
        return LiveToken(principal, row["expires_at"])

    def list_tokens(self, tenant: str, at: Seek[int]) -> list[TokenRecord]:
        query = sa.select(t.tokens).where(t.tokens.c.tenant == tenant)
        query = paged(query, t.tokens.c.seq, at)
        return [record_from_row(TokenRecord, r) for r in self._conn.execute(query).mappings()]

    def revoke_token(self, tenant: str, token_id: str, now: datetime) -> bool:
        """Revoke one token; True if it exists in the tenant (revoking twice is fine)."""
        exists = self._conn.execute(
            sa.select(t.tokens.c.id).where(t.tokens.c.tenant == tenant, t.tokens.c.id == token_id)
        ).first()
        self._revoke(now, t.tokens.c.tenant == tenant, t.tokens.c.id == token_id)
        return exists is not None

    def revoke_tokens_of(self, tenant: str, subject: str, now: datetime) -> int:
        return self._revoke(now, t.tokens.c.tenant == tenant, t.tokens.c.subject == subject)

    def _revoke(self, now: datetime, *which: sa.ColumnElement[bool]) -> int:
        """Revoke the tokens ``which`` selects that are not revoked yet; how many were not."""
        update = sa.update(t.tokens).where(*which, t.tokens.c.revoked_at.is_(None))
        return self._conn.execute(update.values(revoked_at=now)).rowcount
