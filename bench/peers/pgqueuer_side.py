"""The pgqueuer side of ``bench.peers.pgqueuer_burst``; runs in pgqueuer's own venv.

Imports only the standard library, pgqueuer and asyncpg (never punctual):

    python pgqueuer_side.py consume DSN OUT_FILE BATCH_SIZE
    python pgqueuer_side.py enqueue DSN TAG COUNT DUE_EPOCH

``consume`` runs one ``PgQueuer`` worker whose job body records ``time.time()`` as its
first act; the entries are appended to ``OUT_FILE`` as ``tag index entered`` lines every
20 ms by a separate task (so the file write is not in the measured path). ``enqueue``
inserts ``COUNT`` jobs in one batch call and then pins their ``execute_after`` to
``DUE_EPOCH`` exactly, so both systems get the same due instant.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from typing import Any

import asyncpg  # type: ignore[import-not-found,unused-ignore]
from pgqueuer import PgQueuer  # type: ignore[import-not-found,unused-ignore]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found,unused-ignore]
from pgqueuer.queries import Queries  # type: ignore[import-not-found,unused-ignore]

ENTRYPOINT = "burst"
FLUSH_SECONDS = 0.02


async def consume(dsn: str, out_file: str, batch_size: int) -> None:
    entries: list[tuple[bytes, float]] = []
    connection = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT)
    async def body(job: Any) -> None:
        entries.append((job.payload, time.time()))

    async def flush() -> None:
        with open(out_file, "a", encoding="utf-8") as out:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                taken, entries[:] = entries[:], []
                for payload, entered in taken:
                    out.write(f"{payload.decode()} {entered:.6f}\n")
                out.flush()

    flusher = asyncio.create_task(flush())
    try:
        await pgq.run(batch_size=batch_size)
    finally:
        flusher.cancel()


async def enqueue(dsn: str, tag: str, count: int, due_epoch: float) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(connection))
        lead = timedelta(seconds=max(0.0, due_epoch - time.time()))
        ids = await queries.enqueue(
            [ENTRYPOINT] * count,
            [f"{tag} {i}".encode() for i in range(count)],
            [0] * count,
            [lead] * count,
        )
        await connection.execute(
            "UPDATE pgqueuer SET execute_after = to_timestamp($1) WHERE id = ANY($2::bigint[])",
            due_epoch,
            [int(i) for i in ids],
        )
    finally:
        await connection.close()


def main() -> None:
    command, dsn, *rest = sys.argv[1:]
    if command == "consume":
        asyncio.run(consume(dsn, rest[0], int(rest[1])))
    elif command == "enqueue":
        asyncio.run(enqueue(dsn, rest[0], int(rest[1]), float(rest[2])))
    else:
        raise SystemExit(f"unknown command {command!r} (consume or enqueue)")


if __name__ == "__main__":
    main()
