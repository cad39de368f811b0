"""Bad input gets a clear Kubernetes Status, never a crash or a hang."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from pathlib import Path

import aiohttp
import yaml


def _tls(kubeconfig: Path) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    headers = {}
    if "token" in user:
        headers["Authorization"] = f"Bearer {user['token']}"
    else:
        d = Path(tempfile.mkdtemp())
        (d / "c.pem").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (d / "k.pem").write_bytes(base64.b64decode(user["client-key-data"]))
        ctx.load_cert_chain(d / "c.pem", d / "k.pem")
    return cluster["server"], ctx, headers


async def _call(kubeconfig: Path, method: str, path: str, **kw):
    server, ctx, headers = _tls(kubeconfig)
    headers.update(kw.pop("headers", {}))
    async with aiohttp.ClientSession() as s:
        async with s.request(method, server + path, ssl=ctx, headers=headers, **kw) as r:
            raw = await r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:  # a real apiserver's plain-text answers (404 page not found)
                return r.status, raw.decode(errors="replace")


def _is_status(body, code: int, reason: str) -> None:
    assert body["kind"] == "Status" and body["code"] == code and body["reason"] == reason, body
    assert body["message"]


async def test_unknown_resource_is_a_404_status(kubesim):
    code, body = await _call(kubesim.admin(), "GET", "/api/v1/namespaces/default/gizmos")
    assert code == 404
    _is_status(body, 404, "NotFound")
    # A group no one serves: the end of the apiserver's handler chain, Go's plain-text 404.
    code, body = await _call(kubesim.admin(), "GET", "/apis/nope.example.com/v1/things")
    assert (code, body) == (404, "404 page not found\n")


async def test_malformed_json_is_a_400_status(kubesim):
    code, body = await _call(
        kubesim.admin(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        data=b'{"metadata": {',
        headers={"Content-Type": "application/json"},
    )
    assert code == 400
    _is_status(body, 400, "BadRequest")


async def test_malformed_yaml_is_a_400_status(kubesim):
    code, body = await _call(
        kubesim.admin(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x?fieldManager=t",
        data=b"metadata: [unclosed",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert code == 400
    _is_status(body, 400, "BadRequest")


async def test_a_body_that_is_not_an_object_is_a_400_status(kubesim):
    code, body = await _call(
        kubesim.admin(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        data=b"[1, 2]",
        headers={"Content-Type": "application/json"},
    )
    assert code == 400
    _is_status(body, 400, "BadRequest")


async def test_oversized_body_is_a_413_status(kubesim):
    big = b'{"metadata": {"name": "big"}, "data": {"x": "' + b"a" * (4 * 1024 * 1024) + b'"}}'
    code, body = await _call(
        kubesim.admin(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        data=big,
        headers={"Content-Type": "application/json"},
    )
    assert code == 413
    _is_status(body, 413, "RequestEntityTooLarge")


async def test_wrong_token_is_a_401_status(kubesim):
    server, ctx, _ = _tls(kubesim.limited())
    async with aiohttp.ClientSession() as s:
        async with s.get(server + "/api/v1/namespaces", ssl=ctx, headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401
            _is_status(await r.json(), 401, "Unauthorized")
        async with s.get(server + "/api/v1/namespaces", ssl=ctx) as r:
            assert r.status == 401


async def test_invalid_name_is_a_422_status(kubesim):
    code, body = await _call(
        kubesim.admin(), "POST", "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "Not_Valid"}}
    )
    assert code == 422
    _is_status(body, 422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"


async def test_bad_selector_and_limit_are_400(kubesim):
    code, body = await _call(kubesim.admin(), "GET", "/api/v1/configmaps?labelSelector=a%20in%20(")
    assert code == 400
    code, body = await _call(kubesim.admin(), "GET", "/api/v1/pods?fieldSelector=spec.bogus%3Dx")
    assert code == 400 and "field label not supported" in body["message"]
    code, body = await _call(kubesim.admin(), "GET", "/api/v1/pods?limit=lots")
    assert code == 400


async def test_unknown_patch_type_is_415(kubesim):
    code, body = await _call(
        kubesim.admin(), "PATCH", "/api/v1/namespaces/default", data=b"{}", headers={"Content-Type": "text/plain"}
    )
    assert code == 415
    _is_status(body, 415, "UnsupportedMediaType")


async def test_the_server_survives_all_of_it(kubesim):
    code, body = await _call(kubesim.admin(), "GET", "/api/v1/namespaces/default")
    assert code == 200 and body["metadata"]["name"] == "default"
