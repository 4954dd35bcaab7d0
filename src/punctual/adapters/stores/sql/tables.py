"""The one schema source: SQLAlchemy Core tables for SQLite and PostgreSQL.

Alembic migrations are written against this metadata and a test checks that
``alembic upgrade head`` produces exactly it, on both databases.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql.column_types import JSONType, OutcomeJSON, Seq, UTCDateTime

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _seq() -> sa.Column[Any]:
    """Stable row order for cursor paging (and the SQLite rowid alias)."""
    return sa.Column("seq", Seq, primary_key=True, autoincrement=True)


def _partial_index(
    name: str, *columns: str | sa.Column[Any], where: str, unique: bool = False
) -> sa.Index:
    """An index over only the rows ``where`` selects, the same on both databases."""
    predicate = sa.text(where)
    return sa.Index(
        name, *columns, unique=unique, postgresql_where=predicate, sqlite_where=predicate
    )


def _sweep_index(name: str, table: sa.Table, ended: str, where: str) -> None:
    """A retention sweep's index: ``table``'s terminal rows (``where``), per tenant and by
    when they ended (the column ``ended``)."""
    _partial_index(name, table.c.tenant, table.c[ended], where=where)


tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

members = sa.Table(
    "members",
    metadata,
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("subject", sa.String(200), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("subject", sa.String(200), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime),
    sa.Column("revoked_at", UTCDateTime),
    sa.Index(None, "tenant", "subject"),
)

definitions = sa.Table(
    "definitions",
    metadata,
    _seq(),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("version", sa.String(100), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("artifact", sa.String(200), nullable=False),
    sa.Column("input_schema", JSONType, nullable=False),
    sa.Column("execution_timeout_seconds", sa.Float, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("name", "version"),
    # At most one active version per name (WF-2); registrants and lifecycle changes of a
    # name also take a lock on it, so they queue instead of tripping over this index.
    _partial_index("uq_definitions_active_name", "name", where="state = 'active'", unique=True),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("engine", sa.String(16), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("task_queues", JSONType, nullable=False),
    sa.Column("loaded", JSONType, nullable=False),
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    sa.Column("stopped_at", UTCDateTime),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("principal", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("owner", sa.String(40), nullable=False),
    sa.Column("lease_until", UTCDateTime, nullable=False),
    sa.Column("status_code", sa.Integer),
    sa.Column("response", JSONType),
    # What the outcome names: a resource's id, or a member's subject (up to 200 characters).
    sa.Column("resource_id", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("decided_at", UTCDateTime),
    # Per tenant, for the retention sweep (each tenant has its own window); keys still in
    # flight have no decided_at, and abandoned ones are found through it too (IS NULL).
    sa.Index(None, "tenant", "decided_at"),
)

OF_A_SCHEDULE = "schedule_id IS NOT NULL"
"""The predicate of the indexes that read a schedule's occurrences and runs in row order."""

