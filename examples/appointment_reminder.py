"""Appointment reminders through punctual's HTTP API, from a client that knows only HTTP.

The policy: remind a customer **two hours before** an appointment, measured in elapsed
time (so the customer always gets two real hours, also across a DST change). A reminder
whose moment has already passed, for an appointment still ahead, is sent right away; an
appointment already over gets none.

The safety rules for a request that may or may not have been applied (a timeout, a
dropped connection, a 5xx, a 503 or a 202 in_progress):

1. Decide the request once and **persist it before sending**: method, path, body, the
   Idempotency-Key and the principal it is sent as (here: an outbox table in SQLite).
2. On an ambiguous outcome, **resend that exact row**: same body, same key, same token.
3. **Never recompute** the reminder time and never replace the key when retrying: punctual
   checks the recorded acceptance before any new-request rule, so the retry is answered
   with the original result even when the reminder time has passed since.

Run it against a server started with ``make run``::

    python examples/appointment_reminder.py --token pn_... \\
        --appointment 2026-12-01T09:00 --zone Europe/Berlin --customer c-17 --id appt-42
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

REMIND_BEFORE = timedelta(hours=2)
# punctual accepts a start_at up to 5 s in the past; stay well inside that.
SEND_NOW_MARGIN = timedelta(seconds=2)
DECIDED = {200, 201, 204, 400, 401, 403, 404, 409, 413, 422}


def reminder_time(appointment: datetime, now: datetime) -> datetime | None:
    """When to remind, or None when the appointment is already over.

    The subtraction happens in UTC: Python subtracts wall-clock time between datetimes of
    one zone, which would give 1 or 3 real hours on a DST night."""
    appointment = appointment.astimezone(UTC)
    if appointment <= now:
        return None
    return max(appointment - REMIND_BEFORE, now + SEND_NOW_MARGIN)


@dataclass(frozen=True)
class PendingRequest:
    key: str
    principal: str
    method: str
    path: str
    body: dict[str, Any]


class Outbox:
    """Requests are written here first and marked decided once punctual answered them."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS outbox (key TEXT PRIMARY KEY, principal TEXT, "
            "method TEXT, path TEXT, body TEXT, status INTEGER, response TEXT)"
        )
        self._db.commit()

    def add(self, request: PendingRequest) -> None:
        self._db.execute(
            "INSERT INTO outbox (key, principal, method, path, body) VALUES (?, ?, ?, ?, ?)",
            (
                request.key,
                request.principal,
                request.method,
                request.path,
                json.dumps(request.body),
            ),
        )
        self._db.commit()

    def undecided(self) -> list[PendingRequest]:
        rows = self._db.execute(
            "SELECT key, principal, method, path, body FROM outbox WHERE status IS NULL"
        ).fetchall()
        return [PendingRequest(k, p, m, path, json.loads(b)) for k, p, m, path, b in rows]

    def decide(self, key: str, status: int, response: str) -> None:
        self._db.execute(
            "UPDATE outbox SET status = ?, response = ? WHERE key = ?", (status, response, key)
        )
        self._db.commit()

    def answer(self, key: str) -> tuple[int | None, Any]:
        row = self._db.execute(
            "SELECT status, response FROM outbox WHERE key = ?", (key,)
        ).fetchone()
        if row is None or row[0] is None:
            return None, None
        return row[0], json.loads(row[1]) if row[1] else None


def plan_reminder(
    outbox: Outbox,
    *,
    tenant: str,
    principal: str,
    appointment_id: str,
    customer: str,
    appointment_local: datetime,
    zone: str,
    now: datetime,
) -> PendingRequest | None:
    """Decide the request once and persist it; nothing is sent here."""
    appointment = appointment_local.replace(tzinfo=ZoneInfo(zone))
    at = reminder_time(appointment, now)
    if at is None:
        return None
    request = PendingRequest(
        key=f"reminder-{appointment_id}-{uuid.uuid4()}",
        principal=principal,
        method="POST",
        path=f"/v1/tenants/{tenant}/scheduled-starts",
        body={
            "workflow": "echo",
            "input": {"message": f"Reminder for {customer}: appointment {appointment_id}"},
            "business_request_id": appointment_id,
            "start_at": at.astimezone(ZoneInfo(zone)).isoformat(),
            "time_zone": zone,
            "workload_class": "standard",
            "attributes": {"customer": customer},
        },
    )
    outbox.add(request)
    return request


def deliver(
    outbox: Outbox, client: httpx.Client, tokens: dict[str, str], *, attempts: int = 8
) -> None:
    """Send every undecided request, exactly as persisted, until punctual decides it."""
    for attempt in range(attempts):
        pending = outbox.undecided()
        if not pending:
            return
        for request in pending:
            try:
                response = client.request(
                    request.method,
                    request.path,
                    json=request.body,
                    headers={
                        "Authorization": f"Bearer {tokens[request.principal]}",
                        "Idempotency-Key": request.key,
                    },
                )
            except httpx.TransportError:
                continue  # ambiguous: the same row is sent again on the next round
            if response.status_code in DECIDED:
                outbox.decide(request.key, response.status_code, response.text)
        time.sleep(min(0.2 * 2**attempt, 5.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--token", required=True)
    parser.add_argument(
        "--appointment", required=True, help="local wall time, e.g. 2026-12-01T09:00"
    )
    parser.add_argument("--zone", required=True, help="IANA zone, e.g. Europe/Berlin")
    parser.add_argument("--customer", required=True)
    parser.add_argument("--id", required=True, help="the appointment's id")
    parser.add_argument("--outbox", default="reminders-outbox.db")
    args = parser.parse_args()
    outbox = Outbox(args.outbox)
    request = plan_reminder(
        outbox,
        tenant=args.tenant,
        principal="me",
        appointment_id=args.id,
        customer=args.customer,
        appointment_local=datetime.fromisoformat(args.appointment),
        zone=args.zone,
        now=datetime.now(UTC),
    )
    if request is None:
        print("the appointment is already over: no reminder")
        return
    with httpx.Client(base_url=args.url, timeout=10) as client:
        deliver(outbox, client, {"me": args.token})
    print(json.dumps({"key": request.key, "answer": outbox.answer(request.key)}, indent=2))


if __name__ == "__main__":
    main()
