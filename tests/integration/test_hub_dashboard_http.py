"""The dashboard over plain HTTP, from a real hub with logins on (the page itself in a browser:
tests/browser/test_dashboard.py): `/` and its files load without a login, and are exactly the
packaged files; nothing else of the package is served; the data the page reads still needs a
login; the page's Content-Security-Policy lets only the hub's own scripts run. And `GET /task`,
the recent tasks the page lists, shows each caller only the tasks it may read."""

from __future__ import annotations

import http.client
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

import scaleagent.hub.api
from scaleagent.hub.api.dashboard import ASSETS

from ..helpers import HubProcess, login_hub

ADMIN_TOKEN = "dashboard-http-admin-0123456789"
VIEWER_TOKEN = "dashboard-http-viewer-0123456789"
STATIC = Path(scaleagent.hub.api.__file__).parent / "static" / "dashboard"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from cryptography.fernet import Fernet

    directory = tmp_path_factory.mktemp("dashboard-http")
    hub = login_hub(
        directory,
        {"admin": (["platform"], ADMIN_TOKEN), "viewer": (["dev"], VIEWER_TOKEN)},
        dynamicAccounts={"encryptionKey": Fernet.generate_key().decode()},
    )
    yield hub
    hub.stop()


def request(
    hub: HubProcess, method: str, path: str, headers: dict[str, str] | None = None, body: object = None
) -> tuple[int, dict[str, str], bytes]:
    """`path` exactly as given (no normalisation of `..` or escapes, as a hostile client sends it)."""
    parts = urlsplit(hub.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class _Loads(HTMLParser):
    """The URLs a page makes the browser load (scripts, stylesheets) and its import map."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.importmap = ""
        self._in_importmap = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self._in_importmap = tag == "script" and found.get("type") == "importmap"
        for name in ("src", "href"):
            if found.get(name):
                self.urls.append(str(found[name]))

    def handle_data(self, data: str) -> None:
        if self._in_importmap:
            self.importmap += data

    def handle_endtag(self, tag: str) -> None:
        self._in_importmap = False


def test_the_page_and_everything_it_loads_come_from_the_hub_without_a_login(hub):
    status, headers, body = request(hub, "GET", "/")
    assert status == 200, body[:300]
    assert headers["content-type"].startswith("text/html")
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self' 'sha256-" in policy
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    page = _Loads()
    page.feed(body.decode())
    loaded = page.urls + list(json.loads(page.importmap)["imports"].values())
    for url in loaded:
        assert not urlsplit(url).netloc, f"{url} is loaded from another host"
    paths = [urlsplit(urljoin(hub.url + "/", url)).path for url in loaded]
    # The scripts' own imports (./charts.js, ./yaml.js), relative to the scripts.
    paths += [
        urlsplit(urljoin(hub.url + "/dashboard/assets/app.js", name)).path
        for script in (STATIC / "app.js", STATIC / "charts.js")
        for name in re.findall(r'from "(\./[\w.-]+)"', script.read_text())
    ]
    assert len(set(paths)) == len(ASSETS), paths  # every asset dashboard.py serves
    for path in paths:
        status, headers, served = request(hub, "GET", path)
        assert status == 200, (path, status)
        packaged = ASSETS[path.rsplit("/", 1)[1]][0]
        assert served == packaged.read_bytes(), f"{path} is not the packaged {packaged}"
        assert headers["content-type"].split(";")[0] in ("text/javascript", "text/css", "image/png"), (path, headers)
        assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/assets/",
        "/dashboard/assets/index.html",
        "/dashboard/assets/preact.LICENSE",
        "/dashboard/assets/vendor/preact.mjs",
        "/dashboard/assets/../dashboard.py",
        "/dashboard/assets/%2e%2e/app.js",
        "/dashboard",
        "/index.html",
        "/static/dashboard/app.js",
    ],
)
def test_nothing_but_the_pages_files_is_served(hub, path):
    status, _, body = request(hub, "GET", path)
    assert status == 401, (path, status, body[:200])  # not open: a login is asked for
    status, _, body = request(hub, "GET", path, as_user(ADMIN_TOKEN))
    assert status == 404, (path, status, body[:200])  # and with one, there is nothing there


def test_what_the_page_reads_still_needs_a_login(hub):
    for path in ("/api/v1/accounts", "/api/v1/watch", "/armory/agents", "/armory/accounts", "/task"):
        status, _, body = request(hub, "GET", path)
        assert status == 401, (path, status, body[:200])


def test_same_origin_requests_of_the_page_pass_and_other_origins_do_not(hub):
    port = urlsplit(hub.url).port
    same = {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin", "Host": f"127.0.0.1:{port}"}
    status, _, body = request(hub, "GET", "/api/v1/accounts", {**same, **as_user(ADMIN_TOKEN)})
    assert status == 200, body[:200]
    status, _, body = request(hub, "PATCH", "/armory/accounts", {**same, **as_user(VIEWER_TOKEN)}, [{"name": "x"}])
    assert status == 403, body[:200]  # refused for the permission, as the page shows it
    assert b"admin" in body
    status, _, _ = request(hub, "GET", "/", {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert status == 403
    status, _, _ = request(hub, "GET", "/", {"Host": "evil.example:7002"})
    assert status == 421


def test_recent_tasks_show_each_caller_only_what_it_may_read(hub):
    # An account only ops may read (stored INACTIVE: no agent serves it, so its tasks fail).
    status, _, body = request(
        hub,
        "POST",
        "/armory/accounts",
        as_user(ADMIN_TOKEN),
        [{"name": "ops-only", "permissions": {"READ": ["ops"], "WRITE": ["ops"]}}],
    )
    assert status == 201, body
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
    ids = {}
    for who, token, account in (("admin", ADMIN_TOKEN, "ops-only"), ("viewer", VIEWER_TOKEN, "anywhere")):
        status, _, body = request(
            hub,
            "POST",
            "/kubernetes/ops",
            as_user(token),
            [{"deployManifest": {"account": account, "manifests": [manifest]}}],
        )
        assert status == 200, body
        ids[who] = json.loads(body)["id"]

    status, _, body = request(hub, "GET", "/task", as_user(ADMIN_TOKEN))
    assert status == 200, body
    listed = [t["id"] for t in json.loads(body)]
    assert listed[:2] == [ids["viewer"], ids["admin"]]  # newest first
    status, _, body = request(hub, "GET", "/task?limit=1", as_user(ADMIN_TOKEN))
    assert [t["id"] for t in json.loads(body)] == [ids["viewer"]]

    status, _, body = request(hub, "GET", "/task", as_user(VIEWER_TOKEN))
    assert status == 200, body
    listed = [t["id"] for t in json.loads(body)]
    assert ids["viewer"] in listed and ids["admin"] not in listed  # ops-only is not the viewer's to read
    doc = next(t for t in json.loads(body) if t["id"] == ids["viewer"])
    assert set(doc) >= {"id", "state", "status", "history", "startTimeMs"}

    for limit in ("0", "1001", "ten"):
        status, _, body = request(hub, "GET", f"/task?limit={limit}", as_user(ADMIN_TOKEN))
        assert status == 400 and b"limit" in body, (limit, status, body)
