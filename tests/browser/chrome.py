"""A real browser for the tests: Debian's chromium, driven by Selenium through Debian's
chromedriver (scripts/test installs both), with screenshots kept as test artifacts in
$SCALE_AGENT_TEST_ARTIFACTS/browser, or test-artifacts/browser in the repository."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 60  # seconds: the longest any condition may take on a busy 2-core machine; never asserted
WIDTH, HEIGHT = 1400, 1000
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SCALE_AGENT_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "browser"
# No host but loopback resolves: a page that needed the internet (a CDN) would fail to load here
# as it would on a hub's private network.
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1"


def browser_binaries() -> tuple[str, str]:
    """Debian's chromium and chromedriver. Given to Selenium explicitly, so that Selenium Manager
    never looks for (or downloads) a browser or a driver of its own."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    if not chromium or not driver:
        pytest.fail(
            "chromium and chromedriver are not installed: scripts/test installs them "
            "(Debian packages chromium and chromium-driver)"
        )
    return chromium, driver


@contextlib.contextmanager
def chrome() -> Iterator[WebDriver]:
    """A headless chromium with the console log kept, offline but for loopback."""
    chromium, driver_path = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},{HEIGHT}",
        OFFLINE,
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, should it run at all, stays offline
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver) -> WebDriverWait:
    return WebDriverWait(driver, WAIT, poll_frequency=0.1, ignored_exceptions=(WebDriverException,))


def screenshot(driver: WebDriver, name: str, *, whole_page: bool = True) -> None:
    """The whole page, beyond the window's height (Chrome's DevTools protocol), as a person would
    scroll through it; or only the window, for pages tens of screens long."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if not whole_page:
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
        return
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True, "clip": clip})
    (ARTIFACTS / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


def severe_console_errors(driver: WebDriver) -> list[str]:
    """The page's script errors; failed requests (the 401, 403 and 404 answers a page shows as
    messages) are logged by Chrome as errors too, and are not the page's."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]
    ]
