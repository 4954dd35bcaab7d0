"""``/docs`` in real Chromium with every request off the machine blocked (issue 26): Swagger
UI still draws every operation, since punctual serves its files itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from punctual import bootstrap
from tests.conftest import make_settings
from tests.support.server import serving

pytestmark = pytest.mark.browser


@pytest.fixture
def url(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        with serving(system.http_app()) as served:
            yield served
    finally:
        system.close()


def test_the_docs_page_draws_every_operation_with_the_internet_blocked(
    url: str, browser_for: Any
) -> None:
    browser = browser_for(url)
    driver = browser.driver
    driver.execute_cdp_cmd("Network.enable", {})
    # Every https request (a CDN's file would never arrive); the server is http on loopback.
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["https://*"]})
    try:
        browser.open("/docs")
        WebDriverWait(driver, 30).until(
            lambda d: len(d.find_elements("css selector", ".opblock")) > 20
        )
        operations = browser.find_all(".opblock")
        assert any("/schedules/{schedule_id}/audit" in o.text for o in operations)
    finally:
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
