"""Payroll on the last business day of each month at 17:30 Berlin time, skipping Bavarian
public holidays and the company's own closed days, with punctual's Python client.

What it shows:

1. **Preview first.** The preview takes the schedule's own fields, so what it answers is
   what will fire: each month's last open day at 17:30 local time (CET or CEST), and the
   closed days it stepped over with their reason.
2. **Schedules as code.** ``PUT …/schedules/by-name/payroll`` creates the schedule, or
   updates it, or changes nothing: run this script on every deploy.
3. **A payroll never starts late.** ``start_deadline_ms`` says a run whose body has not begun
   four hours after 17:30 (no worker, an outage) is skipped ``too_late`` with a
   notification, not run at midnight; ``missed: skip`` with a day's grace means a
   payroll missed by a longer outage is recorded, not run days later.

Run it against a server started with ``make run``::

    python examples/payroll.py --token pn_...
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from punctual.client import PunctualClient

BERLIN = "Europe/Berlin"
PAYROLL: dict[str, Any] = {
    "workflow": "echo",
    "input": {"message": "run payroll"},
    "specs": [{"business_day": -1, "at": "17:30", "time_zone": BERLIN}],
    "calendar": {
        "holidays": [{"country": "DE", "subdivision": "BY"}],
        "weekend": ["sat", "sun"],
        # The company closes on Christmas Eve and New Year's Eve too.
        "extra_holidays": ["2026-12-24", "2026-12-31", "2027-12-24", "2027-12-31"],
        "on_closed_day": "skip",
    },
    "overlap": "skip",
    "missed": "skip",
    "misfire_grace_ms": 86_400_000,
    "start_deadline_ms": 4 * 3_600_000,
}


def preview(client: PunctualClient, after: datetime, months: int) -> list[str]:
    """The next ``months`` payroll runs, in Berlin time."""
    answer = client.preview_schedule(
        specs=PAYROLL["specs"], calendar=PAYROLL["calendar"], after=after, count=months
    )
    zone = ZoneInfo(BERLIN)
    return [f"{item.fire_at.astimezone(zone):%a %d %b %Y %H:%M %Z}" for item in answer.items]


def apply(client: PunctualClient) -> str:
    """Create the schedule, or bring it to ``PAYROLL``; what happened."""
    answer = client.put_schedule_by_name("payroll", PAYROLL)
    return "created or updated" if answer.changed else "unchanged"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--token", required=True)
    parser.add_argument("--months", type=int, default=12)
    args = parser.parse_args()
    with PunctualClient(args.url, args.token, args.tenant) as client:
        for line in preview(client, datetime.now(UTC), args.months):
            print(line)
        print(f"schedule payroll: {apply(client)}")


if __name__ == "__main__":
    main()
