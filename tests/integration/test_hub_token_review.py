"""Kubernetes tokens as logins to the hub's HTTP API: the hub asks its own cluster (TokenReview)
who a bearer token is, and that user's groups decide what it may do.

On kubesim (served in this process, so that the test can mint ServiceAccount tokens) and on the
real control plane of the e2e suite, where the token comes from the TokenRequest API, as
`kubectl create token` gets it: the real server is the judge of what a token means.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer

from ..helpers import HubProcess, free_port, write_yaml

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"
NAMESPACE = "ci"


@dataclass
class Kube:
    name: str
    kubeconfig: Path
    mint: Callable[[str], str]  # a token for ServiceAccount <name> in NAMESPACE


@pytest.fixture(params=["kubesim", pytest.param("real", marks=pytest.mark.e2e)])
async def kube(request, tmp_path) -> AsyncIterator[Kube]:
    if request.param == "real":
        path = os.environ.get(E2E_ENV)
        if not path:
            pytest.skip(f"{E2E_ENV} is not set: no real cluster to test against")
        yield await asyncio.to_thread(_real, Path(path))
        return
    cluster = Cluster("review")
    admin = cluster.add_token("admin", ("system:masters", "system:authenticated"))
    runner = web.AppRunner(APIServer(cluster).app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    kubeconfig = write_yaml(
        tmp_path / "kubesim.yaml",
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "admin", "user": {"token": admin}}],
            "contexts": [{"name": "k", "context": {"cluster": "k", "user": "admin"}}],
            "current-context": "k",
        },
    )

    def mint(name: str) -> str:
        return cluster.add_service_account_token(NAMESPACE, name)

    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {admin}"}) as http:
        base = f"http://127.0.0.1:{port}/api/v1"
        await http.post(
            f"{base}/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        for name in ("deployer", "platform-bot"):
            async with http.post(
                f"{base}/namespaces/{NAMESPACE}/serviceaccounts",
                json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            ) as r:
                assert r.status == 201, await r.text()
    yield Kube("kubesim", kubeconfig, mint)
    await runner.cleanup()


def _real(admin: Path) -> Kube:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api = client.CoreV1Api(config.new_client_from_config(str(admin)))
    try:
        api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    except ApiException as e:
        assert e.status == 409, e
    for name in ("deployer", "platform-bot"):
        try:
            api.create_namespaced_service_account(
                NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            )
        except ApiException as e:
            assert e.status == 409, e

    def mint(name: str) -> str:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        return api.create_namespaced_service_account_token(name, NAMESPACE, request).status.token

    return Kube("real", admin, mint)


@pytest.fixture
async def hub(kube, tmp_path) -> AsyncIterator[HubProcess]:
    config = write_yaml(
        tmp_path / "hub.yaml",
        {
            "server": {"grpcPort": 0, "httpPort": 0},
            "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
            "kubernetes": {"kubeconfigFile": str(kube.kubeconfig)},
            "auth": {
                "tokenReview": {"enabled": True, "cacheSeconds": 0},
                "admins": {"users": [f"system:serviceaccount:{NAMESPACE}:platform-bot"]},
            },
        },
    )
    process = await asyncio.to_thread(HubProcess, config)
    yield process
    await asyncio.to_thread(process.stop)


async def call(hub: HubProcess, method: str, path: str, token: str | None, body: object = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.request(method, hub.url + path, json=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def test_a_service_account_token_logs_in_as_its_service_account(kube, hub):
    token = await asyncio.to_thread(kube.mint, "deployer")
    status, me = await call(hub, "GET", "/api/v1/whoami", token)
    assert status == 200, me
    assert me["name"] == f"system:serviceaccount:{NAMESPACE}:deployer"
    assert f"system:serviceaccounts:{NAMESPACE}" in me["groups"] and me["method"] == "tokenReview"
    assert me["admin"] is False
    # Not an admin: the accounts API says what is missing.
    status, body = await call(hub, "POST", "/armory/accounts", token, [{"name": "from-ci"}])
    assert status == 403 and "admin" in body["error"], body
    assert token not in "\n".join(hub.log)


async def test_an_admin_by_user_name_manages_accounts(kube, hub):
    token = await asyncio.to_thread(kube.mint, "platform-bot")
    status, created = await call(hub, "POST", "/armory/accounts", token, [{"name": "from-bot"}])
    assert status == 201, created
    line = await asyncio.to_thread(hub.wait_log, r'"audit":"POST /armory/accounts".*platform-bot.*"status":201', 10)
    assert '"method":"tokenReview"' in line


async def test_a_token_the_cluster_does_not_know_is_a_401(kube, hub):
    status, body = await call(hub, "GET", "/api/v1/accounts", "not-a-kubernetes-token")
    assert status == 401 and "not valid" in body["error"], body
    status, body = await call(hub, "GET", "/api/v1/accounts", None)
    assert status == 401 and "log in" in body["error"], body
