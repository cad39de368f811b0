"""The dashboard (`/`, docs/dashboard.md) in a real browser: Debian's chromium, driven by
Selenium through Debian's chromedriver (scripts/test installs both), against a real hub and agent
following three kubesim clusters.

One set-up for the module: kubesim with three clusters; a hub with logins on (an admin token and
a viewer's, who is no admin) and dynamic accounts; one agent streaming cluster-0 and cluster-1
from its file. cluster-2 is a dynamic account, created INACTIVE: the admin activates it from the
page. Screenshots go to $SCALE_AGENT_TEST_ARTIFACTS/browser, or test-artifacts/browser in the
repository.

Every wait is a WebDriverWait on what the page shows, never a sleep; nothing asserts a timing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from kubernetes import client, config
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec

from tests.browser.chrome import chrome, screenshot, severe_console_errors, wait
from tests.helpers import AgentProcess, HubProcess, KubesimProcess, login_hub, start_kubesim, write_yaml

ADMIN_TOKEN = "dashboard-admin-token-0123456789"
VIEWER_TOKEN = "dashboard-viewer-token-0123456789"
STATIC_ACCOUNTS = ("cluster-0", "cluster-1")
DYNAMIC_ACCOUNT = "cluster-2"
ACCOUNTS = (*STATIC_ACCOUNTS, DYNAMIC_ACCOUNT)


class Hub:
    """The hub's API as the test's admin calls it (with the admin token)."""

    def __init__(self, process: HubProcess) -> None:
        self.process, self.url = process, process.url

    def call(self, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN) -> tuple[int, Any]:
        return self.process.call(method, path, body, token)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hub, KubesimProcess]]:
    directory = tmp_path_factory.mktemp("dashboard")
    kubesim = start_kubesim(directory / "kubesim", "--clusters", "3", "--bookmark-interval", "1")
    started: list[Any] = [kubesim]
    try:
        process = login_hub(
            directory,
            {"admin": (["platform"], ADMIN_TOKEN), "viewer": (["dev"], VIEWER_TOKEN)},
            dynamicAccounts={
                "encryptionKey": Fernet.generate_key().decode(),
                "kubeconfigDirectories": [str(kubesim.kubeconfig_dir)],
            },
        )
        started.append(process)
        hub = Hub(process)
        agent = AgentProcess(
            write_yaml(
                directory / "agent.yaml",
                {
                    "kubernetes": {
                        "accounts": [
                            {"name": name, "kubeconfigFile": str(kubesim.admin(i))}
                            for i, name in enumerate(STATIC_ACCOUNTS)
                        ]
                    },
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{process.grpc_port}", "insecure": True},
                },
            ),
            print_events=False,
        )
        started.append(agent)
        status, created = hub.call(
            "POST", "/armory/accounts", [{"name": DYNAMIC_ACCOUNT, "kubeconfigFile": str(kubesim.admin(2))}]
        )
        assert status == 201, created
        yield hub, kubesim
    finally:
        for p in reversed(started):
            p.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chrome() as driver:
        yield driver


@pytest.fixture(scope="module")
def page(stack: tuple[Hub, KubesimProcess], browser: WebDriver) -> WebDriver:
    """The dashboard, logged in as the admin (typed into the page's login form)."""
    hub, _ = stack
    browser.get(hub.url + "/")
    token = wait(browser).until(ec.visibility_of_element_located((By.ID, "token")))
    screenshot(browser, "login")
    token.send_keys(ADMIN_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    wait(browser).until(ec.text_to_be_present_in_element((By.ID, "whoami"), "admin"))
    return browser


def row_attribute(driver: WebDriver, account: str, attribute: str) -> str | None:
    return driver.find_element(By.CSS_SELECTOR, f'#accounts tr[data-account="{account}"]').get_attribute(attribute)


def watching(driver: WebDriver, account: str) -> bool:
    return row_attribute(driver, account, "data-agent-state") == "watching"


def activate(hub: Hub) -> None:
    """cluster-2 migrated (ACTIVE), whether or not the first test did it from the page."""
    status, doc = hub.call("GET", f"/armory/accounts/{DYNAMIC_ACCOUNT}")
    assert status == 200, doc
    if doc["state"] in ("INACTIVE", "FAILED"):
        status, doc = hub.call("PATCH", "/armory/accounts", [{"name": DYNAMIC_ACCOUNT, "state": "ACTIVE"}])
        assert status == 202, doc


def core(kubesim: KubesimProcess, cluster: int) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(cluster))))


def configmap(kubesim: KubesimProcess, cluster: int, name: str, labels: dict[str, str]) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data={"from": "the browser test"})
    core(kubesim, cluster).create_namespaced_config_map("default", body)


