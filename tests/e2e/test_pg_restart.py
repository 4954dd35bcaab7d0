"""PostgreSQL restarted in the middle of dispatch (DP-2, DP-3): nothing lost, nothing doubled,
nothing charged to a start, and no operator action needed.

Each test runs a PostgreSQL cluster of its own (initdb into a temporary directory, on a free
port) so that it may stop and start it; the shared server is never touched.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql.store import SqlStore
from punctual.errors import Unavailable
from tests.e2e.harness import (
    Creator,
    Processes,
    ThrowawayPostgres,
    count_starts,
    migrate,
    wait_for,
    wait_until_done,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

STARTS = 200
SPREAD_SECONDS = 6.0
OUTAGE_SECONDS = 5.0
STOP_AFTER_DISPATCHED = 20
LATE_STARTS = 20
LATE_AFTER_SECONDS = 3.0
"""The late starts fall due this long after they are created, just before PostgreSQL stops:
inside the outage (a fast shutdown refuses connections from its first moment), so some
work is always left for after the restart, however slowly a loaded machine created the
spread (a start planned in the past is due at once, and the runner can finish the whole
spread before the stop)."""


def test_a_postgres_restart_during_dispatch_is_waited_out(tmp_path: Path) -> None:
    with ThrowawayPostgres() as pg:
        pg.init()
        pg.start()
        url = pg.create_database("punctual")
        migrate(url)
        with Processes(tmp_path, url) as procs:
            procs.extras.append(lambda: f"===== postgres log (tail) =====\n{pg.log_tail()}")
            server = procs.serve("serve", "runner,worker")
            procs.wait_ready(server)

            def under_way() -> int | None:
                dispatched = count_starts(url, "dispatched")
                return dispatched if dispatched >= STOP_AFTER_DISPATCHED else None

            with Creator(url, procs.key_file) as creator:
                # Counted from here: building the creator takes seconds on a loaded machine.
                first_due = datetime.now(UTC) + timedelta(seconds=2)
                created = creator.spread(STARTS, first_due, SPREAD_SECONDS)
                wait_for("dispatch to be under way", under_way, 30, step=0.05)
                late_due = datetime.now(UTC) + timedelta(seconds=LATE_AFTER_SECONDS)
                created += creator.spread(LATE_STARTS, late_due, 0, numbered_from=STARTS)
            pg.stop("fast")
            stopped = datetime.now(UTC)
            time.sleep(OUTAGE_SECONDS)  # the outage itself
            assert server.alive(), "punctual exited while PostgreSQL was down"
            pg.start()
            restarted = datetime.now(UTC)

            facts = wait_until_done(url, 60)
            assert server.alive(), "punctual exited after PostgreSQL came back"
            log = server.log_text()

        problems = facts.exactly_once_problems(STARTS + LATE_STARTS)
        assert not problems, "\n".join(problems[:20])
        assert set(facts.starts) == {s["id"] for s in created}
        # The outage is not the starts' fault: no attempt charged, no error recorded (DP-3).
        charged = [s for s in facts.starts.values() if s.attempts != 1 or s.last_error is not None]
        assert not charged, f"{len(charged)} starts were charged for the outage: {charged[:10]}"
        # Dispatch really was interrupted: some starts went before the stop, others only
        # after PostgreSQL was back, without anyone touching the punctual process.
        times = [s.dispatched_at for s in facts.starts.values() if s.dispatched_at is not None]
        assert any(t < stopped for t in times)
        resumed = [t for t in times if t >= restarted]
        assert resumed, f"nothing was dispatched after the restart at {restarted}"
        # The runner paused behind its circuit breaker and closed it again (DP-3).
        assert "event=engine_unavailable" in log
        assert "event=engine_available" in log.split("event=engine_unavailable", 1)[1]


def test_a_transaction_cut_by_a_postgres_shutdown_raises_unavailable() -> None:
    """The store's promise (``SqlStore.transaction``): losing the database mid-transaction is
    ``Unavailable`` (store_unavailable), which the runner treats as an outage (DP-3) and the
    API as 503 -- not a raw driver error."""
    with ThrowawayPostgres() as pg:
        pg.init()
        pg.start()
        store = SqlStore(pg.server_url)
        raised: BaseException | None = None
        try:
            with store.transaction() as tx:
                tx.conn.execute(sa.text("SELECT 1"))
                pg.stop("fast")
                tx.conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            raised = exc
        finally:
            store.dispose()
        assert isinstance(raised, Unavailable), (
            "losing PostgreSQL mid-transaction must raise Unavailable(store_unavailable), got "
            f"{type(raised).__name__}: {raised}"
        )
        assert raised.code == "store_unavailable"
