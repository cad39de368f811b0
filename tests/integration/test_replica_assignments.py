"""A replica's claims on accounts, against a real database and a real peer's HTTP liveness check:
a live holder keeps its account (the other agent stands by, or is refused when it describes
another cluster under the name); a holder that refuses connections is taken over at once."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from scaleagent.hub.agents.registry import Registry, Session
from scaleagent.hub.cache.cache import Cache
from scaleagent.hub.replicas.assignments import Assignments
from scaleagent.hub.replicas.forwarding import Forwarder
from scaleagent.hub.replicas.peers import Peer, PeerSet
from scaleagent.hub.store import Store
from scaleagent.hub.store.shared import SharedStore
from tests.databases import emptied, run_async
from tests.helpers import free_port


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await Store.open(f"sqlite:///{tmp_path / 'hub.db'}") as opened:
        yield opened


async def replica(store: Store, name: str, port: int) -> Assignments:
    me = Peer(name, f"http://127.0.0.1:{port}")
    assignments = Assignments(SharedStore(store), PeerSet(me), Forwarder(name), period=60, missed_periods=3)
    await assignments.shared.heartbeat(name, me.base_url)
    return assignments


def session(agent: str) -> Session:
    return Session(agent_id=agent, zone_id="", agent_version="test", peer="test", replica="r")


async def live_health(port: int) -> web.AppRunner:
    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_a_live_holder_keeps_the_account_and_a_dead_one_is_taken_over(store: Store) -> None:
    port_a = free_port()
    a = await replica(store, "hub-a", port_a)
    b = await replica(store, "hub-b", free_port())
    await store.upsert_account("prod", kube_host="https://10.0.0.1:6443", cert_fingerprint="AA")
    runner = await live_health(port_a)
    try:
        assert await a.claim(session("agent-1"), "prod", 1, "https://10.0.0.1:6443", "AA") is None
        why = await b.claim(session("agent-2"), "prod", 1, "https://10.0.0.1:6443", "AA")
        assert why is not None and why.startswith("standing by:") and "hub-a" in why
        why = await b.claim(session("agent-3"), "prod", 1, "https://10.9.9.9:6443", "ZZ")
        assert why is not None and "already registered for another cluster" in why
    finally:
        await runner.cleanup()
    # hub-a no longer answers (killed): the next claim takes the account over.
    assert await b.claim(session("agent-2"), "prod", 1, "https://10.0.0.1:6443", "AA") is None
    holder = await b.holder("prod")
    assert holder is not None and (holder.replica, holder.agent) == ("hub-b", "agent-2")
    for r in (a, b):
        await r.forwarder.close()


@pytest.mark.parametrize("database", ["postgres_db", "mariadb_db"])
async def test_first_claims_of_many_accounts_at_once_all_win(request: pytest.FixtureRequest, database: str) -> None:
    """Three replicas whose agents all connect at once: every first claim lands, though MariaDB's
    locks on the gap where new rows go make concurrent first inserts deadlock (the loser runs again)."""
    url = emptied(request.getfixturevalue(database))
    async with await Store.open(url) as opened:
        replicas = [await replica(opened, f"hub-{i}", free_port()) for i in range(3)]
        try:
            claims = [
                r.claim(session(f"agent-{n}"), f"acct-{n}", 1, f"https://10.0.0.{n}:6443", "AA")
                for n in range(60)
                for r in [replicas[n % 3]]
            ]
            refusals = await asyncio.gather(*claims)
            assert refusals == [None] * 60
            rows = await SharedStore(opened).assignments()
            assert {(row.account, row.replica) for row in rows} == {(f"acct-{n}", f"hub-{n % 3}") for n in range(60)}
        finally:
            for r in replicas:
                await r.forwarder.close()


def test_sessions_that_end_while_the_hub_stops_start_no_database_work(postgres_db: str) -> None:
    """A hub stopping under load: its agents' sessions go on ending after the replica's parts
    stopped (their gRPC handlers finish as they are cancelled, some only as `asyncio.run` winds
    down). Each ending session used to start a write of the account's connections; one started
    then was still inside its transaction when asyncio closed the async generators left, from a
    task of its own, and the hub logged "anext(): asynchronous generator is already running" and
    "Method 'close()' can't be called here" a dozen times per stop. Now a leaving replica writes
    nothing more: its rows go at once, and the process ends without an error."""
    url = emptied(postgres_db)
    errors: list[str] = []

    async def hub_stopping_with_sessions_still_open() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(
            lambda _, context: errors.append(f"{context['message']}: {context.get('exception')!r}")
        )
        store = await Store.open(url)
        me = Peer("hub-a", f"http://127.0.0.1:{free_port()}")
        assignments = Assignments(SharedStore(store), PeerSet(me), Forwarder(me.id), period=60, missed_periods=3)
        registry = Registry(Cache(), grace_seconds=60, replica=me.id, store=store)
        assignments.attach(registry)
        await registry.start(await assignments.start())
        streaming = asyncio.Semaphore(0)

        async def agent_session(i: int) -> None:
            """As the hub's gRPC handler of one agent: the session ends when the handler is cancelled."""
            s = registry.open(Session(agent_id=f"agent-{i}", zone_id="", agent_version="t", peer="p", replica=me.id))
            try:
                assert await registry.admit(s, f"acct-{i}", "https://10.0.0.1:6443", "AA") is None
                registry.describe(
                    s,
                    f"acct-{i}",
                    api_host="https://10.0.0.1:6443",
                    fingerprint="AA",
                    server_version="v1.30.0",
                    agent_state="watching",
                    reason="",
                    kinds=["ConfigMap"],
                    properties={},
                )
                streaming.release()
                await asyncio.Event().wait()
            finally:
                registry.close(s)

        handlers = [loop.create_task(agent_session(i)) for i in range(20)]
        for _ in handlers:
            await streaming.acquire()
        assert len(await assignments.shared.assignments(me.id)) == 20
        # The hub stops its parts as Hub.stop does, the handlers still running.
        await registry.stop()
        await assignments.stop()
        await store.close()
        # Returning ends asyncio.run: it cancels the handlers, their sessions end, then it closes
        # every async generator still open.

    run_async(hub_stopping_with_sessions_still_open)
    gc.collect()  # a task that failed unseen says so when it is collected
    assert errors == []

    async def rows_left() -> int:
        async with await Store.open(url) as store:
            return len(await SharedStore(store).assignments())

    assert run_async(rows_left) == 0, "the stopped replica's accounts are free for the others at once"
