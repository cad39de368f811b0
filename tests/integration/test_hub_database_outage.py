"""The hub's database goes away for a few seconds at the moment an account becomes ACTIVE: the
write is tried again until the database answers, so the account does not stay ACTIVATING (it
did, for good, until the hub restarted). In the middle of a DELETE, the account the database
kept is DELETE_FAILED (it stayed ACTIVE with no agent), and a DELETE again removes it; in the
middle of a deactivation, the
account ends INACTIVE once the database is back. And a write the registry queued before a DELETE
does not recreate the deleted row (found by tests/drills/test_drill_dynamic_accounts.py)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.e2e.e2e_stack import through
from tests.helpers import HubProcess, TcpProxy, dynamic_hub_and_agent


def via(url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    return urlunsplit(
        parts._replace(netloc=f"{credentials}@127.0.0.1:{proxy.port}" if credentials else f"127.0.0.1:{proxy.port}")
    )


@pytest.fixture(params=["postgresql", "mariadb"])
def database(request):
    url = request.getfixturevalue("postgres_db" if request.param == "postgresql" else "mariadb_db")
    parts = urlsplit(url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or (5432 if request.param == "postgresql" else 3306))
    yield via(url, proxy), proxy
    proxy.close()


def test_an_account_activated_during_a_database_outage_becomes_active_once_it_is_back(database, kubesim, tmp_path):
    db_url, db = database
    server = urlsplit(__import__("yaml").safe_load(kubesim.admin(1).read_text())["clusters"][0]["cluster"]["server"])
    cluster = TcpProxy(server.hostname or "127.0.0.1", server.port or 443)
    cluster.refusing = True  # the agent takes the account but cannot reach its cluster yet
    hub, agent = dynamic_hub_and_agent(tmp_path, db_url, retry_seconds=2)
    try:
        kubeconfig = through(kubesim.admin(1), cluster, tmp_path / "cluster.yaml")
        assert (
            hub.post("/armory/accounts", [{"name": "dyn", "kubeconfigFile": str(kubeconfig), "kinds": ["Namespace"]}])[
                0
            ]
            == 201
        )
        assert hub_patch(hub, [{"name": "dyn", "state": "ACTIVE"}]) == 202
        hub.wait_until("/armory/accounts/dyn", lambda d: d["state"] == "ACTIVATING", what="ACTIVATING")

        db.refusing = True  # the database goes away...
        db.cut()
        cluster.refusing = False  # ...just as the agent reaches the cluster and reports it watched
        agent.wait_health(
            lambda d: any(a["name"] == "dyn" and a["state"] == "watching" for a in d["accounts"]),
            what="the account watching",
        )
        hub.wait_log(r"dynamic accounts: .*(described failed|trying again)", what="the failed write logged")
        db.refusing = False  # ...and comes back

        hub.wait_until("/armory/accounts/dyn", lambda d: d["state"] == "ACTIVE", timeout=60, what="ACTIVE")
    finally:
        agent.stop()
        hub.stop()
        cluster.close()


def test_a_deactivation_the_database_interrupts_ends_inactive_once_it_is_back(database, kubesim, tmp_path):
    """PATCH INACTIVE: the agent stops following the account, and the database goes away before
    the hub records INACTIVE. The write is tried again until the database answers. It was
    dropped (a traceback in the log), and the account stayed DEACTIVATING until the periodic
    repair failed it and a retry ended it, two retryFrequencySeconds later.

    The agent is frozen (SIGSTOP) while the hub awaits its answer, so that the database can go
    away exactly then."""
    import signal

    db_url, db = database
    hub, agent = dynamic_hub_and_agent(tmp_path, db_url, retry_seconds=60)
    try:
        assert (
            hub.post(
                "/armory/accounts",
                [{"name": "paused", "kubeconfigFile": str(kubesim.admin(1)), "kinds": ["Namespace"]}],
            )[0]
            == 201
        )
        assert hub_patch(hub, [{"name": "paused", "state": "ACTIVE"}]) == 202
        hub.wait_until("/armory/accounts/paused", lambda d: d["state"] == "ACTIVE", what="ACTIVE")

        agent.proc.send_signal(signal.SIGSTOP)  # it will answer DeleteAccounts once let go
        try:
            assert hub_patch(hub, [{"name": "paused", "state": "INACTIVE"}]) == 202
            hub.wait_log(r"asking agent \S+ to delete account\(s\) paused", what="DeleteAccounts sent")
            db.refusing = True  # the database goes away while the agent stops following it
            db.cut()
        finally:
            agent.proc.send_signal(signal.SIGCONT)
        hub.wait_log(r"deactivat.*(trying again until the database answers|failed)", what="the failed write")
        db.refusing = False

        hub.wait_until("/armory/accounts/paused", lambda d: d["state"] == "INACTIVE", timeout=20, what="INACTIVE")
        assert hub.get("/api/v1/accounts/paused")[0] == 404  # no agent follows it
    finally:
        agent.stop()
        hub.stop()


class RowLock:
    """A transaction of the test's own, straight to the database, holding one account's row
    (SELECT ... FOR UPDATE) until released: a write of the hub to that row waits, and the
    registry's writes queued behind it wait too, as behind a slow database."""

    def __init__(self, url: str, name: str) -> None:
        import threading

        self.url, self.name = url, name
        self.locked, self.released = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.locked.wait(30), "the row lock was not taken"

    def _run(self) -> None:
        import asyncio

        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        from scaleagent.hub.store import async_url

        async def hold() -> None:
            engine = create_async_engine(async_url(self.url))
            try:
                async with engine.connect() as conn:
                    transaction = await conn.begin()
                    await conn.execute(
                        text("SELECT id FROM kubesvc_accounts WHERE name = :name FOR UPDATE"), {"name": self.name}
                    )
                    self.locked.set()
                    await asyncio.to_thread(self.released.wait, 60)
                    await transaction.rollback()
            finally:
                await engine.dispose()

        asyncio.run(hold())

    def release(self) -> None:
        self.released.set()
        self.thread.join(30)


