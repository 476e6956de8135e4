"""A real headless Chromium for the dashboard's tests: Debian's ``chromium`` driven by its ``chromedriver``.

Import the fixture into a test module (``from browser import browser``)::

    browser.open(server.url("/runs"))
    assert browser.chart_points("chart-history") == 24
    assert browser.console_errors() == []
    browser.screenshot("runs")      # test-artifacts/serve/runs.png

The browser runs headless (``--headless=new``), without its sandbox (the tests run as root, where
Chromium refuses the sandbox), at a fixed window size so screenshots compare. Its console is
recorded (``goog:loggingPrefs``), and a listener installed before any page script records every
Content-Security-Policy violation, so a test can assert a page broke no rule. Where Chromium or
chromedriver is missing the test skips, saying how to install them, except in CI (``CI=true`` or
``COMMLENS_TEST_REQUIRE_CHROMIUM=1``, as ``.ci/run`` sets), where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ENV = "COMMLENS_TEST_CHROMIUM"  # the browser binary, where it is not /usr/bin/chromium
CHROMEDRIVER_ENV = "COMMLENS_TEST_CHROMEDRIVER"
REQUIRE_ENV = "COMMLENS_TEST_REQUIRE_CHROMIUM"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "serve"
WINDOW = (1400, 1000)
PAGE_TIMEOUT_S = 30.0
CHART_TIMEOUT_S = 20.0

# Runs in every document before its own scripts: keeps the CSP violations the page causes.
_CSP_LISTENER = """
window.__commlensCsp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__commlensCsp.push(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') +
    ' at ' + (e.sourceFile || '') + ':' + (e.lineNumber || 0));
});
"""


def _tool(name: str, env: str, package: str) -> str:
    path = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if not os.access(path, os.X_OK):
        reason = (
            f"{name} is not installed ({path} missing): install Debian's {package} "
            "(scripts/test.sh does, as root): the dashboard's browser tests need it"
        )
        if os.environ.get("CI", "").lower() == "true" or os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; in CI this is a failure, not a skip", pytrace=False)
        pytest.skip(reason)
    return path


class Browser:
    """One Chromium session: open pages, wait for charts, read the console, save screenshots."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self._console: list[dict[str, Any]] = []

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the document and its scripts have loaded."""
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get(url)
        WebDriverWait(self.driver, PAGE_TIMEOUT_S).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def js(self, script: str, *args: object) -> Any:
        return self.driver.execute_script(script, *args)

    def page(self) -> str:
        """The body's ``data-page``."""
        return str(self.js("return document.body ? document.body.dataset.page || '' : ''"))

    # -- what the page logged ----------------------------------------------------------------------

    def console(self) -> list[dict[str, Any]]:
        """Every console entry since the browser started (chromedriver hands each out once: kept here)."""
        self._console += self.driver.get_log("browser")
        return list(self._console)

    def console_errors(self) -> list[str]:
        """Console errors (level SEVERE: script errors, failed loads, CSP refusals) and CSP violations
        of the current page, as text; [] for a clean page."""
        errors = [e["message"] for e in self.console() if e.get("level") == "SEVERE"]
        errors += [f"CSP violation: {v}" for v in self.csp_violations()]
        return errors

    def csp_violations(self) -> list[str]:
        return list(self.js("return window.__commlensCsp || []"))

    def clear_console(self) -> None:
        """Forget the console so far: the next ``console_errors()`` covers what happens after this."""
        self.console()
        self._console.clear()

    # -- the page's charts and tables (the DOM conventions in serve_design) ----------------------

    def wait_for(self, condition: Any, timeout_s: float = CHART_TIMEOUT_S, message: str = "") -> Any:
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
            TimeoutException,
            WebDriverException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        # A page that reloads while the condition reads it (a form's write, then location.reload()) leaves it
        # holding an element of the old document: poll again rather than fail.
        # Chromedriver reports the same race as a plain WebDriverException ("unhandled inspector error: Node
        # with given id does not belong to the document") when the node goes between finding and reading it.
        ignored = (NoSuchElementException, StaleElementReferenceException)

        def polled(driver: Any) -> Any:
            try:
                return condition(driver)
            except WebDriverException as error:
                if "does not belong to the document" in str(error) or "No node with given id" in str(error):
                    return False
                raise

        try:
            return WebDriverWait(self.driver, timeout_s, poll_frequency=0.05, ignored_exceptions=ignored).until(polled)
        except TimeoutException:
            raise AssertionError(
                f"{message or 'condition'} not met within {timeout_s} s; console: {self.console_errors()}"
            ) from None

    def chart_points(self, chart_id: str, timeout_s: float = CHART_TIMEOUT_S) -> int:
        """Wait until chart ``chart_id`` says ``data-rendered="1"``; its ``data-points``."""
        from selenium.webdriver.common.by import By

        def rendered(d: Any) -> Any:
            found = d.find_elements(By.ID, chart_id)
            return found and found[0].get_attribute("data-rendered") == "1" and found[0]

        element = self.wait_for(rendered, timeout_s, f"chart #{chart_id} rendered")
        return int(element.get_attribute("data-points"))

    def charts(self) -> dict[str, dict[str, str | None]]:
        """Every ``div.chart`` of the page: id -> its data-api, data-rendered and data-points."""
        return dict(
            self.js(
                "const out = {};"
                "document.querySelectorAll('div.chart').forEach(c => { out[c.id] = {"
                "api: c.dataset.api || null, rendered: c.dataset.rendered || null, points: c.dataset.points || null};"
                "}); return out;"
            )
        )

    def table_rows(self, table_id: str) -> list[list[str]]:
        """The cells' text of each ``<tbody><tr>`` of ``table#table_id``."""
        rows = self.js(
            "const t = document.getElementById(arguments[0]); if (!t) return null;"
            "return Array.from(t.querySelectorAll('tbody tr')).map("
            "r => Array.from(r.querySelectorAll('td, th')).map(c => c.innerText.trim()));",
            table_id,
        )
        assert rows is not None, f"no table #{table_id} on {self.driver.current_url}"
        return [list(r) for r in rows]

    # -- artifacts ------------------------------------------------------------------------------

    def screenshot(self, name: str) -> Path:
        """Save the window as ``test-artifacts/serve/NAME.png``; returns the path."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"screenshot {path} failed"
        return path


def start_chromium() -> Any:
    """A headless Chromium WebDriver on Debian's binaries, console logging on, CSP listener installed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _tool("chromium", CHROMIUM_ENV, "chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_tool("chromedriver", CHROMEDRIVER_ENV, "chromium-driver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _CSP_LISTENER})
    return driver


@pytest.fixture
def browser() -> Iterator[Browser]:
    """A fresh headless Chromium for one test (no cookies from another), closed afterwards."""
    driver = start_chromium()
    try:
        yield Browser(driver)
    finally:
        driver.quit()
