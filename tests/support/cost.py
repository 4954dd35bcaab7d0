"""What an operation costs the database: statements sent and round trips waited for
(SPEC OP-5), counted at the driver's edge of SQLAlchemy.

*Statements* are every command the server executes, transaction control included (what
PostgreSQL's statement log shows). *Round trips* are the times the process sends and then
waits for an answer: a statement, or one ``executemany`` of many rows. On PostgreSQL,
psycopg sends ``BEGIN`` on its own before a transaction's first statement (not in
autocommit, where a statement is its own transaction), and a transaction that sent
nothing commits without a round trip; on SQLite the store sends its
``BEGIN`` itself, so it is counted as a statement there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import ExecuteStyle


@dataclass
class Cost:
    statements: int = 0
    round_trips: int = 0
    transactions: int = 0
    log: list[str] = field(default_factory=list)
    """Each statement's first words, in order: what a budget failure prints."""


@dataclass
class _Counter:
    dialect: str
    cost: Cost = field(default_factory=Cost)
    lock: threading.Lock = field(default_factory=threading.Lock)
    open: set[int] = field(default_factory=set)
    """The connections (by id) whose transaction has sent its first statement."""

    def statement(self, conn: sa.Connection, text: str, many: int) -> None:
        autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        with self.lock:
            if self.dialect == "postgresql" and not autocommit and id(conn) not in self.open:
                self.open.add(id(conn))
                self._sent("BEGIN (implicit)", 1)
            self._sent(text, many)

    def ended(self, conn: sa.Connection, verb: str) -> None:
        with self.lock:
            if self.dialect == "postgresql":
                if id(conn) not in self.open:
                    return  # nothing was sent: psycopg has nothing to end
                self.open.discard(id(conn))
            self.cost.transactions += 1
            self._sent(verb, 1)

    def _sent(self, text: str, many: int) -> None:
        self.cost.statements += many
        self.cost.round_trips += 1
        self.cost.log.append(" ".join(text.split()[:6]) + (f" (x{many})" if many > 1 else ""))


@contextmanager
def counting(engine: sa.Engine) -> Iterator[Cost]:
    """Count what ``engine`` sends, from any thread, inside the block."""
    counter = _Counter(engine.dialect.name)

    def before_execute(
        conn: sa.Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        # One DBAPI executemany is many statements sent together; SQLAlchemy's "insert
        # many values" is one statement of many rows.
        many = len(parameters) if context.execute_style is ExecuteStyle.EXECUTEMANY else 1
        counter.statement(conn, statement, many)

    def on_commit(conn: sa.Connection) -> None:
        counter.ended(conn, "COMMIT")

    def on_rollback(conn: sa.Connection) -> None:
        counter.ended(conn, "ROLLBACK")

    hooks = [
        ("before_cursor_execute", before_execute),
        ("commit", on_commit),
        ("rollback", on_rollback),
    ]
    for name, hook in hooks:
        sa.event.listen(engine, name, hook)
    try:
        yield counter.cost
    finally:
        for name, hook in hooks:
            sa.event.remove(engine, name, hook)
