"""The reflector's LIST, against kubesim served in-process: every page of one list on one
connection (closed after the last page), and the bytes handed on equal the server's objects."""

from __future__ import annotations

import ssl
from types import SimpleNamespace

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import Credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.events import ADDED, SNAPSHOT_BEGIN, SNAPSHOT_END
from scaleagent.kube.reflector import Reflector
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer

CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)


@pytest.fixture
async def served():
    """A cluster with 25 ConfigMaps, its server, and the client ports of the requests it took."""
    c = Cluster("t")
    token = c.add_token("admin", ("system:masters", "system:authenticated"))
    for i in range(25):
        c.create(c.rt("", "v1", "configmaps"), "default", {"metadata": {"name": f"cm-{i:02d}"}, "data": {"i": str(i)}})
    peers: list[tuple[str, int]] = []

    @web.middleware
    async def note_peer(request: web.Request, handler):
        peers.append(request.transport.get_extra_info("peername"))
        return await handler(request)

    server = APIServer(c)
    server.app.middlewares.append(note_peer)
    async with TestServer(server.app) as ts:
        cfg = SimpleNamespace(api_key={"BearerToken": f"Bearer {token}"}, refresh_api_key_hook=None)
        client = KubeClient(Credentials(str(ts.make_url("")).rstrip("/"), ssl.create_default_context(), None, "t", cfg))
        try:
            yield c, client, peers
        finally:
            await client.close()


async def test_all_pages_of_a_list_share_one_connection_that_closes_after(served):
    c, client, peers = served
    events = []

    async def handler(batch):
        events.extend(batch)

    r = Reflector(client, CONFIGMAPS, handler, account="a", page_size=4)
    rv = await r._list()
    assert len(peers) == 7  # 25 objects in pages of 4
    assert len(set(peers)) == 1
    rv_again = await r._list()  # the next list opens a new connection: the last one was closed
    assert len(set(peers)) == 2 and rv_again == rv
    types = [e.type for e in events[: len(events) // 2]]
    assert types[0] == SNAPSHOT_BEGIN and types[-1] == SNAPSHOT_END and types.count(ADDED) == 25
    assert events[len(events) // 2 - 1].resource_version == rv


async def test_listed_bytes_are_the_servers_objects_with_their_type(served):
    c, client, _ = served
    events = []

    async def handler(batch):
        events.extend(e for e in batch if e.type == ADDED)

    await Reflector(client, CONFIGMAPS, handler, account="a", page_size=10)._list()
    stored = (await client.get(CONFIGMAPS.path("default")))["items"]
    by_name = {o["metadata"]["name"]: o for o in stored}
    assert len(events) == len(by_name) == 25
    for e in events:
        obj = orjson.loads(e.object)
        assert (obj["apiVersion"], obj["kind"]) == ("v1", "ConfigMap")
        assert {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} == by_name[e.name]
        assert e.resource_version == by_name[e.name]["metadata"]["resourceVersion"]