def test_a_deleted_account_is_not_recreated_by_a_write_queued_before_its_delete(database, kubesim, tmp_path):
    """The registry records what agents say in the background, in order. A write queued for an
    account (its agent stopped following it) that ran after the account's DELETE recreated its
    row, as if an agent's own file named it: the name was taken for good (POST 409, DELETE 404).
    The drill under dynamic-account churn met it once in seven runs.

    The DELETE marks the row DELETING first, so the lock is taken once it has (the agent frozen
    meanwhile, so that it lets the account go only once the lock is held)."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    db_url, db = database
    direct = via(db_url, db).replace(f":{db.port}", f":{db.target[1]}")
    hub, agent = dynamic_hub_and_agent(tmp_path, db_url, retry_seconds=5)
    lock = None
    try:
        accounts = [
            {"name": n, "kubeconfigFile": str(kubesim.admin(1)), "kinds": ["Namespace"]} for n in ("blocker", "reused")
        ]
        assert hub.post("/armory/accounts", accounts)[0] == 201
        assert hub_patch(hub, [{"name": n, "state": "ACTIVE"} for n in ("blocker", "reused")]) == 202
        hub.wait_until(
            "/armory/accounts?state=ACTIVE",
            lambda d: {"blocker", "reused"} <= {a["name"] for a in d},
            what="both ACTIVE",
        )

        with ThreadPoolExecutor(1) as pool:
            agent.proc.send_signal(signal.SIGSTOP)  # it answers DeleteAccounts once let go
            try:
                deleting = pool.submit(hub_request, hub, "DELETE", "/armory/accounts/blocker", None)
                hub.wait_log(r"asking agent \S+ to delete account\(s\) blocker", what="DeleteAccounts sent")
                assert hub.json("/armory/accounts/blocker")["state"] == "DELETING"
                lock = RowLock(direct, "blocker")
            finally:
                agent.proc.send_signal(signal.SIGCONT)
            # The registry's write for 'blocker' (its agent stopped following it) waits on the
            # lock, and so does the deletion of its row...
            hub.wait_until(
                "/api/v1/accounts",
                lambda d: "blocker" not in {a["name"] for a in d},
                what="blocker let go by its agent",
            )
            # ...and the write for 'reused', queued behind it, runs after 'reused' is deleted.
            assert hub_request(hub, "DELETE", "/armory/accounts/reused", None) == 200
            lock.release()
            assert deleting.result(timeout=60) == 200

        assert hub.post("/armory/accounts", [{"name": "reused"}])[0] == 201  # the name is free again
    finally:
        if lock is not None:
            lock.release()
        agent.stop()
        hub.stop()


def hub_patch(hub: HubProcess, body: list) -> int:
    return hub_request(hub, "PATCH", "/armory/accounts", body)


def test_an_account_whose_delete_the_database_refused_is_delete_failed(database, kubesim, tmp_path):
    """DELETE marks the accounts DELETING, tells the agents to stop, then deletes the rows. If the
    database goes away in between, the answer is a 503 and the account, which no agent follows
    any more, is DELETE_FAILED once the database is back (Armory's state for it; it used to stay
    ACTIVE with no agent and no objects, for good); a DELETE again removes it.

    The agent is frozen (SIGSTOP) while the hub awaits its answer, so that the database can go
    away exactly between the two steps."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    db_url, db = database
    hub, agent = dynamic_hub_and_agent(tmp_path, db_url, retry_seconds=1)
    try:
        assert (
            hub.post(
                "/armory/accounts", [{"name": "kept", "kubeconfigFile": str(kubesim.admin(1)), "kinds": ["Namespace"]}]
            )[0]
            == 201
        )
        assert hub_patch(hub, [{"name": "kept", "state": "ACTIVE"}]) == 202
        hub.wait_until("/armory/accounts/kept", lambda d: d["state"] == "ACTIVE", what="ACTIVE")
        hub.wait_until("/api/v1/accounts/kept/objects?kind=Namespace", lambda d: d["items"], what="its objects")

        agent.proc.send_signal(signal.SIGSTOP)  # it will answer DeleteAccounts once let go
        with ThreadPoolExecutor(1) as pool:
            try:
                deleting = pool.submit(hub_request, hub, "DELETE", "/armory/accounts/kept", None)
                hub.wait_log(r"asking agent \S+ to delete account\(s\) kept", what="DeleteAccounts sent")
                db.refusing = True  # the database goes away while the agent stops following it
                db.cut()
            finally:
                agent.proc.send_signal(signal.SIGCONT)
            status = deleting.result(timeout=60)
        db.refusing = False

        if status == 200:  # the rows went first: the account is gone, and so are its objects
            hub.wait_until("/api/v1/accounts", lambda d: "kept" not in {a["name"] for a in d}, what="no objects")
            assert hub.get("/armory/accounts/kept")[0] == 404
        else:  # refused: the account is DELETE_FAILED (now, or by the repair once the database is back)
            assert status == 503, status
            hub.wait_until(
                "/armory/accounts/kept", lambda d: d["state"] == "DELETE_FAILED", timeout=30, what="DELETE_FAILED"
            )
            assert hub_request(hub, "DELETE", "/armory/accounts/kept", None) == 200
            assert hub.get("/armory/accounts/kept")[0] == 404
    finally:
        agent.stop()
        hub.stop()


