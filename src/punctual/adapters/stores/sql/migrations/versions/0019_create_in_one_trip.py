"""create in one trip: a create's whole transaction as one server-side function (OP-5)

On PostgreSQL a create used to be a transaction of nine round trips: ``BEGIN``, the lock
timeout, the idempotency insert, the definition read, the pending count, the start
insert, the idempotency update, the audit insert, ``COMMIT``. The process has already
decided everything but what only the database knows, so ``punctual_create_start`` takes
those decisions and the rows, and does the rest in one statement, sent in autocommit:

1. the key is inserted already decided (its ``201`` and body); a key that exists is
   answered with its record and nothing else happens (a replay, or the caller's slower
   path). A concurrent request holding the key is waited for, up to the lock timeout;
2. the definition the input was validated against must still be the active version;
3. the tenant's pending count (the advisory lock first when the quota is exact, QA-3) must
   leave room, in the tenant and in the class;
4. the start and the audit entry are inserted, and due work is announced.

On a refusal at 2 or 3 the key's row is deleted again and the answer names the refusal:
the caller takes the transaction path, which words the error. Column lists are explicit,
so a later column with a default takes it; a migration that adds a column the create must
set replaces this function.

SQLite has no server-side functions and needs none: its store is in process.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE FUNCTION punctual_create_start(
    p_tenant text, p_principal text, p_key text, p_fingerprint text, p_owner text,
    p_lease_until timestamptz, p_response jsonb,
    p_id text, p_workflow text, p_definition_version text, p_business_request_id text,
    p_start_at timestamptz, p_time_zone text, p_workload_class text, p_attributes jsonb,
    p_traceparent text, p_input bytea, p_input_key_id text, p_created_by text, p_run_id text,
    p_now timestamptz,
    p_max_pending bigint, p_max_pending_in_class bigint, p_lock_quota boolean,
    p_fold_after bigint,
    p_audit_id text, p_audit_actor text, p_audit_token_id text, p_audit_token_digest text,
    p_audit_action text, p_audit_method text, p_audit_path text, p_audit_subject_kind text,
    p_audit_subject_id text, p_audit_status integer,
    p_notify_channel text, p_lock_timeout text
) RETURNS TABLE (
    outcome text, status_code integer, response jsonb, fingerprint text, state text
) LANGUAGE plpgsql AS $$
DECLARE
    v_total bigint;
    v_in_class bigint;
    v_rows bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);

    INSERT INTO idempotency_keys AS k (
        tenant, principal, key, fingerprint, state, owner, lease_until, status_code,
        response, resource_id, created_at, decided_at
    ) VALUES (
        p_tenant, p_principal, p_key, p_fingerprint, 'done', p_owner, p_lease_until, 201,
        p_response, p_id, p_now, p_now
    ) ON CONFLICT (tenant, principal, key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'key_taken'::text, k.status_code, k.response, k.fingerprint::text,
            k.state::text
            FROM idempotency_keys AS k
            WHERE k.tenant = p_tenant AND k.principal = p_principal AND k.key = p_key;
        RETURN;
    END IF;

    IF NOT EXISTS (
        SELECT 1 FROM definitions AS d
        WHERE d.name = p_workflow AND d.version = p_definition_version AND d.state = 'active'
    ) THEN
        DELETE FROM idempotency_keys AS k
            WHERE k.tenant = p_tenant AND k.principal = p_principal AND k.key = p_key;
        RETURN QUERY SELECT 'definition_changed'::text, NULL::integer, NULL::jsonb,
            NULL::text, NULL::text;
        RETURN;
    END IF;

    IF p_lock_quota THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('punctual.quota:' || p_tenant, 0));
    END IF;
    SELECT coalesce(sum(c.delta), 0),
           coalesce(sum(c.delta) FILTER (WHERE c.workload_class = p_workload_class), 0),
           count(*)
        INTO v_total, v_in_class, v_rows
        FROM pending_start_counts AS c WHERE c.tenant = p_tenant;
    IF v_rows > p_fold_after THEN
        WITH taken AS (
            DELETE FROM pending_start_counts AS c WHERE c.tenant = p_tenant
            RETURNING c.workload_class, c.delta
        )
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT p_tenant, taken.workload_class, sum(taken.delta) FROM taken
        GROUP BY taken.workload_class HAVING sum(taken.delta) <> 0
        ORDER BY taken.workload_class;
    END IF;
    IF v_total >= p_max_pending
        OR (p_max_pending_in_class IS NOT NULL AND v_in_class >= p_max_pending_in_class) THEN
        DELETE FROM idempotency_keys AS k
            WHERE k.tenant = p_tenant AND k.principal = p_principal AND k.key = p_key;
        RETURN QUERY SELECT 'over_quota'::text, NULL::integer, NULL::jsonb, NULL::text,
            NULL::text;
        RETURN;
    END IF;

    INSERT INTO starts (
        id, tenant, workflow, business_request_id, start_at, time_zone, workload_class,
        attributes, traceparent, input, input_key_id, state, version, attempts, due_at,
        created_by, created_at, updated_at, run_id
    ) VALUES (
        p_id, p_tenant, p_workflow, p_business_request_id, p_start_at, p_time_zone,
        p_workload_class, p_attributes, p_traceparent, p_input, p_input_key_id, 'scheduled',
        1, 0, p_start_at, p_created_by, p_now, p_now, p_run_id
    );

    IF p_audit_id IS NOT NULL THEN
        INSERT INTO audit_log (
            id, tenant, at, actor, token_id, action, method, path, subject_kind, subject_id,
            status
        ) VALUES (
            p_audit_id, p_tenant, p_now, p_audit_actor,
            coalesce(
                p_audit_token_id,
                (SELECT t.id FROM tokens AS t WHERE t.digest = p_audit_token_digest LIMIT 1)
            ),
            p_audit_action, p_audit_method, p_audit_path, p_audit_subject_kind,
            p_audit_subject_id, p_audit_status
        );
    END IF;

    IF p_notify_channel IS NOT NULL THEN
        PERFORM pg_notify(p_notify_channel, '');
    END IF;

    RETURN QUERY SELECT 'created'::text, 201, NULL::jsonb, NULL::text, NULL::text;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION punctual_create_start")
