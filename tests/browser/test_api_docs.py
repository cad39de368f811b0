"""`/docs` (Swagger UI) and `/redoc` in a real browser with no network but loopback: both render
the hub's whole API from files the hub serves, as they must on a private network."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.chrome import chrome, screenshot, severe_console_errors, wait
from tests.helpers import HubProcess, admin_hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    process = admin_hub(tmp_path_factory.mktemp("docs-browser"), "docs-browser-token-0123456789")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chrome() as driver:
        yield driver


def loaded_from(driver: WebDriver) -> set[str]:
    return set(
        driver.execute_script("return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    )


def test_swagger_ui_renders_every_operation_offline(hub, browser):
    browser.get(hub.url + "/docs")
    # One block per operation; the API has dozens: the document was fetched and rendered.
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 20)
    summaries = browser.find_element(By.CSS_SELECTOR, ".swagger-ui").text
    assert "/kubernetes/ops" in summaries and "/api/v1/accounts" in summaries
    screenshot(browser, "api-docs-swagger-ui", whole_page=False)
    assert loaded_from(browser) <= {hub.url}
    assert severe_console_errors(browser) == []


def test_redoc_renders_the_operations_offline(hub, browser):
    browser.get(hub.url + "/redoc")
    wait(browser).until(lambda d: "List dynamic accounts" in d.find_element(By.TAG_NAME, "body").text)
    screenshot(browser, "api-docs-redoc", whole_page=False)
    assert loaded_from(browser) <= {hub.url}
    assert severe_console_errors(browser) == []
