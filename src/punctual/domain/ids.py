"""Opaque, prefixed identifiers, allocated before the thing they name exists.

Run ids in particular are allocated when a start is created: they are the engine's
idempotency key, which is how a retried dispatch converges on one run (DP-2).
"""

from __future__ import annotations

import secrets

PREFIXES = frozenset(
    {
        "st",
        "run",
        "sch",
        "sev",
        "occ",
        "tok",
        "fnd",
        "wrk",
        "ntf",
        "whk",
        "dlv",
        "evt",
        "prc",
        "hld",
        "aud",
    }
)


def new_id(prefix: str) -> str:
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{secrets.token_hex(12)}"
