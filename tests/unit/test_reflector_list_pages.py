"""The reflector's LIST, against kubesim served in-process: every page of one list on one
connection (closed after the last page), and the bytes handed on equal the server's objects."""

from __future__ import annotations

import asyncio
import ssl
from types import SimpleNamespace

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import Credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.errors import APIError
from scaleagent.kube.events import ADDED, SNAPSHOT_BEGIN, SNAPSHOT_END
from scaleagent.kube.reflector import Reflector
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer

CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)


class Requests(list):
    """The client ports of the requests a server took, and a way to wait for the n-th."""

    def __init__(self) -> None:
        super().__init__()
        self.grew = asyncio.Event()

    def append(self, peer: tuple[str, int]) -> None:
        super().append(peer)
        self.grew.set()

    async def reach(self, n: int) -> None:
        while len(self) < n:
            self.grew.clear()
            await self.grew.wait()


@pytest.fixture
async def served():
    """A cluster with 25 ConfigMaps, its server, and the client ports of the requests it took."""
    c = Cluster("t")
    token = c.add_token("admin", ("system:masters", "system:authenticated"))
    for i in range(25):
        c.create(c.rt("", "v1", "configmaps"), "default", {"metadata": {"name": f"cm-{i:02d}"}, "data": {"i": str(i)}})
    peers = Requests()

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


async def test_all_pages_of_a_list_share_one_connection_apart_from_the_pool(served):
    # The pages of a list, and the lists that follow it soon, share one connection; requests
    # outside lists (watches, discovery) never travel on it, as its read buffer grew with the pages.
    c, client, peers = served
    events = []

    async def handler(batch):
        events.extend(batch)

    r = Reflector(client, CONFIGMAPS, handler, account="a", page_size=4)
    rv = await r._list()
    assert len(peers) == 7  # 25 objects in pages of 4
    assert len(set(peers)) == 1
    rv_again = await r._list()
    assert len(peers) == 14 and len(set(peers)) == 1 and rv_again == rv
    await client.get(CONFIGMAPS.path("default"), params={"limit": "1"})
    assert len(set(peers)) == 2
    types = [e.type for e in events[: len(events) // 2]]
    assert types[0] == SNAPSHOT_BEGIN and types[-1] == SNAPSHOT_END and types.count(ADDED) == 25
    assert events[len(events) // 2 - 1].resource_version == rv


async def test_a_lists_connection_closes_once_lists_are_over(served):
    c, client, peers = served

    async def handler(batch):
        pass

    closing = KubeClient(client.credentials, list_idle=0)  # closed as soon as no list runs
    try:
        r = Reflector(closing, CONFIGMAPS, handler, account="a", page_size=10)
        await r._list()
        await r._list()
        assert len(peers) == 6 and len(set(peers[:3])) == 1 and len(set(peers[3:])) == 1
        assert peers[0] != peers[3]
    finally:
        await closing.close()


async def test_a_clients_lists_share_at_most_two_connections(served):
    # Over HTTP/1.1 each connection costs a TLS handshake: four lists at once take turns on two.
    c, client, peers = served

    async def handler(batch):
        pass

    lists = [Reflector(client, CONFIGMAPS, handler, account="a", page_size=5)._list() for _ in range(4)]
    await asyncio.gather(*lists)
    assert len(peers) == 4 * 5 and len(set(peers)) == 2


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


async def test_the_next_page_is_asked_for_while_this_one_is_handed_on(served):
    # The server prepares page n+1 while the agent passes page n on: a handler that holds the
    # first page until the second has been requested would wait forever without it.
    c, client, peers = served
    seen = []

    async def handler(batch):
        if batch[0].type == ADDED and not seen:
            await peers.reach(2)
        seen.extend(e for e in batch if e.type == ADDED)

    r = Reflector(client, CONFIGMAPS, handler, account="a", page_size=10)
    await asyncio.wait_for(r._list(), 30)
    assert len(seen) == 25 and len(peers) == 3


def page_server(pages: dict[str, bytes]) -> web.Application:
    """An API server whose LIST pages are these bytes, by continue token ("" for the first)."""

    async def configmaps(request: web.Request) -> web.Response:
        return web.Response(body=pages[request.query.get("continue", "")], content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/configmaps", configmaps)
    return app


@pytest.fixture
async def odd_pages():
    typed = (
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"typed","resourceVersion":"3"}, "data":{"k":"v"}}'
    )
    pages = {
        "": b'{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"p2"},"items":['
        + typed
        + b', {"metadata":{"name":"spaced","namespace":"default","uid":"u2","resourceVersion":"4"} , "data":{}}]}',
        "p2": b'{"metadata":{"resourceVersion":"9"},"items":[null,{"metadata":{"name":7}},{"metadata":{"name":"last","resourceVersion":"5"}}]}',
        "bad": b'{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{}},]}',
    }
    async with TestServer(page_server(pages)) as ts:
        cfg = SimpleNamespace(api_key={}, refresh_api_key_hook=None)
        client = KubeClient(Credentials(str(ts.make_url("")).rstrip("/"), ssl.create_default_context(), None, "t", cfg))
        try:
            yield client, pages, typed
        finally:
            await client.close()


async def test_list_items_go_on_as_the_server_wrote_them_and_unreadable_ones_are_skipped(odd_pages, caplog):
    client, _, typed = odd_pages
    events = []

    async def handler(batch):
        events.extend(e for e in batch if e.type == ADDED)

    rv = await Reflector(client, CONFIGMAPS, handler, account="a", namespace="default")._list()
    assert rv == "9"
    assert [e.name for e in events] == ["typed", "spaced", "last"]
    assert events[0].object == typed  # a typed item (as custom resources' are): byte for byte
    assert events[1].object == (
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"spaced","namespace":"default","uid":"u2",'
        b'"resourceVersion":"4"} , "data":{}}'
    )  # the type spliced in front of the server's own bytes
    assert (events[1].uid, events[1].resource_version) == ("u2", "4")
    assert caplog.text.count("skipping a list item the agent cannot read") == 2  # null, and a name of 7


async def test_a_page_that_is_not_json_is_a_bad_response(odd_pages):
    client, pages, _ = odd_pages
    pages[""] = pages["bad"]

    async def handler(batch):
        pass

    with pytest.raises(APIError, match="could not be read") as e:
        await Reflector(client, CONFIGMAPS, handler, account="a", namespace="default")._list()
    assert e.value.reason == "BadResponse"
