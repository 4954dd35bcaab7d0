"""A tenant command speaks only HTTP: loading the CLI must not load the composition root.

The ``punctual`` CLI is started once per command by scripts and operators; the store,
the HTTP app and the migrations (SQLAlchemy, FastAPI, Alembic) cost about a second to
import, which only host commands need.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("punctual.bootstrap", "sqlalchemy", "fastapi", "alembic", "punctual.adapters.stores")


def test_the_cli_loads_without_the_store_or_the_http_app() -> None:
    probe = (
        "import sys, punctual.cli.main\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted({m for m in sys.modules for h in heavy if m == h or m.startswith(h + '.')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stdout
