"""Schema drift and the startup schema check (STYLE item 10).

``tables.metadata`` is the one schema source: ``alembic upgrade head`` on an empty SQLite
file and on an empty PostgreSQL database must produce exactly it. Each PostgreSQL test
creates its own throwaway database on the server of ``tests.conftest`` and drops it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from punctual.adapters.stores.sql import migrate
from punctual.adapters.stores.sql.store import SqlStore
from punctual.adapters.stores.sql.tables import metadata
from punctual.domain.ids import new_id
from punctual.domain.recurrence import IntervalSpec
from punctual.domain.schedules import (
    MissedPolicy,
    OverlapPolicy,
    SchedulePolicy,
    ScheduleSettings,
)
from punctual.errors import ConfigurationError
from punctual.ports.records import EncryptedInput, EndedStatus, NewSchedule
from tests.conftest import IN_CI, PG_SERVER, _pg_reachable

NEXT_REVISION = '''"""a later release's migration (test only)"""

revision = "{revision}"
down_revision = "{down_revision}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
'''


def _require_postgres() -> None:
    problem = _pg_reachable()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI but unreachable at {PG_SERVER}: {problem}")
        pytest.skip(f"PostgreSQL unreachable at {PG_SERVER}: {problem}")


@contextmanager
def _fresh_database(kind: str, directory: Path) -> Iterator[str]:
    """A database with nothing in it: a new SQLite file or a new PostgreSQL database."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / f'{secrets.token_hex(3)}.db'}"
        return
    _require_postgres()
    name = f"punctual_migrate_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield sa.engine.make_url(PG_SERVER).set(database=name).render_as_string(False)
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def empty_url(database_kind: str, tmp_path: Path) -> Iterator[str]:
    with _fresh_database(database_kind, tmp_path) as url:
        yield url


@pytest.fixture
def empty_store(empty_url: str) -> Iterator[SqlStore]:
    store = SqlStore(empty_url)
    yield store
    store.dispose()


def _differences(store: SqlStore) -> list[Any]:
    with store.engine.connect() as conn:
        # Types and server defaults are compared too: nothing is ignored.
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


def test_the_revisions_read_from_file_names_are_alembics_chain() -> None:
    """The startup check reads the revisions from the file names, without Alembic: every
    file is ``NNNN_what.py`` with revision ``NNNN`` after the one before, so the chain
    Alembic builds from the files themselves is the same and ends at the same head."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate._config())
    chain = [(rev.revision, rev.down_revision) for rev in script.walk_revisions()]
    ordered = sorted(migrate.known_revisions())
    assert script.get_heads() == [migrate.head_revision()] == [ordered[-1]]
    assert sorted(chain) == list(zip(ordered, [None, *ordered[:-1]], strict=True))
    files = [p.name for p in (migrate.MIGRATIONS / "versions").glob("*.py")]
    assert sorted(name.partition("_")[0] for name in files) == ordered, files


def test_upgrade_head_on_an_empty_database_matches_the_metadata(empty_store: SqlStore) -> None:
    before, after = migrate.upgrade(empty_store)
    assert (before, after) == (None, migrate.head_revision())
    assert migrate.current_revision(empty_store) == migrate.head_revision()
    assert _differences(empty_store) == []


def _index_definitions(store: SqlStore) -> dict[str, str]:
    """Every index as the database itself spells it, predicate included.

    Alembic's own ``alembic_version`` table is not part of the metadata, so it is left out.
    """
    if store.dialect == "sqlite":
        query = (
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            " AND tbl_name != 'alembic_version'"
        )
    else:
        query = (
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename != 'alembic_version'"
        )
    with store.engine.connect() as conn:
        return {name: ddl for name, ddl in conn.exec_driver_sql(query).all()}


def test_upgrade_head_builds_the_same_indexes_as_the_metadata(
    empty_store: SqlStore, database_kind: str, tmp_path: Path
) -> None:
    # compare_metadata does not compare a partial index's WHERE clause (ix_starts_due,
    # ix_runs_pending and ix_runs_active are partial), so compare the database's own DDL
    # of a migrated database with that of one built by metadata.create_all.
    migrate.upgrade(empty_store)
    with _fresh_database(database_kind, tmp_path) as url:
        reference = SqlStore(url)
        try:
            metadata.create_all(reference.engine)
            expected = _index_definitions(reference)
        finally:
            reference.dispose()
    partial = {
        "ix_starts_due",
        "ix_runs_pending",
        "ix_runs_active",
        "uq_definitions_active_name",
        "ix_runs_follow_up_ended",
        "ix_runs_follow_up_overdue",
        "ix_notifications_unread",
        "ix_webhook_deliveries_due",
        # The retention sweep's (0011).
        "ix_holds_active",
        "ix_starts_terminal",
        "ix_runs_ended",
        "ix_findings_acknowledged",
        "ix_notifications_read",
        "ix_notifications_unread_age",
        "ix_webhook_deliveries_ended",
        "ix_schedules_deleted",
        "ix_tokens_revoked",
    }
    assert partial <= set(expected)
    assert _index_definitions(empty_store) == expected


def test_upgrade_is_a_no_op_at_head(empty_store: SqlStore) -> None:
    migrate.upgrade(empty_store)
    head = migrate.head_revision()
    assert migrate.upgrade(empty_store) == (head, head)
    assert _differences(empty_store) == []


def test_an_empty_database_differs_from_the_metadata(empty_store: SqlStore) -> None:
    # The drift check itself must be able to fail: on an empty database every table is missing.
    missing = {diff[1].name for diff in _differences(empty_store) if diff[0] == "add_table"}
    assert missing == set(metadata.tables)


def test_check_current_refuses_an_empty_database(empty_store: SqlStore) -> None:
    assert migrate.is_empty(empty_store)
    with pytest.raises(ConfigurationError, match="punctual db upgrade"):
        migrate.check_current(empty_store)


def test_check_current_passes_at_head(empty_store: SqlStore) -> None:
    migrate.upgrade(empty_store)
    assert not migrate.is_empty(empty_store)
    migrate.check_current(empty_store)


def test_check_current_refuses_a_schema_older_than_the_code(
    empty_store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Honest simulation of an upgrade: the database is migrated by this release (head H),
    # then the next release ships one more migration after H. Its check must refuse H and
    # name the command, and pass once that command ran.
    migrate.upgrade(empty_store)
    old_head = migrate.head_revision()
    later = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS, later, ignore=shutil.ignore_patterns("__pycache__"))
    (later / "versions" / "9999_next_release.py").write_text(
        NEXT_REVISION.format(revision="9999", down_revision=old_head)
    )
    monkeypatch.setattr(migrate, "MIGRATIONS", later)
    assert migrate.head_revision() == "9999"

    with pytest.raises(ConfigurationError, match="punctual db upgrade") as raised:
        migrate.check_current(empty_store)
    assert old_head in str(raised.value)
    assert "older" in str(raised.value)

    assert migrate.upgrade(empty_store) == (old_head, "9999")
    migrate.check_current(empty_store)


def test_check_current_refuses_a_schema_newer_than_the_code(empty_store: SqlStore) -> None:
    # A database migrated by a later release: its revision is unknown to this code.
    migrate.upgrade(empty_store)
    with empty_store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'from_the_future'"))
    with pytest.raises(ConfigurationError, match="newer") as raised:
        migrate.check_current(empty_store)
    assert "from_the_future" in str(raised.value)


def test_0004_moves_schedule_bookkeeping_into_its_own_table(
    empty_store: SqlStore, database_kind: str
) -> None:
    """A schedule that fired before the upgrade keeps its last fire, run and status."""
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(migrate._config(conn), "0003")
    fired = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    stamp = fired.replace(tzinfo=None) if database_kind == "sqlite" else fired
    with empty_store.engine.begin() as conn:
        schedules = sa.Table("schedules", sa.MetaData(), autoload_with=conn)
        common = {
            "tenant": "acme",
            "workflow": "echo",
            "input": b"sealed",
            "input_key_id": "k1",
            "spec": {"interval_ms": 60_000},
            "overlap": "skip",
            "missed": "catch_up",
            "max_catch_up": 10,
            "misfire_grace_ms": 60_000,
            "enabled": True,
            "version": 1,
            "revision": 1,
            "version_policy": "active_at_fire",
            "workload_class": "standard",
            "created_by": "alice",
            "cursor": stamp,
            "created_at": stamp,
            "updated_at": stamp,
        }
        conn.execute(
            schedules.insert(),
            [
                dict(
                    common,
                    id="sch_fired",
                    name="fired",
                    last_fired_at=stamp,
                    last_run_id="run_1",
                    last_status="completed",
                ),
                dict(
                    common,
                    id="sch_never",
                    name="never",
                    last_fired_at=None,
                    last_run_id=None,
                    last_status=None,
                ),
            ],
        )

    migrate.upgrade(empty_store)

    with empty_store.transaction(readonly=True) as tx:
        found = tx.schedules.get_many({"sch_fired", "sch_never"})
    assert (found["sch_fired"].last_fired_at, found["sch_fired"].last_run_id) == (fired, "run_1")
    assert found["sch_fired"].last_status == "completed"
    never = found["sch_never"]
    assert (never.last_fired_at, never.last_run_id, never.last_status) == (None, None, None)
    assert _differences(empty_store) == []


def test_0007_leaves_the_first_registered_version_of_a_name_active(
    empty_store: SqlStore,
) -> None:
    """Names that a registration race left with two active versions keep the first one
    active; the others become deprecated, so the unique index can be built."""
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(migrate._config(conn), "0006")
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with empty_store.engine.begin() as conn:
        definitions = sa.Table("definitions", sa.MetaData(), autoload_with=conn)
        common = {"artifact": "a", "input_schema": {}, "execution_timeout_seconds": 60.0}
        conn.execute(
            definitions.insert(),
            [
                dict(common, name="raced", version="1", state="active", created_at=at),
                dict(common, name="raced", version="2", state="active", created_at=at),
                dict(common, name="raced", version="0", state="retired", created_at=at),
                dict(common, name="calm", version="1", state="active", created_at=at),
            ],
        )

    migrate.upgrade(empty_store)

    with empty_store.transaction(readonly=True) as tx:
        states = {(d.name, d.version): d.state for _, d in tx.definitions.find()}
    assert states == {
        ("raced", "1"): "active",
        ("raced", "2"): "deprecated",
        ("raced", "0"): "retired",
        ("calm", "1"): "active",
    }
    assert _differences(empty_store) == []


def test_0006_gives_stored_run_errors_their_code_and_claims_their_time(
    empty_store: SqlStore, database_kind: str
) -> None:
    """Every error shape written before 0006 reads back as ``{"code", "message", ...}``."""
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(migrate._config(conn), "0005")
    claimed = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    stamp = claimed.replace(tzinfo=None) if database_kind == "sqlite" else claimed
    old_errors: dict[str, tuple[str, dict[str, Any] | None]] = {
        "run_raised": (
            "failed",
            {"type": "RuntimeError", "message": "boom", "traceback": "Traceback ..."},
        ),
        "run_died": (
            "failed",
            {"type": "WorkerProcessDied", "message": "died", "exit_code": 3, "traceback": ""},
        ),
        "run_lost": ("failed", {"type": "WorkerLost", "message": "its worker was lost"}),
        "run_leaky": (
            "failed",
            {"type": "ValidationError", "message": "bad [input_value='s3cret']"},
        ),
        "run_canceled": ("canceled", {"reason": "canceled before a worker picked it up"}),
        "run_terminated": ("terminated", {"reason": "terminated by alice"}),
        "run_timed_out": ("timed_out", {"reason": "execution timeout of 2 s exceeded"}),
        "run_done": ("completed", None),
        "run_running": ("running", None),
    }
    with empty_store.engine.begin() as conn:
        runs = sa.Table("runs", sa.MetaData(), autoload_with=conn)
        conn.execute(
            runs.insert(),
            [
                {
                    "id": run_id,
                    "tenant": "acme",
                    "workflow": "echo",
                    "definition_version": "1",
                    "artifact": "a",
                    "state": state,
                    "origin": {"source": "scheduled_start", "id": "st_1"},
                    "origin_id": "st_1",
                    "started_by": "alice",
                    "attempts": 1,
                    "error": error,
                    "input": b"sealed",
                    "input_key_id": "k1",
                    "task_queue": "standard",
                    "priority": 3,
                    "timeout_seconds": 60.0,
                    "cancel_requested": False,
                    "claimed_by": "wrk_1",
                    "created_at": stamp,
                    "started_at": stamp,
                }
                for run_id, (state, error) in old_errors.items()
            ],
        )

    migrate.upgrade(empty_store)

    with empty_store.transaction(readonly=True) as tx:
        found = {run_id: tx.runs.get("acme", run_id) for run_id in old_errors}
    errors = {run_id: run.error for run_id, run in found.items() if run is not None}
    assert errors == {
        "run_raised": {
            "code": "workflow_error",
            "message": "boom",
            "type": "RuntimeError",
            "traceback": "Traceback ...",
        },
        "run_died": {
            "code": "workflow_error",
            "message": "died",
            "type": "WorkerProcessDied",
            "exit_code": 3,
            "traceback": "",
        },
        "run_lost": {"code": "worker_lost", "message": "its worker was lost", "type": "WorkerLost"},
        "run_leaky": {
            "code": "input_rejected",
            "message": (
                "the validation message was removed by migration 0006 because it could quote "
                "the run's input; the run's input did not validate"
            ),
            "type": "ValidationError",
        },
        "run_canceled": {"code": "canceled", "message": "canceled before a worker picked it up"},
        "run_terminated": {"code": "terminated", "message": "terminated by alice"},
        "run_timed_out": {"code": "timed_out", "message": "execution timeout of 2 s exceeded"},
        "run_done": None,
        "run_running": None,
    }
    assert {run.claimed_at for run in found.values() if run is not None} == {claimed}
    with empty_store.engine.connect() as conn:
        tokens = dict(conn.execute(sa.text("SELECT id, claim_token FROM runs")).all())
    assert tokens["run_running"] == "wrk_1/1"
    assert tokens["run_done"] is None
    assert _differences(empty_store) == []


def test_0006_scrubs_stored_validation_messages_that_could_quote_input(
    empty_store: SqlStore, database_kind: str
) -> None:
    """FT-4 for history: a start's ``input_rejected``, its finding and a recorded
    ``422 input_invalid`` answer lose their old text (it named unknown keys, or quoted
    values); everything else about them stays."""
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(migrate._config(conn), "0005")
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    stamp = now.replace(tzinfo=None) if database_kind == "sqlite" else now
    leaky = "the input no longer validates against echo version 1: 'secret_key' not allowed"
    with empty_store.engine.begin() as conn:
        found = sa.MetaData()
        starts = sa.Table("starts", found, autoload_with=conn)
        findings = sa.Table("findings", found, autoload_with=conn)
        keys = sa.Table("idempotency_keys", found, autoload_with=conn)
        start = {
            "tenant": "acme",
            "workflow": "echo",
            "business_request_id": "b",
            "start_at": stamp,
            "workload_class": "standard",
            "attributes": {},
            "input": b"sealed",
            "input_key_id": "k1",
            "version": 2,
            "attempts": 1,
            "due_at": stamp,
            "created_by": "alice",
            "created_at": stamp,
            "updated_at": stamp,
        }
        conn.execute(
            starts.insert(),
            [
                {
                    **start,
                    "id": "st_rejected",
                    "run_id": "run_1",
                    "state": "failed",
                    "reason": "input_rejected",
                    "last_error": {"code": "input_rejected", "message": leaky, "at": "t"},
                },
                {
                    **start,
                    "id": "st_inactive",
                    "run_id": "run_2",
                    "state": "failed",
                    "reason": "workflow_inactive",
                    "last_error": {"code": "workflow_inactive", "message": "no active", "at": "t"},
                },
            ],
        )
        conn.execute(
            findings.insert().values(
                id="fnd_1",
                tenant="acme",
                kind="start_failed",
                subject_id="st_rejected",
                severity="error",
                message=f"start st_rejected failed after 1 attempt(s): {leaky}",
                created_at=stamp,
            )
        )
        answer = {
            "error": {
                "code": "input_invalid",
                "message": "'secret_key' is not allowed",
                "details": {"errors": [{"msg": "'secret_key' is not allowed"}]},
            }
        }
        conn.execute(
            keys.insert().values(
                tenant="acme",
                principal="alice",
                key="k-1",
                fingerprint="f",
                state="done",
                owner="o",
                lease_until=stamp,
                status_code=422,
                response=answer,
                created_at=stamp,
            )
        )

    migrate.upgrade(empty_store)

    with empty_store.engine.connect() as conn:
        errors = dict(conn.execute(sa.text("SELECT id, last_error FROM starts")).all())
        message = conn.execute(sa.text("SELECT message FROM findings")).scalar_one()
        response = conn.execute(sa.text("SELECT response FROM idempotency_keys")).scalar_one()
    decoded = {k: v if isinstance(v, dict) else json.loads(v) for k, v in errors.items()}
    recorded = response if isinstance(response, dict) else json.loads(response)
    everything = f"{decoded}{message}{recorded}"
    assert "secret_key" not in everything
    assert decoded["st_rejected"]["code"] == "input_rejected"
    assert decoded["st_inactive"] == {
        "code": "workflow_inactive",
        "message": "no active",
        "at": "t",
    }
    assert message.startswith("start or occurrence st_rejected failed")
    assert recorded["error"]["code"] == "input_invalid"


def _migrate_to(store: SqlStore, revision: str) -> None:
    with store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(migrate._config(conn), revision)


def _schema(store: SqlStore) -> dict[str, Any]:
    """Every table's columns (type, nullability, default) and every index's own DDL."""
    inspector = sa.inspect(store.engine)
    tables = {
        name: [
            (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
            for c in inspector.get_columns(name)
        ]
        for name in inspector.get_table_names()
        if name != "alembic_version"
    }
    return {"tables": tables, "indexes": _index_definitions(store), "triggers": _triggers(store)}


def _triggers(store: SqlStore) -> list[tuple[str, str]]:
    """Each trigger's name and definition (0008's pending counter lives in triggers)."""
    if store.dialect == "sqlite":
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    else:
        query = (
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE NOT tgisinternal ORDER BY tgname"
        )
    with store.engine.connect() as conn:
        return [(str(name), str(sql)) for name, sql in conn.exec_driver_sql(query)]


@pytest.mark.parametrize("target", ["0008", "0009", "0010", "0011", "0012", "0015"])
def test_a_downgrade_restores_the_earlier_schema(
    empty_store: SqlStore, database_kind: str, tmp_path: Path, target: str
) -> None:
    """From the head back to ``target`` gives exactly ``target``'s schema (tables, indexes,
    triggers: 0012 rebuilds ``starts`` on SQLite and re-creates the pending-count
    triggers), and upgrading again gives the head with no drift."""
    with _fresh_database(database_kind, tmp_path) as url:
        reference = SqlStore(url)
        try:
            _migrate_to(reference, target)
            expected = _schema(reference)
        finally:
            reference.dispose()
    migrate.upgrade(empty_store)
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.downgrade(migrate._config(conn), target)

    assert _schema(empty_store) == expected
    migrate.upgrade(empty_store)
    assert _differences(empty_store) == []


def test_0010_leaves_an_upgraded_database_without_an_active_key(
    empty_store: SqlStore,
) -> None:
    """Until the first ``punctual keys activate``, processes keep sealing with their key
    files' ``active``: the upgrade records no key and knows no process."""
    _migrate_to(empty_store, "0010")
    with empty_store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM codec_state")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM processes")).scalar_one() == 0


def test_0009_treats_existing_runs_as_history_and_dates_the_shown_status(
    empty_store: SqlStore, database_kind: str
) -> None:
    """Runs stored before 0009 are never followed through (nobody is notified about the
    history); a schedule's shown status learns the occurrence it describes, so an older
    run's late end cannot overwrite it after the upgrade."""
    _migrate_to(empty_store, "0008")
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    earlier = datetime(2026, 12, 2, 11, 0, tzinfo=UTC)
    stamp, earlier_stamp = (
        (now.replace(tzinfo=None), earlier.replace(tzinfo=None))
        if database_kind == "sqlite"
        else (now, earlier)
    )
    with empty_store.engine.begin() as conn:
        found = sa.MetaData()
        starts = sa.Table("starts", found, autoload_with=conn)
        runs = sa.Table("runs", found, autoload_with=conn)
        status = sa.Table("schedule_status", found, autoload_with=conn)
        occurrence = {
            "tenant": "acme",
            "workflow": "echo",
            "workload_class": "standard",
            "attributes": {},
            "input": b"sealed",
            "input_key_id": "k1",
            "state": "dispatched",
            "version": 2,
            "attempts": 1,
            "created_by": "alice",
            "created_at": stamp,
            "updated_at": stamp,
            "schedule_id": "sch_1",
        }
        conn.execute(
            starts.insert(),
            [
                dict(
                    occurrence,
                    id=f"occ_{n}",
                    business_request_id=f"sch_1@{n}",
                    start_at=when,
                    due_at=when,
                    occurrence_at=when,
                    run_id=f"run_{n}",
                )
                for n, when in ((1, earlier_stamp), (2, stamp))
            ],
        )
        run = {
            "tenant": "acme",
            "workflow": "echo",
            "definition_version": "1",
            "artifact": "a",
            "origin_id": "occ_1",
            "schedule_id": "sch_1",
            "started_by": "alice",
            "attempts": 1,
            "input": b"sealed",
            "input_key_id": "k1",
            "task_queue": "standard",
            "priority": 3,
            "timeout_seconds": 60.0,
            "cancel_requested": False,
            "created_at": earlier_stamp,
        }
        conn.execute(
            runs.insert(),
            [
                dict(run, id="run_1", state="running", origin={"id": "occ_1"}),
                dict(run, id="run_2", state="completed", origin={"id": "occ_2"}, ended_at=stamp),
            ],
        )
        conn.execute(
            status.insert().values(
                schedule_id="sch_1", last_fired_at=stamp, last_run_id="run_2", last_status="ok"
            )
        )

    migrate.upgrade(empty_store)

    with empty_store.transaction() as tx:
        assert tx.follow_through.claim_ended(10) == []
        assert tx.follow_through.claim_overdue(now, 10) == []
        tx.runs.request_cancel("acme", "run_1", now)  # the older run ends after the upgrade
        assert tx.follow_through.claim_ended(10) == []
        tx.schedules.note_ended([EndedStatus("sch_1", "run_1", "canceled", earlier)])
    with empty_store.engine.connect() as conn:
        shown = conn.execute(sa.text("SELECT last_run_id, last_status FROM schedule_status")).one()
    assert tuple(shown) == ("run_2", "ok")
    assert _differences(empty_store) == []


def test_0016_names_each_deliverys_subjects_from_its_payload(empty_store: SqlStore) -> None:
    """Deliveries written before 0016 get the schedule, occurrence and run their payload
    names, so a hold on any of them keeps them (RT-1)."""
    _migrate_to(empty_store, "0015")
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    common = {
        "tenant": "acme",
        "webhook_id": "whk_1",
        "kind": "regression",
        "status": "delivered",
        "attempts": 1,
        "created_at": at,
        "updated_at": at,
    }
    about = {"schedule_id": "sch_1", "occurrence_id": "st_1", "run_id": "run_1"}
    with empty_store.engine.begin() as conn:
        deliveries = sa.Table("webhook_deliveries", sa.MetaData(), autoload_with=conn)
        conn.execute(
            deliveries.insert(),
            [
                dict(common, id="dlv_about", event_id="evt_1", payload={"data": about}),
                dict(common, id="dlv_test", event_id="evt_2", payload={"text": "test"}),
            ],
        )

    migrate.upgrade(empty_store)

    with empty_store.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT id, schedule_id, occurrence_id, run_id FROM webhook_deliveries ORDER BY id"
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        ("dlv_about", "sch_1", "st_1", "run_1"),
        ("dlv_test", None, None, None),
    ]
    assert _differences(empty_store) == []


def test_0022_begins_the_history_of_existing_schedules_at_their_cursor(
    empty_store: SqlStore,
) -> None:
    """Schedules made before 0022 get ``history_began`` (and ``paused`` when paused), so
    their audit answers ``before_history`` for the past, never ``missing``."""
    migrate.upgrade(empty_store)
    live, paused = _schedule(empty_store, True), _schedule(empty_store, False)
    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.downgrade(migrate._config(conn), "0021")
    migrate.upgrade(empty_store)
    with empty_store.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT schedule_id, kind, by FROM schedule_events ORDER BY schedule_id, kind")
        ).all()
    assert sorted(tuple(row) for row in rows) == sorted(
        [
            (live, "history_began", "punctual"),
            (paused, "history_began", "punctual"),
            (paused, "paused", "punctual"),
        ]
    )
    assert _differences(empty_store) == []


def _schedule(store: SqlStore, enabled: bool) -> str:
    """A schedule as the store inserts it (the seed reads only its row)."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    schedule_id = new_id("sch")
    settings = ScheduleSettings(
        name=f"made-before-{schedule_id}",
        workflow="report",
        specs=(IntervalSpec(3_600_000, at),),
        policy=SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.SKIP),
        enabled=enabled,
    )
    new = NewSchedule(
        schedule_id, "acme", settings, EncryptedInput("k1", b"x"), None, "alice", at, at
    )
    with store.transaction() as tx:
        tx.schedules.insert(new, at)
    return schedule_id
