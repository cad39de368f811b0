"""Account ownership, refusals and the grace period, as the hub's registry decides them."""

from __future__ import annotations

import asyncio
import logging

from scaleagent.hub.agents.registry import ACTIVE, DISCONNECTED, ORPHANED, Registry, Session
from scaleagent.hub.auth.agents import AgentIdentity
from scaleagent.hub.cache.cache import Cache
from scaleagent.protocol import pb

CLUSTER_A = {"api_host": "https://10.0.0.1:6443", "fingerprint": "AA:01"}
CLUSTER_B = {"api_host": "https://10.0.0.2:6443", "fingerprint": "BB:02"}


def describe(registry: Registry, session: Session, name: str, cluster: dict) -> str | None:
    return registry.describe(
        session,
        name,
        server_version="v1.30.0",
        agent_state="watching",
        reason="",
        kinds=["ConfigMap"],
        properties={},
        **cluster,
    )


def session(registry: Registry, agent: str) -> Session:
    s = registry.open(Session(agent_id=agent, zone_id="", agent_version="test", peer="test", replica="r"))
    s.control = lambda message: s.__dict__.setdefault("sent", []).append(message)
    return s


def cached(cache: Cache, account: str, name: str = "cm") -> None:
    cache.apply(
        account,
        [
            pb.Event(
                type=pb.ADDED,
                account=account,
                version="v1",
                kind="ConfigMap",
                namespace="ns",
                name=name,
                resource_version="1",
                object=b'{"kind":"ConfigMap","metadata":{"name":"%s","namespace":"ns"}}' % name.encode(),
            )
        ],
    )


async def next_timers(loop: asyncio.AbstractEventLoop) -> None:
    """Let the timers already due run: a timer due now runs before one scheduled after it."""
    done = loop.create_future()
    loop.call_later(0, done.set_result, None)
    await done


async def test_another_cluster_under_a_registered_name_is_refused_and_the_first_keeps_it():
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    first, second = session(registry, "agent-1"), session(registry, "agent-2")
    assert describe(registry, first, "prod", CLUSTER_A) is None
    why = describe(registry, second, "prod", CLUSTER_B)
    assert why and "already registered for another cluster" in why and "10.0.0.1" in why
    assert registry.accounts["prod"].sessions == {first.id} and second.accounts == set()
    assert second.rejected == {"prod": why}


async def test_two_agents_of_the_same_cluster_both_serve_it():
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    a, b = session(registry, "agent-1"), session(registry, "agent-2")
    assert describe(registry, a, "prod", CLUSTER_A) is None and describe(registry, b, "prod", CLUSTER_A) is None
    assert registry.accounts["prod"].sessions == {a.id, b.id}


async def test_an_account_without_an_api_host_yet_is_neither_registered_nor_refused():
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    s = session(registry, "agent-1")
    assert describe(registry, s, "prod", {"api_host": "", "fingerprint": ""}) is None
    assert "prod" not in registry.accounts and s.accounts == set()


async def test_a_disconnected_account_is_served_during_the_grace_period_and_resumes_on_return():
    cache = Cache()
    registry = Registry(cache, grace_seconds=60, replica="r")
    s = session(registry, "agent-1")
    describe(registry, s, "prod", CLUSTER_A)
    cached(cache, "prod")
    registry.close(s)
    assert registry.accounts["prod"].state == DISCONNECTED and cache.query("prod")
    again = session(registry, "agent-1")
    assert describe(registry, again, "prod", CLUSTER_A) is None
    record = registry.accounts["prod"]
    assert record.state == ACTIVE and record.orphan_timer is None and cache.query("prod")


async def test_after_the_grace_period_the_account_is_orphaned_and_its_name_freed():
    cache = Cache()
    registry = Registry(cache, grace_seconds=0, replica="r")
    owner, waiting = session(registry, "agent-1"), session(registry, "agent-2")
    describe(registry, owner, "prod", CLUSTER_A)
    cached(cache, "prod")
    assert describe(registry, waiting, "prod", CLUSTER_B)  # refused while the first cluster holds the name
    registry.close(owner)
    await next_timers(asyncio.get_running_loop())
    assert registry.accounts["prod"].state == ORPHANED and cache.query("prod") == []
    # The refused agent is asked to describe the account again, and now gets it.
    assert [m.resync.account for m in waiting.sent if m.WhichOneof("message") == "resync"] == ["prod"]
    assert describe(registry, waiting, "prod", CLUSTER_B) is None
    assert registry.accounts["prod"].api_host == CLUSTER_B["api_host"]


