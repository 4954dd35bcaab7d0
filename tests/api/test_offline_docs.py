"""``/docs`` works without internet (issue 26): the page names no other host, and every
file it loads is served by punctual itself from the ``swagger-ui-py`` package."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from tests.conftest import make_settings
from tests.support.api import in_process


@pytest.fixture
def client(sqlite_url: str, tmp_path: Path) -> Iterator[TestClient]:
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        with in_process(system) as test_client:
            yield test_client
    finally:
        system.close()


def test_the_docs_page_loads_only_what_punctual_serves(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert not re.search(r"(?:src|href)=[\"']?(?:https?:)?//", page.text), "a file from elsewhere"
    loaded = re.findall(r"(?:src|href)=[\"']([^\"']+)[\"']", page.text)
    assert {"/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css"} <= set(loaded)
    for path in loaded:
        asset = client.get(path)
        assert asset.status_code == 200, path
        assert asset.content, path
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text
    assert client.get("/openapi.json").status_code == 200
    assert "/docs" not in client.get("/openapi.json").json()["paths"]
