"""The public surface, snapshotted (STYLE.md 12): ``/openapi.json`` must equal
``openapi.snapshot.json`` beside this file.

A difference is a change of the contract that users and generated clients see: review it
like a migration (is it an extension, or does it break someone?), then refresh the
snapshot and commit it with the change:

    PUNCTUAL_UPDATE_SNAPSHOT=1 .venv/bin/python -m pytest tests/api/test_openapi_snapshot.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from fastapi.testclient import TestClient

from punctual import bootstrap
from tests.conftest import make_settings

SNAPSHOT = Path(__file__).with_name("openapi.snapshot.json")
UPDATE = os.environ.get("PUNCTUAL_UPDATE_SNAPSHOT", "") == "1"
SHOWN_LINES = 200


def rendered(document: object) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def test_the_openapi_document_matches_its_snapshot(sqlite_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        with TestClient(system.http_app()) as client:
            response = client.get("/openapi.json")
    finally:
        system.close()
    assert response.status_code == 200
    current = rendered(response.json())
    if UPDATE:
        SNAPSHOT.write_text(current, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    if current != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), current.splitlines(), "snapshot", "/openapi.json", lineterm=""
        )
        shown = "\n".join(list(diff)[:SHOWN_LINES])
        raise AssertionError(
            "the OpenAPI document changed. Review the difference like a migration, then "
            "refresh the snapshot with PUNCTUAL_UPDATE_SNAPSHOT=1 (see this module's "
            f"docstring):\n{shown}"
        )
