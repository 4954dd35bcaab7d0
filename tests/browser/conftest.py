"""Real headless Chromium through chromedriver, axe-core, and screenshots kept as artifacts.

Chromium and chromedriver come from Debian (``apt-get install chromium chromium-driver``)
and axe-core from the npm registry; ``.ci/run`` installs all three. A missing one fails
these tests: the operator page is only known to work once a real browser has shown it.

Screenshots go to ``$PUNCTUAL_SCREENSHOTS`` when set, else to ``test-artifacts/browser/``
at the top of the repository, a directory that ignores itself in git (it holds its own
``.gitignore``), so CI can keep it and nobody commits it by mistake.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

AXE_VERSION = "4.14.1"
AXE_DEFAULT = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "punctual"
    / "axe-core"
    / "node_modules"
    / "axe-core"
    / "axe.min.js"
)
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
_INSTALL_BROWSER = "apt-get update && apt-get install -y chromium chromium-driver"
_INSTALL_AXE = f'npm install --no-save --prefix "{AXE_DEFAULT.parents[2]}" axe-core@{AXE_VERSION}'
RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: "tag", values: arguments[0]}, resultTypes: ["violations"]})
  .then(result => done(result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " :: " + n.failureSummary)}))))
  .catch(error => done([{id: "axe-failed", help: String(error), nodes: []}]));
"""


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        f"{' or '.join(names)} is not installed; the browser tests need it: {_INSTALL_BROWSER}"
    )


@pytest.fixture(scope="session")
def axe_source() -> str:
    path = Path(os.environ.get("PUNCTUAL_AXE_JS", AXE_DEFAULT))
    if not path.is_file():
        pytest.fail(f"axe-core is not at {path}; install it with: {_INSTALL_AXE}")
    return path.read_text()


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    chosen = os.environ.get("PUNCTUAL_SCREENSHOTS")
    if chosen:
        path = Path(chosen)
    else:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / ".gitignore").write_text("# test output, never committed\n*\n")
        path = ARTIFACTS / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def chromium() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # containers run the tests as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--lang=en-US",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_binary("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class Browser:
    """One test's view of the shared browser: pages, checks and screenshots."""

    driver: WebDriver
    base_url: str
    axe: str
    shots: Path
    checked: list[str] = field(default_factory=list)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    @property
    def path(self) -> str:
        current: str = self.driver.current_url
        return current.removeprefix(self.base_url)

    def find(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def submit(self, button: Any) -> None:
        """Press a form's button and wait for the page it leads to."""
        button.click()
        # While the old document goes away Chromium may answer about its nodes with an
        # "unknown error" instead of a stale reference: both mean the page is changing.
        wait = WebDriverWait(self.driver, 15, ignored_exceptions=[WebDriverException])
        wait.until(expected_conditions.staleness_of(button))
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    def sign_in(self, token: str) -> None:
        self.open("/ui/")
        self.find("#token").send_keys(token)
        self.submit(self.find("form.sign-in button[type=submit]"))

    def check(self, name: str) -> None:
        """The page passes axe-core's WCAG 2 A and AA rules, logged nothing bad (a CSP
        refusal would be logged), and is kept as a full-page screenshot."""
        self.driver.execute_script(self.axe)
        violations = self.driver.execute_async_script(RUN_AXE, WCAG_TAGS)
        assert violations == [], f"{name}: accessibility violations: {violations}"
        # The document's own status (a 401 for a refused sign-in) is the test's to check;
        # anything else logged as an error, a CSP refusal included, is a problem.
        own = self.driver.current_url + " "
        problems = [
            entry
            for entry in self.driver.get_log("browser")
            if entry["level"] == "SEVERE"
            and not (entry.get("source") == "network" and entry["message"].startswith(own))
        ]
        assert problems == [], f"{name}: the browser logged errors: {problems}"
        self.screenshot(name)
        self.checked.append(name)

    def screenshot(self, name: str) -> Path:
        height = self.driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"
        )
        self.driver.set_window_size(1280, max(900, min(int(height) + 40, 6000)))
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot of {name}"
        self.driver.set_window_size(1280, 900)
        return path


@pytest.fixture
def browser_for(chromium: WebDriver, axe_source: str, screenshot_dir: Path) -> Iterator[Any]:
    """``browser_for(url)``: the shared browser, with no cookies of an earlier test."""

    def make(base_url: str) -> Browser:
        # Cookies are per host, not per port: every test's server is 127.0.0.1.
        chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
        chromium.get_log("browser")  # drop what earlier tests left
        return Browser(chromium, base_url, axe_source, screenshot_dir)

    yield make
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