async def test_an_account_the_agent_stops_following_leaves_the_cache_at_once():
    cache = Cache()
    registry = Registry(cache, grace_seconds=60, replica="r")
    s = session(registry, "agent-1")
    describe(registry, s, "prod", CLUSTER_A)
    cached(cache, "prod")
    registry.remove(s, "prod")
    assert "prod" not in registry.accounts and cache.query("prod") == []


async def test_only_an_agent_serving_an_account_can_give_it_up():
    cache = Cache()
    registry = Registry(cache, grace_seconds=60, replica="r")
    owner, other = session(registry, "agent-1"), session(registry, "agent-2")
    describe(registry, owner, "prod", CLUSTER_A)
    cached(cache, "prod")
    registry.close(owner)
    assert describe(registry, other, "prod", CLUSTER_B)  # refused
    registry.remove(other, "prod")
    assert registry.accounts["prod"].state == DISCONNECTED and cache.query("prod")


async def test_a_watching_account_keeps_only_the_kinds_and_namespaces_it_follows():
    cache = Cache()
    registry = Registry(cache, grace_seconds=60, replica="r")
    s = session(registry, "agent-1")
    describe(registry, s, "prod", CLUSTER_A)
    cached(cache, "prod", "kept")
    cache.apply(
        "prod",
        [
            pb.Event(
                type=pb.ADDED,
                account="prod",
                version="v1",
                kind="Secret",
                namespace="ns",
                name="gone",
                resource_version="2",
                object=b'{"kind":"Secret","metadata":{}}',
            )
        ],
    )
    cache.apply(
        "prod",
        [
            pb.Event(
                type=pb.ADDED,
                account="prod",
                version="v1",
                kind="ConfigMap",
                namespace="other",
                name="gone",
                resource_version="3",
                object=b'{"kind":"ConfigMap","metadata":{}}',
            )
        ],
    )
    registry.describe(
        s,
        "prod",
        server_version="v1.30.0",
        agent_state="watching",
        reason="",
        kinds=["ConfigMap"],
        properties={"namespaces": ["ns"]},
        **CLUSTER_A,
    )
    assert cache.counts("prod") == {"ConfigMap": 1}
    assert cache.get("prod", "ConfigMap", "ns", "kept") is not None


async def test_a_static_account_is_recorded_only_along_its_transitions(tmp_path, caplog):
    import logging

    from scaleagent.hub.states import AccountState
    from scaleagent.hub.store import Store

    store = await Store.open(f"sqlite:///{tmp_path / 'hub.db'}")
    registry = Registry(Cache(), grace_seconds=60, replica="r", store=store)
    await registry.start()
    try:
        session = registry.open(Session(agent_id="a", zone_id="", agent_version="t", peer="p", replica="r"))
        registry.describe(
            session,
            "static",
            api_host="https://k",
            fingerprint="AA",
            server_version="v1.30.0",
            agent_state="watching",
            reason="",
            kinds=["ConfigMap"],
            properties={},
        )
        await registry.writes_done()
        assert (await store.get_account("static")).state == "ACTIVE"
        record = registry.accounts["static"]
        record.stored = AccountState.INACTIVE  # as if its agent had dropped it
        record.api_host = "https://moved"
        with caplog.at_level(logging.ERROR, logger="scaleagent.hub.registry"):
            registry._record(record, AccountState.ORPHANED)  # INACTIVE -> ORPHANED: no agent can cause it
        await registry.writes_done()
        row = await store.get_account("static")
        assert row.state == "ACTIVE", "an illegal move is not written"
        assert row.kube_host == "https://moved", "what agents say of the account still is"
        assert "INACTIVE -> ORPHANED is not a move of a static account" in caplog.text
    finally:
        await registry.stop()
        await store.close()


