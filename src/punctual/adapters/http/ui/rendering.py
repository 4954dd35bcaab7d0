"""Templates, filters and the headers every operator page carries."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi.templating import Jinja2Templates
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from punctual.adapters.http.ui import timeline

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
PREFIX = "/ui"
CONTENT_SECURITY_POLICY = "default-src 'self'; frame-ancestors 'none'"
_RESULT_SHOWN_CHARS = 20_000
_ORIGIN_TEXT = {"schedule": "scheduled", "trigger": "trigger", "backfill": "backfill"}
"""An occurrence's ``origin`` as the decisions table names it."""
_DST_TEXT = {
    "gap_shifted": "DST: moved to the end of a gap",
    "gap_skipped": "DST: skipped, the time did not exist",
    "overlap_second": "DST: second pass of a repeated hour",
}


def is_page_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class PageHeaders:
    """Adds the operator page's security headers to every response under ``/ui``.

    The policy allows this origin's files only: no inline script or style, no frames,
    so an injected tag can neither run nor load anything (API.md "The operator page").
    Pages are not cached: they show a tenant's data and must be gone after sign-out.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_page_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(PREFIX + "/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
                headers["X-Content-Type-Options"] = "nosniff"
                headers["X-Frame-Options"] = "DENY"
                headers["Referrer-Policy"] = "same-origin"
                if not static:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


def segment(value: Any) -> str:
    """A value quoted as one path segment."""
    return quote(str(value), safe="")


def utc_text(value: str | None) -> str:
    """``2026-03-08T05:30:00.000Z`` as ``2026-03-08 05:30:00 UTC``."""
    if not value:
        return "—"
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return _wall_time(parsed, "seconds") + " UTC"


def local_text(value: str | None) -> str:
    """A local time with its offset, as ``2027-03-14 03:00 (UTC-04:00)``; a wall time
    (the nominal time an expression named) has none."""
    if not value:
        return "—"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    shown = _wall_time(parsed, "minutes")
    offset = parsed.strftime("%z")
    return f"{shown} (UTC{offset[:3]}:{offset[3:]})" if offset else shown


def _wall_time(value: datetime, timespec: str) -> str:
    """``2026-03-08 05:30``: the year always with four digits, as the API writes it
    (``strftime("%Y")`` writes the year 5 as ``5`` on some platforms)."""
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec=timespec)


def dst_text(adjustment: str | None) -> str:
    return _DST_TEXT.get(adjustment or "", "")


def origin_text(origin: str | None) -> str:
    return _ORIGIN_TEXT.get(origin or "", origin or "—")


def pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) > _RESULT_SHOWN_CHARS:
        return text[:_RESULT_SHOWN_CHARS] + "\n… (cut; the full value is in GET /v1/…/runs/{id})"
    return text


def spec_text(spec: dict[str, Any]) -> str:
    if "cron" in spec:
        return f"cron {spec['cron']} in {spec.get('time_zone') or 'UTC'}"
    if "business_day" in spec:
        n = spec["business_day"]
        nth = "last" if n == -1 else f"{n}th" if n > 0 else f"{-n}th from last"
        return f"{nth} business day at {spec['at']} in {spec.get('time_zone') or 'UTC'}"
    seconds = spec["interval_ms"] / 1000
    return f"every {seconds:g} s"


def specs_text(specs: list[dict[str, Any]]) -> str:
    """Each spec in words, numbered as occurrences name them when there are several."""
    if len(specs) == 1:
        return spec_text(specs[0])
    return "; ".join(f"[{index}] {spec_text(spec)}" for index, spec in enumerate(specs))


def calendar_text(calendar: dict[str, Any] | None) -> str:
    """Regions, weekend, extra dates and what a closed day does, in words."""
    if calendar is None:
        return "every day is open"
    regions = [
        r["country"] + (f"-{r['subdivision']}" if r.get("subdivision") else "")
        for r in calendar["holidays"]
    ]
    parts = [
        f"public holidays of {', '.join(regions)}" if regions else "no public holidays",
        f"weekend {', '.join(calendar['weekend']) or 'none'}",
    ]
    if calendar["extra_holidays"]:
        parts.append(f"also closed {', '.join(calendar['extra_holidays'])}")
    if calendar["extra_workdays"]:
        parts.append(f"also open {', '.join(calendar['extra_workdays'])}")
    parts.append("closed days: " + calendar["on_closed_day"].replace("_", " "))
    return "; ".join(parts)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        segment=segment,
        utc=utc_text,
        local=local_text,
        dst=dst_text,
        pretty_json=pretty_json,
        spec=spec_text,
        specs=specs_text,
        calendar=calendar_text,
        origin=origin_text,
        decision=timeline.decision_kind,
    )
    env.globals.update(
        prefix=PREFIX,
        legend=timeline.legend(),
        timeline_geometry=_geometry(),
        gaps_shown=timeline.GAPS_SHOWN,
    )
    return env


def _geometry() -> dict[str, Any]:
    return {
        "width": timeline.WIDTH,
        "height": timeline.HEIGHT,
        "left": timeline.PLOT_LEFT,
        "right": timeline.PLOT_RIGHT,
        "axis_y": timeline.AXIS_Y,
        "lanes": [(timeline.LANE_LABELS[lane], y) for lane, y in timeline.LANE_Y.items()],
        "range": timeline.RANGE,
    }


templates = Jinja2Templates(env=_environment())