def hub_request(hub: HubProcess, method: str, path: str, body: object) -> int:
    """The status of a request with a JSON body (or none), as a user's client gets it."""
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        hub.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def test_an_agent_that_came_during_an_outage_is_asked_for_its_account_once_the_database_is_back(
    database, tmp_path
):
    """Issue 29: an agent whose claim failed during an outage was asked for the account again
    only when its timer ran out (up to 30 s), so the account stayed DISCONNECTED that much longer
    after the database was back, and past the grace period would have been ORPHANED. It is asked
    again as soon as the database answers, well before its timer runs out."""
    import asyncio

    from scaleagent.hub.agents.registry import Registry, Session
    from scaleagent.hub.cache.cache import Cache
    from scaleagent.hub.replicas.assignments import Assignments
    from scaleagent.hub.replicas.forwarding import Forwarder
    from scaleagent.hub.replicas.peers import Peer, PeerSet
    from scaleagent.hub.store import Store, StoreError
    from scaleagent.hub.store.shared import SharedStore
    from tests.helpers import free_port

    db_url, db = database
    store = await Store.open(db_url)
    me = Peer("hub-a", f"http://127.0.0.1:{free_port()}")
    assignments = Assignments(SharedStore(store), PeerSet(me), Forwarder(me.id), period=60, missed_periods=3)
    registry = Registry(Cache(), grace_seconds=60, replica=me.id, store=store)
    registry.store_retry_seconds = 30.0  # as after five failures in a row: the timer waits its longest
    assignments.attach(registry)
    await registry.start(await assignments.start())
    asked = asyncio.Event()
    agent = registry.open(Session(agent_id="agent-1", zone_id="", agent_version="t", peer="p", replica=me.id))
    agent.control = lambda m: asked.set() if m.WhichOneof("message") == "resync" else None
    cluster = ("https://10.0.0.1:6443", "AA:01")
    try:
        db.refusing = True
        db.cut()
        with pytest.raises(StoreError):  # what the agent's link gets when it describes the account
            await registry.admit(agent, "outage-claim", *cluster)
        timer = registry.ask_again_later(agent, "outage-claim", "the hub cannot reach its database")
        db.refusing = False

        await asyncio.wait_for(asked.wait(), timer / 2)  # asked because the database answers, not by the timer
        assert await registry.admit(agent, "outage-claim", *cluster) is None
    finally:
        db.refusing = False
        await assignments.stop()
        await registry.stop()
        await store.close()