def test_an_admin_sees_every_cluster_and_activates_the_dynamic_one(stack, page):
    hub, _ = stack
    for name in STATIC_ACCOUNTS:
        wait(page).until(lambda d, name=name: watching(d, name))
    wait(page).until(lambda d: row_attribute(d, DYNAMIC_ACCOUNT, "data-account") == DYNAMIC_ACCOUNT)
    wait(page).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#agents tr[data-agent]")))
    wait(page).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#replicas li[data-replica]")))
    if hub.call("GET", f"/armory/accounts/{DYNAMIC_ACCOUNT}")[1]["state"] == "INACTIVE":
        button = wait(page).until(
            ec.element_to_be_clickable(
                (By.CSS_SELECTOR, f'#accounts tr[data-account="{DYNAMIC_ACCOUNT}"] button.activate')
            )
        )
        button.click()
    wait(page).until(lambda d: watching(d, DYNAMIC_ACCOUNT))
    wait(page).until(lambda d: row_attribute(d, DYNAMIC_ACCOUNT, "data-state") == "ACTIVE")
    text = page.find_element(By.ID, "accounts").text
    assert "v1.30.0" in text  # each cluster's server version, from the account documents
    wait(page).until(ec.text_to_be_present_in_element((By.ID, "accounts-count"), "3"))
    wait(page).until(
        lambda d: all(
            f">{name}<" in d.find_element(By.CSS_SELECTOR, "#kinds thead").get_attribute("innerHTML")
            for name in ACCOUNTS
        )
    )
    screenshot(page, "three-clusters")
    assert severe_console_errors(page) == []
    # Everything the page loaded came from the hub itself.
    origins = page.execute_script("return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) <= {hub.url}, origins


def test_a_new_object_appears_and_the_live_chart_moves(stack, page):
    hub, kubesim = stack
    activate(hub)
    wait(page).until(lambda d: watching(d, DYNAMIC_ACCOUNT))
    before = int(page.find_element(By.ID, "events-total").text.replace(",", ""))
    name = f"appears-{uuid.uuid4().hex[:8]}"
    configmap(kubesim, 1, name, {"dashboard-test": "appears"})
    wait(page).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f'#changes li[data-account="cluster-1"][data-name="{name}"]'))
    )
    assert "ADDED" in page.find_element(By.CSS_SELECTOR, f'#changes li[data-name="{name}"]').text
    wait(page).until(lambda d: int(d.find_element(By.ID, "events-total").text.replace(",", "")) > before)
    # The rate chart drew the change: its largest point is above zero.
    wait(page).until(lambda d: float(d.find_element(By.ID, "rate-chart").get_attribute("data-max")) > 0)
    assert page.find_elements(By.CSS_SELECTOR, "#rate-chart canvas")
    # The latency chart, when the hub has /api/v1/stats; a polite note when it has not.
    wait(page).until(lambda d: d.find_elements(By.ID, "latency-chart") or d.find_elements(By.ID, "latency-unavailable"))
    screenshot(page, "live-change")


def test_a_label_search_finds_objects_across_clusters_and_opens_their_yaml(stack, page):
    hub, kubesim = stack
    activate(hub)
    label = f"search-{uuid.uuid4().hex[:8]}"
    names = {0: f"found-{label}-a", 2: f"found-{label}-c"}
    for cluster, name in names.items():
        configmap(kubesim, cluster, name, {"dashboard-test": label})
    configmap(kubesim, 1, f"other-{label}", {"dashboard-test": "something-else"})
    for cluster, name in names.items():  # in the hub's cache before the search
        wait(page).until(
            ec.presence_of_element_located(
                (By.CSS_SELECTOR, f'#changes li[data-account="cluster-{cluster}"][data-name="{name}"]')
            )
        )
    page.find_element(By.ID, "search-kind").send_keys("configmap")
    page.find_element(By.ID, "search-labelSelector").send_keys(f"dashboard-test={label}")
    page.find_element(By.CSS_SELECTOR, "#search button[type=submit]").click()
    wait(page).until(lambda d: d.find_element(By.ID, "results").get_attribute("data-pending") == "false")
    rows = page.find_elements(By.CSS_SELECTOR, "#results tr.result")
    assert sorted((r.get_attribute("data-account"), r.get_attribute("data-name")) for r in rows) == [
        ("cluster-0", names[0]),
        ("cluster-2", names[2]),
    ]
    page.find_element(By.CSS_SELECTOR, f'#results tr.result[data-name="{names[2]}"]').click()
    view = wait(page).until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#object-view pre.yaml")))
    assert "kind: ConfigMap" in view.text
    assert f"name: {names[2]}" in view.text
    assert f"dashboard-test: {label}" in view.text
    screenshot(page, "search-yaml")


def test_tasks_show_their_phases_and_errors(stack, page):
    hub, _ = stack
    ok = f"task-{uuid.uuid4().hex[:8]}"
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ok, "namespace": "default"}}
    status, done = hub.call(
        "POST", "/kubernetes/ops", [{"deployManifest": {"account": "cluster-0", "manifests": [manifest]}}]
    )
    assert status == 200, done
    status, failed = hub.call(
        "POST", "/kubernetes/ops", [{"deployManifest": {"account": "no-such-account", "manifests": [manifest]}}]
    )
    assert status == 200, failed
    wait(page).until(
        ec.presence_of_element_located(
            (By.CSS_SELECTOR, f'#tasks tr[data-task="{done["id"]}"][data-state="completed"]')
        )
    )
    row = wait(page).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f'#tasks tr[data-task="{failed["id"]}"][data-state="failed"]'))
    )
    assert "no-such-account" in row.text
    row.click()
    wait(page).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#tasks tr.history li")))
    screenshot(page, "tasks")


def test_a_viewer_sees_refusals_as_messages_and_no_actions(stack, page):
    page.find_element(By.ID, "logout").click()
    token = wait(page).until(ec.visibility_of_element_located((By.ID, "token")))
    token.send_keys(VIEWER_TOKEN)
    page.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    wait(page).until(ec.text_to_be_present_in_element((By.ID, "whoami"), "viewer"))
    refusal = wait(page).until(ec.presence_of_element_located((By.CSS_SELECTOR, '#agents .message[data-status="403"]')))
    assert "admin" in refusal.text
    # The rest of the page works: the accounts the viewer may read, without lifecycle or actions.
    for name in STATIC_ACCOUNTS:
        wait(page).until(lambda d, name=name: watching(d, name))
    assert "need the admin role" in page.find_element(By.CSS_SELECTOR, "#accounts h2").text
    assert page.find_elements(By.CSS_SELECTOR, "#accounts button") == []
    screenshot(page, "viewer")
    assert severe_console_errors(page) == []
