"""The hub's HTTP hardening as pure logic: which Host and Origin headers the request guard takes,
what it answers (CORS only with allowedOrigins), which Content-Types are JSON, and kubeconfig
files confined to kubeconfigDirectories with one message for every refusal."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from scaleagent.hub.accounts.errors import KubeconfigRefError
from scaleagent.hub.accounts.kubeconfig_refs import UNUSABLE_FILE, KubeconfigResolver
from scaleagent.hub.api.common import is_json_media_type
from scaleagent.hub.api.deps import GuardSettings
from scaleagent.hub.api.guard import RequestGuard, host_allowed, origin_allowed, split_host

LOOPBACK = GuardSettings(listen_address="127.0.0.1", base_url="http://127.0.0.1:7002")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:7002", ("127.0.0.1", 7002)),
        ("LocalHost.", ("localhost", None)),
        ("[::1]:7002", ("::1", 7002)),
        ("::1", ("::1", None)),
        ("hub.example.com:99999", None),
        ("[::1", None),
        ("evil.example/x", None),
        ("", None),
    ],
)
def test_host_header_values_are_split_into_name_and_port(host, expected):
    assert split_host(host) == expected


@pytest.mark.parametrize(
    "host", ["127.0.0.1:7002", "127.8.9.10:7002", "localhost:7002", "localhost", "[::1]:7002", None]
)
def test_loopback_names_are_answered_on_a_loopback_hub(host):
    assert host_allowed(host, LOOPBACK)


@pytest.mark.parametrize(
    "host", ["evil.example:7002", "evil.example", "10.0.0.5:7002", "localhost.evil.example", "[::1", "a b"]
)
def test_a_rebinding_name_or_another_address_is_refused_on_a_loopback_hub(host):
    assert not host_allowed(host, LOOPBACK)


def test_the_listen_address_and_the_base_url_of_this_replica_are_answered():
    replica = GuardSettings(listen_address="10.0.15.246", base_url="http://hub-0.hubs.spinnaker.svc:7002")
    assert host_allowed("10.0.15.246:7002", replica)  # the listen address: what peers and clients use
    assert host_allowed("hub-0.hubs.spinnaker.svc:7002", replica)  # replicas.baseUrl: what peers forward to
    assert not host_allowed("10.0.15.247:7002", replica)
    assert not host_allowed("evil.example:7002", replica)


def test_every_interface_takes_any_ip_address_until_allowed_hosts_say_otherwise():
    everywhere = GuardSettings(listen_address="0.0.0.0", base_url="http://10.0.0.5:7002")
    assert host_allowed("192.168.1.20:7002", everywhere)
    assert host_allowed("[fd00::5]:7002", everywhere)
    assert not host_allowed("evil.example:7002", everywhere)  # a name: only through allowedHosts
    named = GuardSettings(
        allowed_hosts=("hub.example.com", "api.example.com:8443"), listen_address="::", base_url="http://10.0.0.5:7002"
    )
    assert host_allowed("hub.example.com:7002", named)  # a name without port: any port
    assert host_allowed("HUB.example.com", named)
    assert host_allowed("api.example.com:8443", named)
    assert not host_allowed("api.example.com:7002", named)
    assert host_allowed("api.example.com", named, "https") is False  # 443, not 8443
    assert not host_allowed("192.168.1.20:7002", named)  # allowedHosts given: addresses are not taken blindly
    assert host_allowed("10.0.0.5:7002", named)  # ... but this replica's base URL still is
    assert host_allowed("localhost:7002", named)
    assert host_allowed("anything.example", GuardSettings(allowed_hosts=("*",)))


def test_an_origin_is_taken_when_it_is_the_hubs_own_or_allowed():
    assert origin_allowed("http://127.0.0.1:7002", "127.0.0.1:7002", LOOPBACK)
    assert origin_allowed("https://hub.example.com", "hub.example.com", LOOPBACK)  # default ports left out
    assert origin_allowed("https://hub.example.com:443", "hub.example.com", LOOPBACK)
    assert not origin_allowed("http://evil.example", "127.0.0.1:7002", LOOPBACK)
    assert not origin_allowed("http://127.0.0.1:3000", "127.0.0.1:7002", LOOPBACK)  # another port, another origin
    assert not origin_allowed("null", "127.0.0.1:7002", LOOPBACK)
    assert not origin_allowed("http://127.0.0.1:7002", None, LOOPBACK)
    ui = GuardSettings(allowed_origins=("https://spinnaker.example.com",))
    assert origin_allowed("https://Spinnaker.example.com/", "127.0.0.1:7002", ui)


@pytest.mark.parametrize(
    ("content_type", "json_"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/merge-patch+json", True),
        ("text/plain", False),
        ("text/plain; charset=application/json", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("", False),
    ],
)
def test_only_json_media_types_are_json(content_type, json_):
    assert is_json_media_type(content_type) is json_


# --- the middleware, called as ASGI -------------------------------------------------------------


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"reached": true}'})


def _call(guard: RequestGuard, method: str, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    scope = {
        "type": "http",
        "method": method,
        "path": "/kubernetes/ops",
        "scheme": "http",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    start = sent[0]
    answer = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], answer, json.loads(body) if body else None


def test_without_settings_nothing_is_checked():
    status, _, body = _call(
        RequestGuard(_inner, None), "POST", {"host": "evil.example", "origin": "http://evil.example"}
    )
    assert (status, body) == (200, {"reached": True})


def test_refusals_name_what_was_refused_and_the_setting_to_change():
    guard = RequestGuard(_inner, LOOPBACK)
    status, _, body = _call(guard, "POST", {"host": "evil.example:7002"})
    assert status == 421 and "'evil.example:7002'" in body["error"] and "server.allowedHosts" in body["error"]
    status, headers, body = _call(guard, "POST", {"host": "127.0.0.1:7002", "origin": "http://evil.example"})
    assert status == 403 and "'http://evil.example'" in body["error"] and "server.allowedOrigins" in body["error"]
    assert "access-control-allow-origin" not in headers
    status, _, body = _call(guard, "GET", {"host": "127.0.0.1:7002", "sec-fetch-site": "cross-site"})
    assert status == 403 and "Sec-Fetch-Site" in body["error"] and body["status"] == 403


def test_without_allowed_origins_nothing_cors_is_sent():
    guard = RequestGuard(_inner, LOOPBACK)
    status, headers, body = _call(guard, "POST", {"host": "127.0.0.1:7002", "origin": "http://127.0.0.1:7002"})
    assert (status, body) == (200, {"reached": True})  # the hub's own origin
    assert not [h for h in headers if h.startswith("access-control-")]
    status, headers, _ = _call(
        guard,
        "OPTIONS",
        {"host": "127.0.0.1:7002", "origin": "http://ui.example", "access-control-request-method": "POST"},
    )
    assert status == 403 and not [h for h in headers if h.startswith("access-control-")]


def test_an_allowed_origin_gets_cors_answers():
    ui = "https://spinnaker.example.com"
    guard = RequestGuard(_inner, GuardSettings(allowed_origins=(ui,)))
    status, headers, _ = _call(
        guard,
        "OPTIONS",
        {
            "host": "127.0.0.1:7002",
            "origin": ui,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
            "sec-fetch-site": "cross-site",
        },
    )
    assert status == 204
    assert headers["access-control-allow-origin"] == ui and headers["vary"] == "Origin"
    assert headers["access-control-allow-methods"] == "GET, POST, PUT, PATCH, DELETE"
    assert headers["access-control-allow-headers"] == "Authorization, Content-Type"
    status, headers, body = _call(
        guard, "POST", {"host": "127.0.0.1:7002", "origin": ui, "sec-fetch-site": "cross-site"}
    )
    assert (status, body) == (200, {"reached": True})
    assert headers["access-control-allow-origin"] == ui and headers["vary"] == "Origin"


# --- kubeconfig files ---------------------------------------------------------------------------

KUBECONFIG = "apiVersion: v1\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\ncontexts: []\n"


def _resolve(resolver: KubeconfigResolver, reference: str) -> bytes | str:
    try:
        return asyncio.run(resolver.resolve(reference))
    except KubeconfigRefError as e:
        return str(e)


def test_without_directories_a_plain_path_is_refused_before_anything_is_read(tmp_path):
    good = tmp_path / "kc.yaml"
    good.write_text(KUBECONFIG)
    resolver = KubeconfigResolver(directories=())
    refusal = resolver.refusal(str(good))
    assert refusal is not None and "dynamicAccounts.kubeconfigDirectories" in refusal and "disabled" in refusal
    assert resolver.refusal("encryptedFile:k8s!n:kc!k:config!ns:spin") is None
    assert resolver.refusal(None) is None
    assert refusal in str(_resolve(resolver, str(good)))
    assert KubeconfigResolver().refusal(str(good)) is None  # built from parts: any path (tests, tools)


def test_every_refused_file_gets_the_same_message_and_the_log_says_why(tmp_path, caplog):
    allowed = tmp_path / "kubeconfigs"
    allowed.mkdir()
    good = allowed / "good.yaml"
    good.write_text(KUBECONFIG)
    outside = tmp_path / "outside.yaml"
    outside.write_text(KUBECONFIG)
    (allowed / "notes.txt").write_text("password: hunter2\n")
    (allowed / "escape.yaml").symlink_to(outside)
    resolver = KubeconfigResolver(directories=(allowed,))
    assert _resolve(resolver, str(good)) == good.read_bytes()
    refused = {
        "outside": str(outside),
        "dot-dot": f"{allowed}/../outside.yaml",
        "symlink out": str(allowed / "escape.yaml"),
        "missing": str(allowed / "missing.yaml"),
        "not a kubeconfig": str(allowed / "notes.txt"),
        "a directory": str(allowed),
        "shadow": "/etc/shadow",
    }
    with caplog.at_level(logging.WARNING, logger="scaleagent.hub.kubeconfig"):
        messages = {what: _resolve(resolver, ref) for what, ref in refused.items()}
    assert messages == dict.fromkeys(refused, UNUSABLE_FILE)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"resolves to {os.path.realpath(outside)}, outside" in logged
    assert "does not exist" in logged and "not a kubeconfig" in logged
    assert "hunter2" not in logged


def test_directories_given_relative_and_through_symlinks_still_hold(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (real / "kc.yaml").write_text(KUBECONFIG)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    resolver = KubeconfigResolver(directories=(Path("link"),))
    assert _resolve(resolver, "link/kc.yaml") == KUBECONFIG.encode()
    assert _resolve(resolver, str(real / "kc.yaml")) == KUBECONFIG.encode()  # the same file, by its real path
    assert _resolve(resolver, "link/../real/../../etc/passwd") == UNUSABLE_FILE
