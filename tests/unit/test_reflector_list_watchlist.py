"""The reflector's streamed list (client-go's WatchList) against kubesim served in-process: the
same snapshot as a paged LIST, the watch going on from it on the same stream, and the fallback to
paged LISTs on a server that refuses or ignores the parameters."""

from __future__ import annotations

import asyncio
import ssl
from types import SimpleNamespace

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import Credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.events import ADDED, MODIFIED, SNAPSHOT_BEGIN, SNAPSHOT_END
from scaleagent.kube.reflector import Reflector
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer

CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)


def is_watch_list(request: web.Request) -> bool:
    return "sendInitialEvents" in request.query


async def serve(middleware=None, bookmark_interval: float = 60.0):
    c = Cluster("t")
    token = c.add_token("admin", ("system:masters", "system:authenticated"))
    for i in range(12):
        c.create(c.rt("", "v1", "configmaps"), "default", {"metadata": {"name": f"cm-{i:02d}"}, "data": {"i": str(i)}})
    server = APIServer(c, bookmark_interval=bookmark_interval)
    if middleware is not None:
        server.app.middlewares.append(middleware)
    ts = TestServer(server.app)
    await ts.start_server()
    cfg = SimpleNamespace(api_key={"BearerToken": f"Bearer {token}"}, refresh_api_key_hook=None)
    client = KubeClient(
        Credentials(str(ts.make_url("")).rstrip("/"), ssl.create_default_context(), None, "t", cfg), watch_list=None
    )
    return c, ts, client


async def stop(*tasks: asyncio.Task) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Recorder:
    """A handler keeping every event, that can wait for a condition on what it has seen."""

    def __init__(self) -> None:
        self.events: list = []
        self.batches: list[list] = []
        self._changed = asyncio.Condition()

    async def __call__(self, batch: list) -> None:
        self.batches.append(batch)
        self.events.extend(batch)
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self.events)), 10)


def snapshot(events: list) -> tuple[dict[str, dict], str]:
    """The objects (by name) between the last SNAPSHOT_BEGIN and the SNAPSHOT_END, and its version."""
    begin = max(i for i, e in enumerate(events) if e.type == SNAPSHOT_BEGIN)
    end = next(i for i, e in enumerate(events) if i > begin and e.type == SNAPSHOT_END)
    objects = {e.name: orjson.loads(e.object) for e in events[begin:end] if e.type == ADDED}
    return objects, events[end].resource_version


async def test_a_streamed_list_is_the_paged_lists_snapshot_then_the_watch_goes_on():
    c, ts, client = await serve()
    try:
        paged = Recorder()
        listed_rv = await Reflector(client, CONFIGMAPS, paged, account="a", page_size=5)._list()
        streamed = Recorder()
        r = Reflector(client, CONFIGMAPS, streamed, account="a")
        task = asyncio.create_task(r.run())
        await streamed.until(lambda evs: any(e.type == SNAPSHOT_END for e in evs))
        assert client.watch_list is None  # not refused: streamed lists stay on
        assert snapshot(streamed.events) == snapshot(paged.events)
        assert snapshot(streamed.events)[1] == listed_rv == r.resource_version and r.synced.is_set()
        assert [b for b in streamed.batches if any(e.type == SNAPSHOT_END for e in b)] == [[streamed.events[-1]]]
        # The raw bytes are the server's: what a GET of the object answers.
        one = await client.request("GET", CONFIGMAPS.path("default") + "/cm-03", accept="application/json")
        assert orjson.loads(next(e.object for e in streamed.events if e.name == "cm-03")) == one
        c.update(c.rt("", "v1", "configmaps"), "default", "cm-03", {**one, "data": {"i": "changed"}})
        await streamed.until(lambda evs: evs[-1].type == MODIFIED)
        assert orjson.loads(streamed.events[-1].object)["data"] == {"i": "changed"}
        assert r.relists == 0 and r.resource_version == streamed.events[-1].resource_version
        await stop(task)
    finally:
        await client.close()
        await ts.close()