starts = sa.Table(
    "starts",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("workflow", sa.String(200), nullable=False),
    sa.Column("business_request_id", sa.String(200), nullable=False),
    sa.Column("start_at", UTCDateTime, nullable=False),
    sa.Column("time_zone", sa.String(64)),
    sa.Column("workload_class", sa.String(64), nullable=False),
    sa.Column("attributes", JSONType, nullable=False),
    sa.Column("traceparent", sa.String(55)),
    sa.Column("input", sa.LargeBinary, nullable=False),
    sa.Column("input_key_id", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("due_at", UTCDateTime, nullable=False),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("last_error", JSONType),
    sa.Column("reason", sa.String(300)),
    # What a decision names beyond its reason: a blackout's own reason (RS-10).
    sa.Column("reason_detail", sa.String(300)),
    # The specs that yielded an occurrence, and the instant a calendar moved it from (RS-10).
    sa.Column("spec_indexes", JSONType),
    sa.Column("calendar_moved_from", UTCDateTime),
    # An occurrence's start deadline (RS-10): not started after it, by dispatch or worker.
    sa.Column("start_deadline_at", UTCDateTime),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("run_id", sa.String(40), nullable=False, unique=True),
    sa.Column("definition_version", sa.String(100)),
    sa.Column("artifact", sa.String(200)),
    sa.Column("dispatched_at", UTCDateTime),
    sa.Column("claimed_by", sa.String(40)),
    sa.Column("lease_until", UTCDateTime),
    # With claimed_by, the claim token (FT-5): every claim takes the next number, and a
    # dispatch records only under the token it claimed with.
    sa.Column("claim_seq", sa.Integer, nullable=False, server_default=sa.text("0")),
    # Occurrences of schedules are starts too; these columns are null for one-off starts.
    sa.Column("schedule_id", sa.String(40)),
    sa.Column("occurrence_at", UTCDateTime),
    sa.Column("nominal", sa.String(32)),
    sa.Column("dst_adjustment", sa.String(20)),
    sa.Column("revision", sa.Integer),
    sa.Column("range_last", UTCDateTime),
    sa.Column("range_count", sa.Integer),
    # Why an occurrence exists (schedule | trigger | backfill) and the overlap policy its
    # request named (null: the schedule's). Backfilled occurrences count as pending starts.
    sa.Column("origin", sa.String(16)),
    sa.Column("overlap", sa.String(16)),
    # 0 for the first row of an instant; a backfill that generates a skipped or failed
    # instant again takes the next number, and the old rows stay as history (RS-9b).
    sa.Column("rerun", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.UniqueConstraint("schedule_id", "occurrence_at", "rerun"),
    # The claim query's index: only pending rows, so a million finished starts cost nothing.
    _partial_index("ix_starts_due", "due_at", where="state IN ('scheduled', 'dispatching')"),
    # The idle runner's look for expired claims, and the release of buffered occurrences:
    # both touch only a handful of rows however large the table grows.
    _partial_index("ix_starts_claim_lease", "lease_until", where="state = 'dispatching'"),
    # A schedule's skipped ranges, for the audit's ranges that reach into its range (RS-10).
    _partial_index("ix_starts_ranges", "schedule_id", "range_last", where="range_last IS NOT NULL"),
    _partial_index("ix_starts_buffered", "schedule_id", where="state = 'buffered'"),
    sa.Index(None, "tenant", "seq"),
    sa.Index(None, "tenant", "business_request_id"),
    sa.Index(None, "tenant", "state"),
    sa.Index(None, "schedule_id", "state"),
    # A schedule's occurrences a page at a time, newest or oldest first (migration 0023);
    # one-off starts, the create path's rows, are not in it.
    _partial_index("ix_starts_schedule_seq", "schedule_id", "seq", where=OF_A_SCHEDULE),
)

FOLLOW_UP_ENDED = "schedule_id IS NOT NULL AND follow_up < 2 AND ended_at IS NOT NULL"
FOLLOW_UP_OVERDUE = "schedule_id IS NOT NULL AND follow_up = 0 AND ended_at IS NULL"
"""The predicates of the follow-through indexes (the claims repeat them term by term)."""
SCHEDULE_OUTCOMES = "state IN ('completed', 'failed', 'timed_out')"
"""Runs that say how a schedule fares (OP-2's ``schedule_failing``); the read repeats it."""

runs = sa.Table(
    "runs",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("workflow", sa.String(200), nullable=False),
    sa.Column("definition_version", sa.String(100), nullable=False),
    sa.Column("artifact", sa.String(200), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("origin", JSONType, nullable=False),
    sa.Column("origin_id", sa.String(40), nullable=False),
    sa.Column("schedule_id", sa.String(40)),
    sa.Column("started_by", sa.String(200), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("result", OutcomeJSON),
    sa.Column("error", OutcomeJSON),
    sa.Column("input", sa.LargeBinary, nullable=False),
    sa.Column("input_key_id", sa.String(64), nullable=False),
    sa.Column("task_queue", sa.String(200), nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("traceparent", sa.String(55)),
    sa.Column("timeout_seconds", sa.Float, nullable=False),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("claimed_by", sa.String(40)),
    # Whose claim and which attempt (FT-2): "<worker id>/<attempt>". Renewal, flags and
    # the outcome record match it, so a worker whose claim was taken over cannot act.
    sa.Column("claim_token", sa.String(64)),
    sa.Column("lease_until", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("queued_at", UTCDateTime),
    sa.Column("claimed_at", UTCDateTime),
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    # Follow-through of a schedule's run (CR-4, CR-5): 0 awaiting, 1 ``finalize_timed_out``
    # recorded while the run was live, 2 done. Only rows with a schedule_id are read.
    sa.Column("follow_up", sa.SmallInteger, nullable=False, server_default=sa.text("0")),
    _partial_index("ix_runs_pending", "task_queue", "priority", "seq", where="state = 'pending'"),
    _partial_index("ix_runs_active", "claimed_by", where="state IN ('pending', 'running')"),
    # The follow-through pass reads only awaiting runs, so its cost does not grow with
    # the history: ended ones to follow through, live ones past the deadline (CR-5).
    _partial_index("ix_runs_follow_up_ended", "ended_at", where=FOLLOW_UP_ENDED),
    _partial_index("ix_runs_follow_up_overdue", "created_at", where=FOLLOW_UP_OVERDUE),
    sa.Index(None, "tenant", "seq"),
    sa.Index(None, "tenant", "workflow"),
    sa.Index(None, "origin_id"),
    sa.Index(None, "schedule_id", "state"),
    # A schedule's runs a page at a time, newest or oldest first (migration 0023).
    _partial_index("ix_runs_schedule_seq", "schedule_id", "seq", where=OF_A_SCHEDULE),
    # A schedule's last runs to end with an outcome, read a few at a time however long its
    # history (the follow-through's ``schedule_failing`` judgement, OP-2).
    _partial_index(
        "ix_runs_schedule_outcomes", "schedule_id", "ended_at", "seq", where=SCHEDULE_OUTCOMES
    ),
)

schedules = sa.Table(
    "schedules",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("workflow", sa.String(200), nullable=False),
    sa.Column("input", sa.LargeBinary, nullable=False),
    sa.Column("input_key_id", sa.String(64), nullable=False),
    sa.Column("spec", JSONType, nullable=False),
    sa.Column("overlap", sa.String(16), nullable=False),
    sa.Column("missed", sa.String(16), nullable=False),
    sa.Column("max_catch_up", sa.Integer, nullable=False),
    sa.Column("catch_up_window_seconds", sa.Float),
    sa.Column("misfire_grace_ms", sa.Integer, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("version_policy", sa.String(16), nullable=False),
    sa.Column("pinned_version", sa.String(100)),
    sa.Column("workload_class", sa.String(64), nullable=False),
    sa.Column("regression", JSONType),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("cursor", UTCDateTime, nullable=False),
    sa.Column("next_fire_at", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    # RS-9c/d/e: the end, the count of the spec's fires decided so far (bookkeeping of the
    # generation pass, like the cursor), jitter, and the file it was last applied from.
    sa.Column("end_at", UTCDateTime),
    sa.Column("max_occurrences", sa.BigInteger),
    sa.Column("fires_counted", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("jitter_ms", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("source", sa.String(200)),
    # Windows without fires (RS-10): [{"from", "to", "reason"}], sorted, never overlapping.
    sa.Column("blackouts", JSONType, nullable=False, server_default=sa.text("'[]'")),
    # The specs after the first, and the business calendar (RS-10); null: none.
    sa.Column("more_specs", JSONType),
    sa.Column("calendar", JSONType),
    # Paused until then (RS-10); kept once passed, when it no longer holds the schedule.
    sa.Column("pause_until", UTCDateTime),
    # An occurrence whose body has not begun this long after it was due never begins.
    sa.Column("start_deadline_ms", sa.BigInteger),
    # A name is unique among a tenant's live schedules (deleted ones keep their history).
    _partial_index(
        "uq_schedules_live_name", "tenant", "name", where="deleted_at IS NULL", unique=True
    ),
    # The generation pass's index: only schedules that can fire.
    _partial_index(
        "ix_schedules_next_fire", "next_fire_at", where="enabled AND deleted_at IS NULL"
    ),
    sa.Index(None, "tenant", "seq"),
    sa.Index(None, "tenant", "created_by"),
)

# A schedule's latest fire and run outcome, kept apart from ``schedules``: a generation
# pass holds schedule rows locked, and the bookkeeping of dispatch and of run ends must
# not wait for it. No foreign key for the same reason (its check would lock the schedule).
schedule_status = sa.Table(
    "schedule_status",
    metadata,
    sa.Column("schedule_id", sa.String(40), primary_key=True),
    sa.Column("last_fired_at", UTCDateTime),
    sa.Column("last_run_id", sa.String(40)),
    sa.Column("last_status", sa.String(300)),
    # The occurrence that last_run_id/last_status describe: they only move forward (CR-4).
    sa.Column("status_occurrence_at", UTCDateTime),
)

# A schedule's history for the missed-run audit (RS-10): created, timing changed (with the
# timing from then on), paused (until, for a timed pause), resumed, deleted.
schedule_events = sa.Table(
    "schedule_events",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("schedule_id", sa.String(40), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("timing", JSONType),
    sa.Column("until", UTCDateTime),
    sa.Index("ix_schedule_events_schedule", "schedule_id", "at"),
)

findings = sa.Table(
    "findings",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("subject_id", sa.String(200), nullable=False),
    sa.Column("severity", sa.String(16), nullable=False),
    sa.Column("message", sa.String(1000), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("acknowledged_at", UTCDateTime),
    sa.Column("acknowledged_by", sa.String(200)),
    sa.UniqueConstraint("tenant", "kind", "subject_id"),
)

# The tenant's pending one-off starts as a sum of deltas, so the exact quota reads a few
# rows instead of counting the tenant's pending starts (cost flat in the backlog). Every
# change of ``starts`` adds its delta here in the same transaction, by a database trigger
# (migration 0008), so no code path can forget it; the quota controller folds the rows of
# a tenant into one per workload class while it holds the tenant's lock.
pending_start_counts = sa.Table(
    "pending_start_counts",
    metadata,
    _seq(),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("workload_class", sa.String(64), nullable=False),
    sa.Column("delta", sa.BigInteger, nullable=False),
    sa.Index(None, "tenant"),
)

# An occurrence's follow-through (CR-4): one row per occurrence, replaced when recorded again.
follow_throughs = sa.Table(
    "follow_throughs",
    metadata,
    sa.Column("occurrence_id", sa.String(40), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("schedule_id", sa.String(40), nullable=False),
    sa.Column("run_id", sa.String(40), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("previous_run_id", sa.String(40)),
    sa.Column("regressions", JSONType, nullable=False),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
)

# A person's feed (CR-4): written with the decision that caused it, read newest first.
notifications = sa.Table(
    "notifications",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("recipient", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("schedule_id", sa.String(40)),
    sa.Column("occurrence_id", sa.String(40)),
    sa.Column("run_id", sa.String(40)),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("details", JSONType, nullable=False),
    sa.Column("event_id", sa.String(40), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("read_at", UTCDateTime),
    sa.Index(None, "tenant", "recipient", "seq"),
    # The unread feed stays cheap however much read history a person keeps.
    _partial_index(
        "ix_notifications_unread", "tenant", "recipient", "seq", where="read_at IS NULL"
    ),
)

# A tenant's webhooks. The URL is a credential (a Slack URL is one), so it is stored
# encrypted like the secret; reads show only ``url_display``.
webhooks = sa.Table(
    "webhooks",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("url", sa.LargeBinary, nullable=False),
    sa.Column("url_key_id", sa.String(64), nullable=False),
    # The URL cut after its host: as long as the host, up to several times the URL's own
    # length once an internationalised name is spelt in ASCII (punycode).
    sa.Column("url_display", sa.Text, nullable=False),
    sa.Column("secret", sa.LargeBinary),
    sa.Column("secret_key_id", sa.String(64)),
    sa.Column("events", JSONType, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    sa.Index(None, "tenant", "seq"),
)

# The transactional outbox of CR-4: one row per event and webhook, written in the
# transaction that decided the event, leased to a deliverer by ``next_attempt_at``.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("webhook_id", sa.String(40), nullable=False),
    sa.Column("event_id", sa.String(40), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("payload", JSONType, nullable=False),
    # What the event is about, as the payload names it: what a hold keeps it by (RT-1).
    sa.Column("schedule_id", sa.String(40)),
    sa.Column("occurrence_id", sa.String(40)),
    sa.Column("run_id", sa.String(40)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_status_code", sa.Integer),
    sa.Column("last_error", sa.String(500)),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("delivered_at", UTCDateTime),
    sa.Column("claim_token", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # The deliverer's claim reads only pending rows, however long the history.
    _partial_index("ix_webhook_deliveries_due", "next_attempt_at", where="status = 'pending'"),
    sa.Index(None, "webhook_id", "seq"),
    sa.Index(None, "tenant", "status"),
)

# --- codec keys (RT-2) ---------------------------------------------------------------------------

# The active codec key id, once ``punctual keys activate`` recorded one: at most one row
# (``id`` = 1). No row means none was recorded yet and each process seals with its ring's.
codec_state = sa.Table(
    "codec_state",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("active_key_id", sa.String(64), nullable=False),
    sa.Column("activated_at", UTCDateTime, nullable=False),
)

# Every running punctual process (API, runner, worker, a command) and the codec keys it
# holds, refreshed by its heartbeat on the store's clock: activation asks the live ones.
processes = sa.Table(
    "processes",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("components", JSONType, nullable=False),
    sa.Column("key_ids", JSONType, nullable=False),
    sa.Column("active_key_id", sa.String(64)),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    sa.Column("stopped_at", UTCDateTime),
)

# --- retention, holds and the audit log (RT-1, CR-8) ---------------------------------------------

# A hold keeps what it covers from every sweep while ``released_at`` is null; released
# ones are kept one retention window, then swept like any terminal record.
holds = sa.Table(
    "holds",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("subject_kind", sa.String(16), nullable=False),
    sa.Column("subject_id", sa.String(200), nullable=False),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("released_at", UTCDateTime),
    sa.Column("released_by", sa.String(200)),
    sa.Column("placed_by_host", sa.Boolean, nullable=False),
    sa.Index(None, "tenant", "seq"),
    # Every sweep statement asks "is this row's subject held?" per candidate row.
    _partial_index("ix_holds_active", "tenant", "subject_id", where="released_at IS NULL"),
)

# One row per decided user mutation (CR-8), written in the mutation's transaction. No
# body, no input: who (actor, token), what (action, method, path, subject), the status.
audit_log = sa.Table(
    "audit_log",
    metadata,
    _seq(),
    sa.Column("id", sa.String(40), nullable=False),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("token_id", sa.String(40)),
    sa.Column("action", sa.String(100), nullable=False),
    sa.Column("method", sa.String(10), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("subject_kind", sa.String(32)),
    sa.Column("subject_id", sa.String(200)),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Index(None, "tenant", "seq"),
    sa.Index(None, "tenant", "subject_id", "seq"),
    sa.Index(None, "tenant", "actor", "seq"),
    sa.Index(None, "tenant", "at"),
)

TERMINAL_STARTS = "state IN ('failed', 'canceled', 'skipped')"
ENDED_DELIVERIES = "status IN ('delivered', 'failed')"
"""Predicates of the sweep's partial indexes (the sweep repeats them term by term)."""

# The sweep's indexes: each holds only terminal rows, by the time they became terminal
# and per tenant (each tenant has its own window), so a batch reads the rows it removes
# and nothing else, however many live or recent rows a table holds. Rows enter them when
# they end, never on the insert path of a create.
_sweep_index("ix_starts_terminal", starts, "updated_at", TERMINAL_STARTS)
_sweep_index("ix_runs_ended", runs, "ended_at", "ended_at IS NOT NULL")
_sweep_index("ix_findings_acknowledged", findings, "acknowledged_at", "acknowledged_at IS NOT NULL")
_sweep_index("ix_notifications_read", notifications, "read_at", "read_at IS NOT NULL")
_sweep_index("ix_notifications_unread_age", notifications, "created_at", "read_at IS NULL")
_sweep_index("ix_webhook_deliveries_ended", webhook_deliveries, "updated_at", ENDED_DELIVERIES)
_sweep_index("ix_schedules_deleted", schedules, "deleted_at", "deleted_at IS NOT NULL")
_sweep_index("ix_tokens_revoked", tokens, "revoked_at", "revoked_at IS NOT NULL")

# The Temporal Schedules driver (CR-6): this store's installation id (the mark punctual
# puts on the Temporal Schedules it owns) and, per schedule, how its Temporal copy stands.
driver_installation = sa.Table(
    "driver_installation",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("installation_id", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

schedule_sync = sa.Table(
    "schedule_sync",
    metadata,
    sa.Column("schedule_id", sa.String(40), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("checked_at", UTCDateTime, nullable=False),
    # Temporal's next fire times, as ISO 8601 UTC strings (reads never call Temporal).
    sa.Column("next_fire_times", JSONType, nullable=False),
    sa.Column("digest", sa.String(64)),
    # Set while a create saga is unfinished: which request may resume it (CR-6).
    sa.Column("create_token", sa.String(64)),
    # How far Temporal's own skips were recorded as occurrences, at which schedule version
    # (RS-4; ``ports.driver.SkipMark``). Null until the first sweep that looked.
    sa.Column("skips_checked_through", UTCDateTime),
    sa.Column("skips_version", sa.Integer),
)
sa.Index("ix_schedule_sync_state", schedule_sync.c.state, schedule_sync.c.checked_at)
