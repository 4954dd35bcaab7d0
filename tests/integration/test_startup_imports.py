"""What a process imports at its start is what it needs (SPEC OP-1: a host command answers
at once, a worker starts fast): the composition root and a host command leave the web stack
and Alembic alone until something serves HTTP or migrates, and the CLI leaves the typed
client alone until a command talks to a server (``serve`` and the fork server of every
worker import the CLI).

Each check is a fresh interpreter: this one has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
{imports}
print(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))
"""


def loaded_after(imports: str, watched: list[str]) -> list[str]:
    code = PROBE.format(imports=imports, watched=watched)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    found: list[str] = json.loads(done.stdout)
    return found


def test_the_cli_starts_without_the_typed_client() -> None:
    assert (
        loaded_after("import punctual.cli.main", ["punctual.client", "punctual.resources", "httpx"])
        == []
    )


def test_the_composition_root_imports_neither_the_web_stack_nor_alembic() -> None:
    assert (
        loaded_after(
            "import punctual.bootstrap, punctual.cli.main",
            ["fastapi", "starlette", "alembic", "punctual.adapters.http.app"],
        )
        == []
    )


def test_an_assembled_system_checks_its_schema_without_alembic(
    sqlite_url: str, tmp_path: Path
) -> None:
    """``sqlite_url`` is a migrated database: building on it only checks the revision."""
    key_file = str(tmp_path / "test.keys")
    imports = f"""
from punctual import bootstrap
from punctual.settings import load_settings
codec = {{"key_file": {key_file!r}}}
bootstrap.build(load_settings(None, database_url={sqlite_url!r}, codec=codec)).close()
"""
    assert loaded_after(imports, ["fastapi", "alembic"]) == []