async def test_a_server_that_refuses_streamed_lists_is_listed_in_pages_and_not_asked_again():
    asked = []

    @web.middleware
    async def old_server(request, handler):  # 1.19-1.26: resourceVersionMatch is forbidden on a watch
        if is_watch_list(request):
            asked.append(request.path)
            status = {"kind": "Status", "status": "Failure", "code": 422, "reason": "Invalid", "message": "no"}
            return web.json_response(status, status=422)
        return await handler(request)

    c, ts, client = await serve(old_server)
    try:
        tasks = []
        for _ in range(2):
            rec = Recorder()
            r = Reflector(client, CONFIGMAPS, rec, account="a", page_size=5)
            tasks.append(asyncio.create_task(r.run()))
            await rec.until(lambda evs: any(e.type == SNAPSHOT_END for e in evs))
            await asyncio.wait_for(r.synced.wait(), 10)
            objects, rv = snapshot(rec.events)
            assert len(objects) == 12 and rv == r.resource_version
            assert rec.events[0].type == SNAPSHOT_BEGIN and rec.events.count(rec.events[0]) == 1
        assert client.watch_list is False and len(asked) == 1
        await stop(*tasks)
    finally:
        await client.close()
        await ts.close()


async def test_a_server_that_ignores_streamed_lists_is_detected_and_listed_in_pages():
    @web.middleware
    async def ignoring_server(request, handler):  # an old server: unknown parameters are dropped
        if is_watch_list(request):
            query = {k: v for k, v in request.query.items() if k not in ("sendInitialEvents", "resourceVersionMatch")}
            request = request.clone(rel_url=request.rel_url.with_query(query))
        return await handler(request)

    c, ts, client = await serve(ignoring_server, bookmark_interval=0.2)
    try:
        rec = Recorder()
        r = Reflector(client, CONFIGMAPS, rec, account="a", page_size=5)
        task = asyncio.create_task(r.run())
        await rec.until(lambda evs: any(e.type == SNAPSHOT_END for e in evs))
        await asyncio.wait_for(r.synced.wait(), 10)
        # The ignored stream began a snapshot it never ended; the paged list began it again.
        assert [e.type for e in rec.events].count(SNAPSHOT_BEGIN) == 2
        objects, rv = snapshot(rec.events)
        assert len(objects) == 12 and rv == r.resource_version and client.watch_list is False
        await stop(task)
    finally:
        await client.close()
        await ts.close()


async def test_a_streamed_list_that_expires_midway_starts_over():
    first = []

    @web.middleware
    async def expiring(request, handler):  # the first streamed list: one object, then 410 Gone
        if is_watch_list(request) and not first:
            first.append(1)
            resp = web.StreamResponse()
            await resp.prepare(request)
            obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "gone", "resourceVersion": "1"}}
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            await resp.write(orjson.dumps({"type": "ADDED", "object": obj}) + b"\n")
            await resp.write(orjson.dumps({"type": "ERROR", "object": gone}) + b"\n")
            await resp.write_eof()
            return resp
        return await handler(request)

    c, ts, client = await serve(expiring)
    try:
        rec = Recorder()
        r = Reflector(client, CONFIGMAPS, rec, account="a", reconnect_delay=0.01)
        task = asyncio.create_task(r.run())
        await rec.until(lambda evs: any(e.type == SNAPSHOT_END for e in evs))
        objects, rv = snapshot(rec.events)
        assert "gone" not in objects and len(objects) == 12 and rv == r.resource_version
        assert r.relists == 1 and client.watch_list is None  # an expiry is no reason to give up streaming
        await stop(task)
    finally:
        await client.close()
        await ts.close()


async def test_a_metadata_only_streamed_list_hands_on_metadata_typed_as_the_kind():
    c, ts, client = await serve()
    try:
        rec = Recorder()
        r = Reflector(client, CONFIGMAPS, rec, account="a", metadata_only=True)
        task = asyncio.create_task(r.run())
        await rec.until(lambda evs: any(e.type == SNAPSHOT_END for e in evs))
        objects, rv = snapshot(rec.events)
        assert len(objects) == 12 and rv == r.resource_version and client.watch_list is None
        assert all(
            (o["apiVersion"], o["kind"], set(o)) == ("v1", "ConfigMap", {"apiVersion", "kind", "metadata"})
            for o in objects.values()
        )
        await stop(task)
    finally:
        await client.close()
        await ts.close()
