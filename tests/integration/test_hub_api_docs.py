"""The API's description as a user meets it, from a real hub with logins on: `/docs` and `/redoc`
load without a login and everything they load comes from the hub itself (hubs run on networks
that cannot reach the internet); only the files those pages use are served, nothing else of the
package; and `/openapi.json` describes every request body and answer of every operation, with
parameters named as the URLs name them."""

from __future__ import annotations

import http.client
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import scaleagent.hub.api
from scaleagent.hub.api.docs import OFFLINE_REWRITES, served_bytes

from ..helpers import HubProcess, admin_hub

ADMIN_TOKEN = "docs-admin-token-0123456789"
STATIC = Path(scaleagent.hub.api.__file__).parent / "static"
WITH_BODIES = {"post", "put", "patch"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = admin_hub(tmp_path_factory.mktemp("docs"), ADMIN_TOKEN)
    yield hub
    hub.stop()


def get(hub: HubProcess, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET `path` exactly as given (no normalisation of `..` or escapes, as a hostile client sends it)."""
    parts = urlsplit(hub.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


class _References(HTMLParser):
    """Every URL a page makes the browser load: script, stylesheet and icon addresses, and the
    API description Swagger UI (`url:` in its script) and ReDoc (`spec-url`) read."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and name in ("src", "href", "spec-url", "action", "data"):
                self.urls.append(value)

    def handle_data(self, data: str) -> None:
        self.scripts.append(data)


def references(page: bytes) -> list[str]:
    parser = _References()
    parser.feed(page.decode())
    inline = "\n".join(parser.scripts)
    return parser.urls + re.findall(r"\burl: *'([^']+)'", inline)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_without_a_login_and_everything_they_load_comes_from_the_hub(hub, page):
    # As a browser asks for a page it was sent to, and for what the page loads.
    browser = {"Sec-Fetch-Site": "same-origin", "Accept": "text/html"}
    status, headers, body = get(hub, page, browser)
    assert status == 200, body[:300]
    assert headers["content-type"].startswith("text/html")
    assert not re.search(rb"(?i)(https?:)?//[a-z0-9]", body), "the page names another host"
    urls = references(body)
    assert "/openapi.json" in urls
    assets = [u for u in urls if u != "/openapi.json"]
    assert any(u.endswith(".js") for u in assets), urls
    served = {}
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc and url.startswith("/"), f"{url} is not the hub's own"
        status, headers, body = get(hub, url, {"Sec-Fetch-Site": "same-origin", "Referer": hub.url + page})
        assert status == 200, (url, status, body[:300])
        served[url] = (headers["content-type"], body)
    for url in assets:
        content_type, body = served[url]
        name = url.rsplit("/", 1)[1]
        shipped = {p.name: p for p in STATIC.rglob("*")}
        expected = shipped.get(name) or shipped["favicon-32x32.png"]
        packaged = served_bytes(name) if name in OFFLINE_REWRITES else expected.read_bytes()
        assert body == packaged, f"{url} is not the packaged {expected.name}"
        assert not re.search(rb"https?://cdn\.", body), f"{url} loads from a CDN"
        assert content_type.split(";")[0] in ("text/javascript", "text/css", "image/png"), (url, content_type)
    assert json.loads(served["/openapi.json"][1])["info"]["title"] == "Scale Agent hub"


@pytest.mark.parametrize(
    "path",
    [
        "/docs/assets/",
        "/docs/assets",
        "/docs/assets/LICENSE",
        "/docs/assets/swagger-ui/LICENSE",
        "/docs/assets/redoc/redoc.standalone.js",
        "/docs/assets/../api/docs.py",
        "/docs/assets/%2e%2e/docs.py",
        "/docs/assets/swagger-ui.css/../../README.md",
        "/docs/static/swagger-ui-bundle.js",
        "/static/swagger-ui/swagger-ui-bundle.js",
    ],
)
def test_nothing_but_the_pages_assets_is_served(hub, path):
    status, _, body = get(hub, path)
    assert status == 401, (path, status, body[:200])  # not open: a login is asked for
    status, _, body = get(hub, path, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert status == 404, (path, status, body[:200])  # and with one, there is nothing there


def test_a_page_of_another_origin_cannot_use_the_docs_assets_as_a_way_in(hub):
    status, _, _ = get(hub, "/docs/assets/swagger-ui.css", {"Host": "evil.example:7002"})
    assert status == 421
    status, _, _ = get(hub, "/docs", {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert status == 403


def test_every_operation_describes_its_bodies_and_answers(hub):
    status, _, body = get(hub, "/openapi.json")
    assert status == 200
    doc = json.loads(body)
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # the hub never answers FastAPI's 422
    missing, underscored = [], []
    for path, item in doc["paths"].items():
        underscored += [f"{path} {p['name']}" for p in item.get("parameters", []) if p["name"].endswith("_")]
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            underscored += [f"{where} {p['name']}" for p in operation.get("parameters", []) if p["name"].endswith("_")]
            if method in WITH_BODIES:
                content = operation.get("requestBody", {}).get("content", {})
                if not any(media.get("schema") for media in content.values()):
                    missing.append(f"{where}: no request body schema")
            responses = operation["responses"]
            if "422" in responses:
                missing.append(f"{where}: documents a 422")
            for status_code, response in responses.items():
                content = response.get("content", {})
                if not content or not all(media.get("schema") for media in content.values()):
                    missing.append(f"{where} {status_code}: no response schema")
            for status_code in ("403", "421"):
                if status_code not in responses:
                    missing.append(f"{where}: {status_code} (the request guard) not documented")
            if path not in ("/health", "/ready") and "401" not in responses:
                missing.append(f"{where}: 401 not documented")
    assert not missing, "\n".join(missing)
    assert not underscored, underscored
    assert "/kubernetes/ops/{type}" in doc["paths"]

    ops = doc["paths"]["/kubernetes/ops"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    types = {next(iter(alternative["properties"])) for alternative in ops["items"]["oneOf"]}
    assert types == {
        "deployManifest",
        "deleteManifest",
        "patchManifest",
        "scaleManifest",
        "undoRolloutManifest",
        "pauseRolloutManifest",
        "resumeRolloutManifest",
        "rollingRestartManifest",
        "runJob",
    }
    watch = doc["paths"]["/api/v1/watch"]["get"]["responses"]["200"]
    assert list(watch["content"]) == ["text/event-stream"]
    assert "event: error" in watch["description"]
    task = doc["paths"]["/task/{task_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert task == {"$ref": "#/components/schemas/TaskDocument"}
    assert {"id", "state", "status", "history", "resultObjects"} <= set(schemas["TaskDocument"]["required"])
    listed = doc["paths"]["/api/v1/accounts/{account}/objects"]["get"]["responses"]["200"]["content"]
    assert listed["application/json"]["schema"] == {"$ref": "#/components/schemas/KubernetesList"}
    error = schemas["ErrorBody"]
    assert set(error["required"]) == {"error", "status"}


METHODS = ("get", "post", "put", "patch", "delete")


def call(hub: HubProcess, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """`method` on `path` as the admin, with an empty JSON body for the methods that take one."""
    parts = urlsplit(hub.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
        connection.request(method.upper(), path, body=b"{}" if method in WITH_BODIES else None, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_every_405_names_the_methods_the_path_takes_in_allow(hub):
    """RFC 9110: a 405 carries `Allow`. For every path of the document, each method it does not
    document is a 405 whose `Allow` lists the methods it does (of every route the path matches)."""
    status, _, body = get(hub, "/openapi.json")
    paths = json.loads(body)["paths"]
    templates = {template: re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$") for template in paths}
    wrong = []
    for template in paths:
        concrete = re.sub(r"\{[^}]+\}", "x", template)
        documented = {m.upper() for t, rx in templates.items() if rx.match(concrete) for m in paths[t] if m in METHODS}
        for method in METHODS:
            if method.upper() in documented:
                continue
            status, headers, answer = call(hub, method, concrete)
            allowed = {m.strip() for m in headers.get("allow", "").split(",") if m.strip()}
            if status != 405 or allowed != documented:
                wrong.append(f"{method.upper()} {concrete}: {status}, Allow {headers.get('allow')!r}: {answer[:200]!r}")
            elif (
                json.loads(answer)["error"]
                != f"{method.upper()} is not a method of {concrete}: it takes {', '.join(sorted(documented))}"
            ):
                wrong.append(f"{method.upper()} {concrete}: {answer!r}")
    assert not wrong, "\n".join(wrong)


def test_what_the_hub_accepts_in_place_of_a_field_or_a_body_is_documented(hub):
    """Clouddriver's `credentials` in place of `account`, and the disconnect's body left out:
    both accepted, so the document must allow both."""
    status, _, body = get(hub, "/openapi.json")
    paths = json.loads(body)["paths"]
    ops = paths["/kubernetes/ops"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    for alternative in ops["items"]["oneOf"]:
        ((name, description),) = alternative["properties"].items()
        assert "account" not in description.get("required", []), name
        assert description["anyOf"] == [{"required": ["account"]}, {"required": ["credentials"]}], name
    status, _, answer = call(hub, "post", "/kubernetes/ops")  # the body {} is refused, as documented
    assert status == 400, answer
    parts = urlsplit(hub.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
        body = json.dumps([{"pauseRolloutManifest": {"credentials": "c", "manifestName": "deployment web"}}])
        connection.request("POST", "/kubernetes/ops", body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        connection.close()
    disconnect = paths["/armory/agent/{agentId}/disconnect"]["post"]
    assert disconnect["requestBody"]["required"] is False
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(
            "POST", "/armory/agent/nobody/disconnect", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        response = connection.getresponse()
        assert response.status == 404, response.read()  # no such agent: the missing body is fine
        response.read()
    finally:
        connection.close()