async def test_a_second_agent_for_a_streamed_account_stands_by_and_takes_over_when_the_first_leaves():
    """Two agents streaming one account undo each other's changes in the cache: one streams, the
    other stands by (told so, it stops watching) and is asked back the moment the first leaves."""
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    first, second = session(registry, "agent-1"), session(registry, "agent-2")
    assert await registry.admit(first, "prod", CLUSTER_A["api_host"]) is None
    assert describe(registry, first, "prod", CLUSTER_A) is None
    why = await registry.admit(second, "prod", CLUSTER_A["api_host"])
    assert why is not None and why.startswith("standing by:") and "agent-1" in why
    assert registry.accounts["prod"].sessions == {first.id}
    assert "prod" not in second.accounts

    registry.close(first)
    assert [m.resync.account for m in second.sent if m.WhichOneof("message") == "resync"] == ["prod"]
    assert await registry.admit(second, "prod", CLUSTER_A["api_host"]) is None
    assert describe(registry, second, "prod", CLUSTER_A) is None
    assert registry.accounts["prod"].state == ACTIVE
    assert registry.accounts["prod"].sessions == {second.id}


async def test_only_agents_still_connected_and_still_standing_by_are_asked_back():
    """Agents standing by are asked back in the order they stood by; one that left meanwhile, or
    that streams the account already, is not asked."""
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    holder, gone, first, second = (session(registry, f"agent-{i}") for i in range(4))
    assert await registry.admit(holder, "prod", CLUSTER_A["api_host"]) is None
    describe(registry, holder, "prod", CLUSTER_A)
    for standby in (gone, first, second):
        assert (await registry.admit(standby, "prod", CLUSTER_A["api_host"]) or "").startswith("standing by:")
    registry.close(gone)
    order: list[str] = []
    for s in (first, second):
        s.control = lambda message, who=s.agent_id: order.append(f"{who}: {message.WhichOneof('message')}")

    registry.close(holder)
    assert order == ["agent-2: resync", "agent-3: resync"]
    assert not [m for m in getattr(gone, "sent", []) if m.WhichOneof("message") == "resync"]

    # agent-2 takes it; when it leaves, only agent-3 is asked back.
    assert await registry.admit(first, "prod", CLUSTER_A["api_host"]) is None
    describe(registry, first, "prod", CLUSTER_A)
    order.clear()
    registry.close(first)
    assert order == ["agent-3: resync"]


async def test_sessions_are_counted_per_agent_identity_as_they_open_and_close():
    """What `auth.agents.maxSessionsPerIdentity` is checked against, for every stream that opens."""
    registry = Registry(Cache(), grace_seconds=60, replica="r")

    def of(identity: str, agent: str) -> Session:
        grant = AgentIdentity(identity)
        return registry.open(Session(agent_id=agent, zone_id="", agent_version="t", peer="p", replica="r", grant=grant))

    a1, a2, b = of("A", "a-1"), of("A", "a-2"), of("B", "b-1")
    anonymous = session(registry, "anon")
    registry.open(a1)  # opened again: still one session
    assert [registry.sessions_of(i) for i in ("A", "B", "", "C")] == [2, 1, 1, 0]
    registry.close(a1)
    registry.close(a1)  # closed twice: counted once
    assert registry.sessions_of("A") == 1
    registry.close(a2)
    registry.close(anonymous)
    assert [registry.sessions_of(i) for i in ("A", "B", "")] == [0, 1, 0]
    registry.close(b)
    assert registry.sessions_of("B") == 0


async def test_giving_an_account_up_makes_its_agent_stand_by_and_drops_the_copy():
    cache = Cache()
    registry = Registry(cache, grace_seconds=60, replica="r")
    s = session(registry, "agent-1")
    assert await registry.admit(s, "prod", CLUSTER_A["api_host"]) is None
    describe(registry, s, "prod", CLUSTER_A)
    cached(cache, "prod")
    registry.give_up("prod", "agent agent-9 on hub replica r2 streams it now")
    assert "prod" not in registry.accounts and not cache.counts("prod")
    rejected = [m.account_rejected for m in s.sent if m.WhichOneof("message") == "account_rejected"]
    assert [r.name for r in rejected] == ["prod"] and "hub replica r2" in rejected[0].reason


