"""HTTP/2 to the API server (scaleagent.kube.http2): a real apiserver negotiates h2 and carries
several watches on one connection; kubesim (HTTP/1.1 only) makes the client fall back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path

import orjson
import pytest

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.errors import APIError
from scaleagent.kube.http2 import Http2Client, NotHttp2, alpn_context
from tests.helpers import KubesimProcess

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"


@pytest.fixture
def real_kubeconfig() -> Path:
    path = os.environ.get(E2E_ENV)
    if not path:
        pytest.skip(f"{E2E_ENV} is not set: no real cluster to test against")
    return Path(path)


async def _h2(kubeconfig: Path) -> tuple[Http2Client, KubeClient]:
    # Two loads: a client sets the protocols its TLS context offers. The KubeClient keeps to
    # HTTP/1.1, so that what each protocol makes of the same answers can be compared.
    creds = await load_credentials(kubeconfig=kubeconfig)
    h2c = Http2Client(creds.server, alpn_context(creds.ssl_context), creds.server_hostname)
    return h2c, KubeClient(await load_credentials(kubeconfig=kubeconfig), http2=False)


async def _auth(client: KubeClient) -> dict[str, str]:
    auth = await client.credentials.authorization()
    return {"accept": "application/json", **({"authorization": auth} if auth else {})}


async def test_kubesim_answers_http11_and_the_client_says_so(kubesim: KubesimProcess) -> None:
    h2c, client = await _h2(kubesim.admin(0))
    try:
        with pytest.raises(NotHttp2):
            await h2c.open()
        assert h2c.http2 is False
        assert h2c.connections == []
    finally:
        await h2c.close()
        await client.close()


@pytest.mark.e2e
async def test_watches_share_one_connection_and_deliver_raw_events(real_kubeconfig: Path) -> None:
    h2c, client = await _h2(real_kubeconfig)
    ns = f"h2-{uuid.uuid4().hex[:8]}"
    try:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        headers = await _auth(client)
        listed = await client.get(f"/api/v1/namespaces/{ns}/configmaps")
        rv = listed["metadata"]["resourceVersion"]
        kinds = ["configmaps", "secrets", "services", "pods", "serviceaccounts"]
        async with contextlib.AsyncExitStack() as stack:
            watches = [
                await stack.enter_async_context(
                    h2c.stream(
                        "GET",
                        f"/api/v1/namespaces/{ns}/{kind}",
                        params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "60"},
                        headers=headers,
                    )
                )
                for kind in kinds
            ]
            assert h2c.http2 is True
            assert len(h2c.connections) == 1 and len(h2c.connections[0].streams) == len(kinds)
            assert all(resp.status == 200 for resp in watches)
            for i in range(3):
                await client.request(
                    "POST", f"/api/v1/namespaces/{ns}/configmaps", body={"metadata": {"name": f"cm-{i}"}}
                )
            got: list[bytes] = []
            pending = b""
            chunks = watches[0].content.iter_any().__aiter__()
            while len(got) < 3:
                chunk = await asyncio.wait_for(chunks.__anext__(), 10)
                assert isinstance(chunk, bytes)
                *lines, pending = (pending + chunk).split(b"\n")
                # kube-root-ca.crt may land in the new namespace during the test: follow our own.
                got += [line for line in lines if line and b'"name":"cm-' in line]
            names = [orjson.loads(line)["object"]["metadata"]["name"] for line in got]
            assert [orjson.loads(line)["type"] for line in got] == ["ADDED"] * 3
            assert names == ["cm-0", "cm-1", "cm-2"]
        assert h2c.connections[0].streams == {}  # released streams leave the connection
    finally:
        await client.request("DELETE", f"/api/v1/namespaces/{ns}")
        await h2c.close()
        await client.close()


@pytest.mark.e2e
async def test_error_status_and_read_timeout(real_kubeconfig: Path) -> None:
    h2c, client = await _h2(real_kubeconfig)
    try:
        headers = await _auth(client)
        path = f"/api/v1/namespaces/default/configmaps/missing-{uuid.uuid4().hex[:8]}"
        with pytest.raises(APIError) as today:
            await client.get(path)
        async with h2c.stream("GET", path, headers=headers) as resp:
            over_h2 = APIError.from_response(resp.status, await resp.read())
        assert (over_h2.status, over_h2.reason) == (today.value.status, today.value.reason) == (404, "NotFound")
        # A watch on a namespace where nothing happens: silent, so the read times out.
        ns = f"quiet-{uuid.uuid4().hex[:8]}"
        rv = (await client.get("/api/v1/namespaces/default/configmaps"))["metadata"]["resourceVersion"]
        async with h2c.stream(
            "GET",
            f"/api/v1/namespaces/{ns}/configmaps",
            params={"watch": "1", "resourceVersion": rv},
            headers=headers,
            read_timeout=0.5,
        ) as resp:
            assert resp.status == 200
            with pytest.raises(TimeoutError):
                async for _ in resp.content.iter_any():
                    pass
    finally:
        await h2c.close()
        await client.close()
