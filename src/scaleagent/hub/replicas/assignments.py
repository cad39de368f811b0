"""Which replica streams which account, kept in `kubesvc_assignments` and refreshed by a heartbeat.

One agent session streams an account at a time, across all replicas: the first replica whose
agent describes the account claims its row; an agent describing it elsewhere stands by (its hub
tells it so, and it stops watching) until the holder lets go. The holder lets go when its last
session serving the account ends (`connections` drops to 0: another replica may claim it while
the holder still serves its cache for the grace period), or when it dies: its heartbeat stops
(`kubesvc_replicas`), or it refuses connections when a claimer asks. Every heartbeat period each
replica refreshes its rows, forgets the replicas whose heartbeat stopped `missedPeriods` ago
(releasing their accounts and ending their tasks), and checks that the accounts it streams are
still its own: one taken over while it was cut off from the database is given up.

A replica that stops writes nothing more about its sessions once it begins to (`leaving`): its
`leave` frees all its rows at once, and a write started while the process winds down could still
be in flight when asyncio closes what is left (see `stop`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from ..agents.registry import STANDING_BY
from ..store import StoreError
from ..store.shared import AssignmentRow, SharedStore
from .forwarding import Forwarder
from .peers import Peer, PeerSet

if TYPE_CHECKING:
    from ..agents.registry import Registry, Session

log = logging.getLogger("scaleagent.hub.replicas")

LOCATE_SECONDS = 1.0
"""How long where an account is streamed is taken from memory before the database is asked again."""

RELEASED_PATH = "/armory/replicas/released"
"""Where a replica tells the others that accounts it streamed are free to take."""


class Assignments:
    """This replica's side of the assignments table; the registry asks it before an agent's
    account may stream (`claim`) and tells it when sessions come and go."""

    def __init__(
        self,
        shared: SharedStore,
        peers: PeerSet,
        forwarder: Forwarder,
        *,
        period: float,
        missed_periods: int,
    ) -> None:
        self.shared, self.peers, self.forwarder = shared, peers, forwarder
        self.me = peers.me
        self.period, self.missed_periods = period, missed_periods
        self.registry: Registry | None = None
        # Called with the ids of replicas found dead (after their rows were cleaned).
        self.on_dead: list[Callable[[list[str]], Awaitable[None]]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._located: dict[str, tuple[Peer | None, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.claims_lost = 0
        # Set when this replica begins to stop: from then on nothing is claimed or written.
        self._leaving = False

    def attach(self, registry: Registry) -> None:
        self.registry = registry
        registry.claims = self

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Say this replica is alive; returns the accounts the table says it streamed before a
        restart (the registry serves them from nothing until their agents come back)."""
        await self.shared.heartbeat(self.me.id, self.me.base_url)
        held = await self.shared.reset_connections(self.me.id)
        self._loop_task = asyncio.get_running_loop().create_task(self._beat_forever(), name="replica heartbeat")
        return held

    def leaving(self) -> None:
        """This replica begins to stop: from now on the sessions that end here are not written one
        by one (`stop` frees every row of this replica at once), and no account is claimed.

        Sessions go on ending after the gRPC server stopped (their handlers finish as they are
        cancelled), some after this object stopped and the database closed. Each used to start its
        own write of the account's connections; one started as `asyncio.run` wound down was still
        inside its transaction when asyncio closed every async generator left (the store's
        transaction is one) from a task of its own: two tasks drove one generator, and the hub
        logged "anext(): asynchronous generator is already running" and "Method 'close()' can't be
        called here" at every stop under load."""
        self._leaving = True

    async def stop(self) -> None:
        """Stop beating and leave: the accounts this replica streamed are free at once."""
        self.leaving()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.wait([self._loop_task])
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        try:
            accounts = [row.account for row in await self.shared.assignments(self.me.id)]
            await self.shared.leave(self.me.id)
            if accounts:
                await self._tell_released(accounts)
        except StoreError as e:
            log.warning("could not clear this replica's assignments at shutdown: %s", e)

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.period)  # the heartbeat period is the setting, not a wait for anything
            try:
                await self.beat()
            except StoreError as e:
                log.error("replica heartbeat: %s", e)

    async def beat(self) -> None:
        """One heartbeat: refresh, forget dead replicas, check the accounts this replica streams."""
        await self.shared.heartbeat(self.me.id, self.me.base_url)
        dead = await self.dead_replicas()
        if dead:
            released = await self.shared.forget_replicas(dead)
            self.forget_location()
            log.warning(
                "replica(s) %s stopped their heartbeat %gs ago or more: %d account(s) released",
                ", ".join(dead),
                self.period * self.missed_periods,
                len(released),
            )
            for callback in self.on_dead:
                await callback(dead)
            if self.registry is not None:
                for account in released:
                    self.registry.unblock(account)
        await self._check_held()

    async def dead_replicas(self) -> list[str]:
        limit = datetime.now(UTC) - timedelta(seconds=self.period * self.missed_periods)
        return [r.id for r in await self.shared.replicas() if r.heartbeat_at < limit and r.id != self.me.id]

    async def _check_held(self) -> None:
        """Give up accounts whose row another replica took; claim again rows that went missing
        (cleaned while this replica could not reach the database); wake the agents standing by
        for accounts whose row is gone."""
        registry = self.registry
        if registry is None or self._leaving:  # a leaving replica claims nothing back
            return
        rows = {row.account: row for row in await self.shared.assignments()}
        # Agents here standing by for an account no replica holds any more (its replica died and
        # another replica, noticing first, released it): they may claim it now.
        for name in registry.waiting():
            if name not in rows and not registry.holds(name):
                registry.unblock(name, standby_only=True)
        for name, record in list(registry.accounts.items()):
            if not registry.holds(name):
                continue
            row = rows.get(name)
            if row is not None and row.replica != self.me.id:
                self.claims_lost += 1
                registry.give_up(name, f"agent {row.agent} on hub replica {row.replica} streams it now")
            elif row is None and record.sessions:
                session = registry.sessions.get(next(iter(record.sessions)))
                if session is not None:
                    won, holder = await self.shared.claim(
                        name,
                        replica=self.me.id,
                        agent=session.agent_id,
                        session_id=session.id,
                        connections=len(record.sessions),
                    )
                    if not won:
                        registry.give_up(name, f"agent {holder.agent} on hub replica {holder.replica} now streams it")

    # --- what the registry asks -----------------------------------------------------------------

    async def claim(
        self, session: Session, account: str, connections: int, api_host: str = "", fingerprint: str = ""
    ) -> str | None:
        """Let `session` stream `account`; None if it may, else why it stands by (or, when the
        account stands for another cluster, why it is refused)."""
        if self._leaving:  # a row claimed now would outlive this replica's `leave`
            return f"{STANDING_BY} hub replica {self.me.id} is stopping"
        async with self._lock(account):
            return await self._claim(session, account, connections, api_host, fingerprint)

    def _lock(self, account: str) -> asyncio.Lock:
        """This replica's writes of one account's row, in the order they were asked for: a
        session that ends and one that takes over must not land as 1 then 0."""
        lock = self._locks.get(account)
        if lock is None:
            lock = self._locks[account] = asyncio.Lock()
        return lock

    async def _claim(
        self, session: Session, account: str, connections: int, api_host: str, fingerprint: str
    ) -> str | None:
        won, row = await self.shared.claim(
            account, replica=self.me.id, agent=session.agent_id, session_id=session.id, connections=connections
        )
        if not won and await self._is_dead(row.replica):
            log.warning("account %s: hub replica %s holding it does not answer; taking it over", account, row.replica)
            won, row = await self.shared.claim(
                account,
                replica=self.me.id,
                agent=session.agent_id,
                session_id=session.id,
                connections=connections,
                dead=[row.replica],
            )
        self.forget_location(account)
        if won:
            return None
        other = await self._other_cluster(account, api_host, fingerprint)
        if other:
            return f"{other}, served by agent {row.agent} on hub replica {row.replica}"
        return f"{STANDING_BY} agent {row.agent} on hub replica {row.replica} streams account {account!r}"

    async def _other_cluster(self, account: str, api_host: str, fingerprint: str) -> str:
        """Why the account's recorded cluster is not the one described ("" when it is, or unknown)."""
        stored = await self.shared.store.get_account(account)
        if stored is None or not stored.kube_host or not api_host:
            return ""
        same_host = stored.kube_host == api_host
        same_cert = not stored.cert_fingerprint or not fingerprint or stored.cert_fingerprint == fingerprint
        if same_host and same_cert:
            return ""
        return (
            f"account {account!r} is already registered for another cluster (API server {stored.kube_host}, "
            f"certificate fingerprint {stored.cert_fingerprint or 'unknown'}); this agent describes API server "
            f"{api_host} with fingerprint {fingerprint or 'unknown'}"
        )

    async def _is_dead(self, replica: str) -> bool:
        if replica == self.me.id:
            return False
        if replica in await self.dead_replicas():
            return True
        base_url = await self.base_url(replica)
        return base_url is None or not await self.forwarder.alive(base_url)

    async def base_url(self, replica: str) -> str | None:
        peer = self.peers.get(replica)
        if peer is not None:
            return peer.base_url
        for row in await self.shared.replicas():
            if row.id == replica:
                return row.base_url
        return None

    async def locate(self, account: str) -> Peer | None:
        """The other replica streaming `account`, or None (this one, or nobody). Answers are kept
        in memory for LOCATE_SECONDS (the seeds' "database table plus an in-memory map"): a read
        forwarded under load costs one query per second per account, not one per request."""
        now = time.monotonic()
        known = self._located.get(account)
        if known is not None and known[1] > now:
            return known[0]
        row = await self.shared.holder(account)
        peer = None
        if row is not None and row.replica != self.me.id:
            base_url = await self.base_url(row.replica)
            peer = None if base_url is None else Peer(row.replica, base_url)
        if len(self._located) > 100_000:
            self._located.clear()
        self._located[account] = (peer, now + LOCATE_SECONDS)
        return peer

    def forget_location(self, account: str | None = None) -> None:
        """Ask the database next time (an account moved, or its replica did not answer)."""
        if account is None:
            self._located.clear()
        else:
            self._located.pop(account, None)

    async def holder(self, account: str) -> AssignmentRow | None:
        return await self.shared.holder(account)

    def connections_changed(self, account: str, connections: int, agent: str = "") -> None:
        """A session serving `account` on this replica came or went (written in the background;
        not at all once the replica is leaving: `stop` frees its rows at once)."""
        if self._leaving:
            return
        self._spawn(self._connections(account, connections, agent))

    async def _connections(self, account: str, connections: int, agent: str) -> None:
        try:
            async with self._lock(account):
                # What holds when the write runs: a session may have taken the account since.
                record = self.registry.accounts.get(account) if self.registry is not None else None
                if record is not None and record.sessions:
                    connections = len(record.sessions)
                await self.shared.set_connections(account, self.me.id, connections, agent)
            if connections == 0:
                await self._tell_released([account])
        except StoreError as e:
            log.error("account %s: cannot record its connections: %s", account, e)

    async def release(self, account: str) -> bool:
        """The account's grace period ended here: free its row if it is still ours."""
        if self._leaving:
            return True  # `stop` frees every row of this replica
        try:
            released = await self.shared.release(account, self.me.id)
        except StoreError as e:
            log.error("account %s: cannot release it: %s", account, e)
            return True  # the heartbeat's check or the others' cleanup settles the row
        if released:
            await self._tell_released([account])
        return released

    async def _tell_released(self, accounts: list[str]) -> None:
        """Tell the other replicas at once, so that agents standing by there take over now rather
        than at their hub's next heartbeat."""
        body = orjson.dumps({"accounts": accounts})
        for peer in self.peers.others():
            try:
                await self.forwarder.request(
                    peer.id,
                    peer.base_url,
                    "POST",
                    RELEASED_PATH,
                    body=body,
                    headers={"content-type": "application/json"},
                    timeout=5.0,
                )
            except Exception as e:  # a peer that misses it learns at its next heartbeat
                log.info("could not tell replica %s that account(s) were released: %s", peer.id, e)

    def released_elsewhere(self, accounts: list[str]) -> None:
        """Another replica let these accounts go: agents standing by here may take them."""
        for account in accounts:
            self.forget_location(account)
        if self.registry is not None:
            for account in accounts:
                self.registry.unblock(account)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._leaving:
            coro.close()  # nothing is started once the replica is leaving: it would outlive `stop`
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        """Forget a finished background write, saying what went wrong if it failed unexpectedly
        (each handles the database's errors itself; anything else is a bug, logged, not lost)."""
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("replica assignments: a background write failed", exc_info=error)