async def test_an_account_the_database_could_not_claim_is_asked_for_again_later():
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    registry.store_retry_seconds = 0  # the first waits are 0 s, then still 0 s: no real time passes
    agent = session(registry, "agent-1")
    loop = asyncio.get_running_loop()

    assert registry.ask_again_later(agent, "prod", "the database is down") == 0
    assert agent.rejected["prod"] == "the database is down"
    await next_timers(loop)
    resyncs = [m.resync.account for m in agent.sent if m.WhichOneof("message") == "resync"]
    assert resyncs == ["prod"]

    # A second failure in a row waits twice as long; a claim that lands resets the count.
    registry.ask_again_later(agent, "prod", "the database is down")
    assert agent.store_failures["prod"] == 2
    assert await registry.admit(agent, "prod", CLUSTER_A["api_host"], CLUSTER_A["fingerprint"]) is None
    assert "prod" not in agent.store_failures

    # Settled meanwhile (described and served): the pending question is not asked.
    describe(registry, agent, "prod", CLUSTER_A)
    await next_timers(loop)
    assert [m.resync.account for m in agent.sent if m.WhichOneof("message") == "resync"] == ["prod"]


class Said(logging.Handler):
    """Counts the lines of the registry's log that contain `words` (the log is what an operator
    sees); `times(n)` waits until there were n."""

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words, self.count, self.changed = words, 0, asyncio.Condition()
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.count += 1
            self.loop.create_task(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def times(self, n: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.count >= n)


async def test_account_changes_made_while_the_database_is_locked_land_newest_last(tmp_path, monkeypatch):
    """At 2,000 sessions on SQLite the hub logged `database is locked` and dropped the account's
    write. A write the database cannot take now is run again until it lands, with the account's
    newest state: never an older one over it, never nothing."""
    import sqlite3

    from scaleagent.hub.store import Store
    from scaleagent.hub.store import store as store_module

    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 50)  # "locked" after 50 ms, not 5 s
    path = tmp_path / "hub.db"
    store = await Store.open(f"sqlite:///{path}")
    registry = Registry(Cache(), grace_seconds=60, replica="r", store=store)
    registry.write_retry_seconds, registry.write_retry_max_seconds = 0.05, 0.2
    said = Said("cannot record them in the database")
    logger = logging.getLogger("scaleagent.hub.registry")
    logger.addHandler(said)
    level, logger.level = logger.level, logging.DEBUG  # each refused attempt, not only the first
    other = sqlite3.connect(path, isolation_level=None)  # another connection writing for a long while
    try:
        await registry.start()
        agent = session(registry, "agent-1")
        other.execute("BEGIN IMMEDIATE")
        describe(registry, agent, "prod", CLUSTER_A)  # ACTIVE, served by agent-1
        await said.times(1)  # the write was refused while the lock is held...
        registry.remove(agent, "prod")  # ...the agent stops following it meanwhile: INACTIVE...
        await said.times(2)  # ...and that is refused too
        assert other.execute("SELECT count(*) FROM kubesvc_accounts").fetchone() == (0,)
        other.execute("ROLLBACK")

        await registry.writes_done()
        row = await store.get_account("prod")
        assert row is not None, "the account's record was lost"
        assert (row.state, row.kube_host, row.agent_id) == ("INACTIVE", CLUSTER_A["api_host"], "agent-1")
        assert registry.write_retries >= 1
    finally:
        other.close()
        logger.removeHandler(said)
        logger.level = level
        await registry.stop()
        await store.close()


async def test_a_write_the_database_refuses_for_good_is_logged_and_the_others_still_land(tmp_path, caplog):
    """An agent describing an API server address longer than the column: that account's write is
    refused every time, so it is dropped with the reason in the log; later accounts are recorded."""
    from scaleagent.hub.store import Store

    store = await Store.open(f"sqlite:///{tmp_path / 'hub.db'}")
    registry = Registry(Cache(), grace_seconds=60, replica="r", store=store)
    await registry.start()
    try:
        agent = session(registry, "agent-1")
        with caplog.at_level(logging.ERROR, logger="scaleagent.hub.registry"):
            describe(registry, agent, "huge", {"api_host": "https://" + "h" * 5000, "fingerprint": "AA"})
            describe(registry, agent, "fine", CLUSTER_B)
            await registry.writes_done()
        assert await store.get_account("huge") is None
        assert (await store.get_account("fine")).state == "ACTIVE"
        assert "account huge: the database refused to record state='ACTIVE', agent_id='agent-1'" in caplog.text
        assert "kube_host is 5008 characters long" in caplog.text
        assert registry.write_retries == 0
    finally:
        await registry.stop()
        await store.close()


async def test_the_accounts_services_rows_described_together_are_written_together_and_one_refusal_stays_alone(
    tmp_path, caplog
):
    """A hundred dynamic accounts described at once are recorded in a few transactions, not one
    each; an account whose values the database refuses is logged and dropped, and the others of
    its batch still land."""
    from scaleagent.hub.store import Store

    store = await Store.open(f"sqlite:///{tmp_path / 'hub.db'}")
    names = [f"dyn-{i:03d}" for i in range(100)]
    await store.create_accounts({name: {"source": "api", "state": "ACTIVATING"} for name in [*names, "huge"]})
    registry = Registry(Cache(), grace_seconds=60, replica="r", store=store)
    registry.managed.update([*names, "huge"])
    transactions = 0
    update_accounts = store.update_accounts

    async def counted(*args, **kwargs):
        nonlocal transactions
        transactions += 1
        return await update_accounts(*args, **kwargs)

    store.update_accounts = counted  # type: ignore[method-assign]
    await registry.start()
    try:
        agent = session(registry, "agent-1")
        with caplog.at_level(logging.ERROR, logger="scaleagent.hub.registry"):
            describe(registry, agent, "huge", {"api_host": "https://" + "h" * 5000, "fingerprint": "AA"})
            for name in names:
                describe(registry, agent, name, CLUSTER_B)
            await registry.writes_done()
        rows = {row.name: row for row in await store.list_accounts()}
        assert {(rows[n].kube_host, rows[n].agent_id, rows[n].state) for n in names} == {
            (CLUSTER_B["api_host"], "agent-1", "ACTIVATING")  # the identity recorded, the state left alone
        }
        assert rows["huge"].kube_host is None
        assert "account huge: the database refused to record" in caplog.text
        assert transactions < 25, f"{transactions} transactions for {len(names)} accounts"
    finally:
        await registry.stop()
        await store.close()


async def test_an_account_given_up_while_its_refused_batch_is_halved_is_not_written(tmp_path):
    """Its state is then the other replica's to write: a write of ours would put back this
    replica's agent over the holder's."""
    from scaleagent.hub.store import Store, StoreError

    store = await Store.open(f"sqlite:///{tmp_path / 'hub.db'}")
    names = [f"d{i}" for i in range(4)]
    await store.create_accounts({n: {"source": "api", "state": "ACTIVATING"} for n in names})
    registry = Registry(Cache(), grace_seconds=60, replica="r", store=store)
    registry.managed.update(names)
    update_accounts, calls = store.update_accounts, []

    async def refused_once(updates, **kwargs):
        calls.append(sorted(updates))
        if len(calls) == 1:
            registry.give_up("d3", "another replica's agent streams it")  # while the batch is in flight
            raise StoreError("refused")
        return await update_accounts(updates, **kwargs)

    store.update_accounts = refused_once  # type: ignore[method-assign]
    await registry.start()
    try:
        agent = session(registry, "agent-1")
        for n in names:
            describe(registry, agent, n, CLUSTER_B)
        await registry.writes_done()
        rows = {row.name: row for row in await store.list_accounts()}
        assert [rows[n].kube_host for n in names] == [CLUSTER_B["api_host"]] * 3 + [None]
    finally:
        await registry.stop()
        await store.close()
