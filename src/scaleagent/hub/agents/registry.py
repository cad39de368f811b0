"""Who is connected and which accounts they serve: sessions, account ownership and the grace period.

An account name stands for one cluster across the whole installation. The first agent to describe
it with an API host and certificate fingerprint claims it; another agent describing the same name
with another cluster is refused (as Clouddriver refuses it) until the first claim is gone. When
the last session serving an account ends, the account is still served from the cache for the
grace period, so an agent restart or a network blip loses nothing; after that it is ORPHANED and
its objects leave the cache.

Accounts are also recorded in the database (`kubesvc_accounts`): which cluster a name stands
for, which agent and zone serve it, and its state. A restarted hub reads the ACTIVE ones back as
DISCONNECTED, so a name keeps its cluster through the restart and is orphaned if no agent
returns within the grace period. Writes go through one background task, so the event path never
waits for the database; it keeps only the newest state of each account, and a write the database
could not take now (locked, busy, a deadlock, a lost connection) is run again with backoff until it
lands, so what is recorded is never an older state than what the registry last said, nor lost.

With agent identities (`auth.agents`, hub/auth/agents.py), a session carries the identity its
agent proved; an account outside that identity's accounts is refused, and an account is bound to
the first identity that streams it (`kubesvc_agent_bindings`, kept through restarts): another
identity's claim is refused before any of its events reach the cache, until an admin releases
the binding (`release_binding`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from ...kube.reflector import Backoff
from ...protocol import pb
from ...protocol.states import AgentAccountState
from ..auth.agents import AgentIdentity
from ..cache.cache import Cache
from ..states import AGENT_TRANSITIONS, AccountState, Presence
from ..store import AccountNotFound, Store, StoreError, StoreTransient
from ..store.bindings import BindingStore

log = logging.getLogger("scaleagent.hub.registry")

STANDING_BY = "standing by:"
"""How a refusal of an account that another agent streams begins (the agent stands by)."""

NO_ONE = "\0no-one"
"""A group no caller is in: the WRITE permission of an account only admins may use."""

# The registry's presence of an account; the lifecycle's words are AccountState's (hub/states.py).
ACTIVE, DISCONNECTED, ORPHANED = Presence.ACTIVE, Presence.DISCONNECTED, Presence.ORPHANED


class Claims(Protocol):
    """The replicas' referee (hub/replicas/assignments.py): which replica's agent streams an account."""

    async def claim(
        self, session: Session, account: str, connections: int, api_host: str = "", fingerprint: str = ""
    ) -> str | None: ...

    def connections_changed(self, account: str, connections: int, agent: str = "") -> None: ...

    async def release(self, account: str) -> bool: ...


@dataclass
class Session:
    """One live agent connection on this replica."""

    agent_id: str
    zone_id: str
    agent_version: str
    peer: str
    replica: str
    dynamic_accounts_enabled: bool = True
    # Who the agent proved to be (hub/auth/agents.py); None: not checked (in-process tests).
    grant: AgentIdentity | None = None
    # What the agent proved itself with (its token's hash, its certificate's CN), kept to check it
    # again when the identities change; and the generation of identities it was last checked against.
    proof: tuple[str | None, str | None] = (None, None)
    checked_generation: int = 0
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    connected_at: float = field(default_factory=time.time)
    accounts: set[str] = field(default_factory=set)
    rejected: dict[str, str] = field(default_factory=dict)
    # The refusal last sent to the agent for each account (sent once per reason; link.py).
    refused: dict[str, str] = field(default_factory=dict)
    # Accounts the database could not claim, and how many times in a row (the wait before asking again).
    store_failures: dict[str, int] = field(default_factory=dict)
    events: int = 0
    batches: int = 0
    dropped: int = 0
    operations_attached: bool = False
    # Sends a control message down this session's Caching stream (set by the gRPC service).
    control: Callable[[pb.CachingControl], None] | None = None
    # Sends an operation down the Operations stream; None while that stream is not attached.
    operate: Callable[[pb.Operation], None] | None = None
    # Ends the session, saying why (set by the gRPC service): POST /armory/agent/{id}/disconnect.
    end: Callable[[str], None] | None = None

    @property
    def identity(self) -> str:
        """The name of the agent identity this session proved ("" when not checked)."""
        return "" if self.grant is None else self.grant.name

    def allows(self, account: str) -> bool:
        """Whether this session's identity may serve `account` (always, without identities)."""
        return self.grant is None or not self.grant.configured or self.grant.allows_account(account)

    def info(self) -> dict[str, Any]:
        return {
            "agentId": self.agent_id,
            "identity": self.identity,
            "sessionId": self.id,
            "zoneId": self.zone_id,
            "agentVersion": self.agent_version,
            "replica": self.replica,
            "peer": self.peer,
            "connectedAt": _iso(self.connected_at),
            "accounts": sorted(self.accounts),
            "rejectedAccounts": dict(sorted(self.rejected.items())),
            "events": self.events,
            "operationsStream": self.operations_attached,
        }


@dataclass
class AccountRecord:
    """An account as agents described it, and who serves it now."""

    name: str
    api_host: str = ""
    fingerprint: str = ""
    server_version: str = ""
    agent_state: str = ""
    reason: str = ""
    kinds: list[str] = field(default_factory=list)
    # Of `kinds`, those whose watch the agent says is not established (listing, retrying).
    kinds_not_watching: list[str] = field(default_factory=list)
    properties: dict[str, Any] = field(default_factory=dict)
    zone_id: str = ""
    agent_id: str = ""
    sessions: set[str] = field(default_factory=set)
    state: Presence = ACTIVE
    # The lifecycle state last written for a static account (None: not written by this hub yet).
    stored: AccountState | None = None
    registered_at: float = field(default_factory=time.time)
    disconnected_at: float | None = None
    orphan_timer: asyncio.TimerHandle | None = None

    def same_cluster(self, api_host: str, fingerprint: str) -> bool:
        return (not self.api_host or not api_host or self.api_host == api_host) and (
            not self.fingerprint or not fingerprint or self.fingerprint == fingerprint
        )


# At most this many accounts' writes in one transaction: a lock on one row held by someone else
# then holds back this many writes, not every pending one.
WRITE_BATCH = 100


@dataclass
class _Write:
    """What is still to be recorded of one account: the newest values of the fields written, and
    whether its row was the accounts service's when they were asked for (then only updated, never
    created: a DELETE through the API before the write runs must not see its row come back)."""

    fields: dict[str, Any]
    managed: bool

    def then(self, newer: _Write) -> _Write:
        """This write followed by `newer`, as one: the newer value of every field wins. A write of a
        row the accounts service owns carries only the cluster's identity, never the state, zone or
        properties, so an older write's values of those are not carried into it."""
        if newer.managed:
            return _Write(dict(newer.fields), True)
        return _Write({**self.fields, **newer.fields}, False)


class Registry:
    def __init__(self, cache: Cache, *, grace_seconds: float, replica: str, store: Store | None = None) -> None:
        self.cache = cache
        self.grace_seconds = grace_seconds
        self.replica = replica
        self.store = store
        self.sessions: dict[str, Session] = {}
        self.accounts: dict[str, AccountRecord] = {}
        # The accounts still to be recorded, each with its newest values, in the order they were
        # first asked for; `_idle` is set while nothing is pending or being written.
        self._pending: dict[str, _Write] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        # The wait before writing again after the database could not take a write (doubling, jittered).
        self.write_retry_seconds = 0.5
        self.write_retry_max_seconds = 10.0
        # Writes the database could not take and that were run again (a figure for tests and metrics).
        self.write_retries = 0
        # Accounts given up to another replica since they were last recorded here: a write of theirs
        # in flight then is not run again if it fails.
        self._given_up: set[str] = set()
        # Names whose `state` column the dynamic-accounts service owns: the registry still records
        # their cluster's identity, never their state.
        self.managed: set[str] = set()
        # The `permissions` of those accounts as stored through the accounts API (`manage`): they,
        # not what an agent describes, are the account's permissions (an agent cannot widen them).
        self._stored_permissions: dict[str, dict[str, Any]] = {}
        # Called as listener(what, session, record) with what in "opened" (record None), "closed"
        # (record None), "described", "rejected" (a record standing for the refused claim, with the
        # reason) and "orphaned" (session None): how other parts of the hub follow agents and
        # accounts without the registry knowing them. A "described" record may be a stand-in that is
        # not registered: an account whose agent has not reached its API server yet.
        self.listeners: list[Callable[[str, Session | None, AccountRecord | None], None]] = []
        # With replicas, the referee of which replica's agent streams each account (None: one hub).
        self.claims: Claims | None = None
        # The first wait before asking an agent again about an account the database could not claim.
        self.store_retry_seconds = 1.0
        # Those accounts meanwhile, (session id, name) -> why, and the one task asking the
        # database, every `store_probe_seconds` doubling to `store_probe_max_seconds`, whether it
        # answers again: once it does, they are all asked for again at once (`_probe_store`).
        self._waiting_for_store: dict[tuple[str, str], str] = {}
        self._store_probe: asyncio.Task[None] | None = None
        self.store_probe_seconds = 0.5
        self.store_probe_max_seconds = 2.0
        self._background: set[asyncio.Task[Any]] = set()
        # Which agent identity each account is bound to: in the database, or here without one.
        self.bindings: BindingStore | None = None if store is None else BindingStore(store)
        self._bound: dict[str, str] = {}
        # Indexes over `sessions`, so that what one connecting agent costs does not grow with the
        # number connected: walking every session for each one that opens made opening n sessions
        # cost n^2 (at 5,000 sessions, a quarter of the hub's time while they connected).
        # The agent identity each session counted under when it opened, and the sessions per identity
        # (`auth.agents.maxSessionsPerIdentity` is checked against it for every new stream).
        self._identity_of: dict[str, str] = {}
        self._per_identity: dict[str, int] = {}
        # For each account name, the sessions that were refused it or stand by for it (in the order
        # they were), for `unblock`: a superset, each entry checked against `Session.rejected` there.
        self._refused_by: dict[str, dict[str, None]] = {}

    def _notify(self, what: str, session: Session | None, record: AccountRecord | None) -> None:
        for listener in self.listeners:
            try:
                listener(what, session, record)
            except Exception:  # a listener's bug must not break the agent's stream
                log.exception("registry listener failed on %s", what)

    async def start(self, held: Collection[str] | None = None) -> None:
        """Take back the accounts the database says were active (with replicas, only those this
        replica streamed: `held`), and start writing changes."""
        if self.store is None:
            return
        loop = asyncio.get_running_loop()
        for row in await self.store.list_accounts(states=[AccountState.ACTIVE]):
            if held is not None and row.name not in held:
                continue
            record = self.accounts[row.name] = AccountRecord(
                row.name,
                api_host=row.kube_host or "",
                fingerprint=row.cert_fingerprint or "",
                properties=dict(row.properties or {}),
                zone_id=row.zone_id or "",
                agent_id=row.agent_id or "",
                state=DISCONNECTED,
                stored=AccountState.ACTIVE,
                disconnected_at=time.time(),
            )
            record.orphan_timer = loop.call_later(self.grace_seconds, self._orphan, record)
        if self.accounts:
            log.info(
                "%d account(s) active before the restart: waiting %gs for their agents",
                len(self.accounts),
                self.grace_seconds,
            )
        self._writer = loop.create_task(self._write_all(), name="registry writes")

    async def stop(self) -> None:
        """Finish the pending writes (a few seconds at most), then stop."""
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background))
        if self._writer is None:
            return
        try:
            await asyncio.wait_for(self._idle.wait(), 5)
        except TimeoutError:
            names = sorted(self._pending)
            log.warning(
                "%d account write(s) to the database not done at shutdown (the database does not take them): %s%s",
                len(names),
                ", ".join(names[:10]),
                ", ..." if len(names) > 10 else "",
            )
        self._writer.cancel()
        await asyncio.wait([self._writer])

    async def writes_done(self) -> None:
        """Wait until every account change asked for so far is in the database (or was refused
        for good: logged). While the database cannot take writes, this waits for it to come back."""
        await self._idle.wait()

    def _queue_write(self, name: str, write: _Write) -> None:
        """Ask for `write`; an account with a write still pending gets one write with the newest values."""
        self._given_up.discard(name)
        pending = self._pending.get(name)
        self._pending[name] = write if pending is None else pending.then(write)
        self._idle.clear()
        self._wake.set()

    async def _write_all(self) -> None:
        """The one writer: takes the accounts in the order they were asked for, each with its
        newest values; the rows the accounts service owns (only updated) go together, in one
        transaction, as many as are pending then. A write the database could not take now
        (StoreTransient) goes back behind the others, under any newer values asked for meanwhile,
        and the writer waits a backoff before going on: the account's row ends up with its newest
        state once the database takes writes again. Any other refusal would come again every time:
        it is logged, with what was refused and why, and the writer goes on with the next account."""
        assert self.store is not None
        backoff = Backoff(initial=self.write_retry_seconds, maximum=self.write_retry_max_seconds)
        failing_since: float | None = None
        while True:
            if not self._pending:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take_writes()
            try:
                await self._write_batch(batch)
            except StoreTransient as e:
                for name, write in batch.items():
                    if name in self._given_up:
                        continue  # another replica holds it now: its state is that replica's to write
                    self.write_retries += 1
                    newer = self._pending.pop(name, None)
                    self._pending[name] = write if newer is None else write.then(newer)
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning(
                        "account(s) %s: cannot record them in the database now: %s; trying again until the "
                        "database takes them (%d account write(s) waiting)",
                        ", ".join(list(batch)[:10]) + (", ..." if len(batch) > 10 else ""),
                        e,
                        len(self._pending),
                    )
                else:
                    log.debug("account(s) %s: cannot record them in the database yet: %s", ", ".join(batch), e)
                await asyncio.sleep(backoff.next())  # a backoff before asking the database again
                continue
            if failing_since is not None:
                log.info(
                    "the database takes account writes again (after %.0fs); %d more waiting",
                    time.monotonic() - failing_since,
                    len(self._pending),
                )
                failing_since = None
            backoff.reset()

    def _take_writes(self) -> dict[str, _Write]:
        """The next pending write and, when it only updates a row the accounts service owns, every
        other pending write of such a row: a hundred accounts described at once are one
        transaction, not a hundred (each cost the hub about 4 ms of CPU)."""
        name = next(iter(self._pending))
        batch = {name: self._pending.pop(name)}
        if self._updates_only(name, batch[name]):
            others = list(islice((n for n, w in self._pending.items() if self._updates_only(n, w)), WRITE_BATCH - 1))
            for other in others:
                batch[other] = self._pending.pop(other)
        return batch

    def _updates_only(self, name: str, write: _Write) -> bool:
        return write.managed or name in self.managed

    async def _write_batch(self, batch: dict[str, _Write]) -> None:
        """Write the batch; raises StoreTransient for the caller to try again (what was written is
        written again then: the newest values win either way). A refusal that would come again is
        logged and dropped for the account refused only: a batch refused is halved until the
        refusal is one account's, so one account's bad values do not keep the others out."""
        assert self.store is not None
        # Given up to another replica while its batch waited (a batch halved, say): its state is
        # now that replica's to write.
        batch = {name: write for name, write in batch.items() if name not in self._given_up}
        if len(batch) > 1:
            try:
                # An account deleted through the API meanwhile is skipped: nothing to record.
                await self.store.update_accounts({n: w.fields for n, w in batch.items()}, skip_conflicts=True)
                return
            except StoreTransient:
                raise
            except Exception as e:  # refused for one of them, say
                log.debug("writing %d accounts at once failed (%s); writing them in halves", len(batch), e)
            writes = list(batch.items())
            await self._write_batch(dict(writes[: len(writes) // 2]))
            await self._write_batch(dict(writes[len(writes) // 2 :]))
            return
        for name, write in batch.items():
            try:
                await self._write(name, write)
            except StoreTransient:
                raise
            except AccountNotFound:
                pass  # deleted through the API meanwhile: nothing to record
            except StoreError as e:
                log.error(
                    "account %s: the database refused to record %s: %s; this write is dropped (it would be refused "
                    "again); the account's next change is recorded as usual",
                    name,
                    _summary(write.fields),
                    e,
                )
            except Exception:  # a bug must not stop every later write
                log.exception("account %s: recording %s failed", name, _summary(write.fields))

    async def _write(self, name: str, write: _Write) -> None:
        assert self.store is not None
        if self._updates_only(name, write):  # the accounts service's row (then or now): never recreate it
            await self.store.update_account(name, **write.fields)
        else:
            await self.store.upsert_account(name, **write.fields)

    def _record(self, record: AccountRecord, state: AccountState) -> None:
        """Write what agents say of the account; for a static account also its lifecycle state,
        which moves only as AGENT_TRANSITIONS allows (a dynamic one's is the accounts service's)."""
        if self.store is None:
            return
        fields: dict[str, Any] = {
            "kube_host": record.api_host,
            "cert_fingerprint": record.fingerprint,
            "agent_id": record.agent_id,
        }
        if record.name not in self.managed:
            before = record.stored
            fields |= {"zone_id": record.zone_id or None, "properties": record.properties}
            if before is not None and before != state and (before, state) not in AGENT_TRANSITIONS:
                log.error(
                    "account %s: %s -> %s is not a move of a static account; its state is not recorded",
                    record.name,
                    before,
                    state,
                )
            else:
                record.stored = state
                fields["state"] = state
        self._queue_write(record.name, _Write(fields, record.name in self.managed))

    def manage(self, name: str, permissions: dict[str, Any] | None) -> None:
        """`name` is a dynamic account (the accounts service's), whose permissions are those
        stored through the accounts API: they replace whatever its agent describes, now and in
        every later description (none stored: none, so `auth.defaultPermissions` applies)."""
        self.managed.add(name)
        self._stored_permissions[name] = dict(permissions or {})
        record = self.accounts.get(name)
        if record is not None:
            record.properties = self._with_stored_permissions(name, record.properties)

    def unmanage(self, name: str) -> None:
        """`name` is no dynamic account any more (deleted): an agent's file may define it again."""
        self.managed.discard(name)
        self._stored_permissions.pop(name, None)

    def _with_stored_permissions(self, name: str, properties: dict[str, Any]) -> dict[str, Any]:
        """A dynamic account's properties as described, with its stored permissions in place of
        the agent's; a static account's as its agent describes them."""
        if name not in self.managed:
            return properties
        kept = {key: value for key, value in properties.items() if key != "permissions"}
        stored = self._stored_permissions.get(name)
        if stored is None:
            # Managed, but its row not read on this replica yet: no one but admins until it is.
            stored = {"READ": [], "WRITE": [NO_ONE]}
        if stored:
            kept["permissions"] = stored
        return kept

    def open(self, session: Session) -> Session:
        if session.id not in self.sessions:
            identity = self._identity_of[session.id] = session.identity
            self._per_identity[identity] = self._per_identity.get(identity, 0) + 1
        self.sessions[session.id] = session
        for name in session.rejected:
            self._refused_by.setdefault(name, {})[session.id] = None
        log.info(
            "agent %s connected from %s (zone %r, session %s)",
            session.agent_id,
            session.peer,
            session.zone_id,
            session.id,
        )
        self._notify("opened", session, None)
        return session

    def sessions_of(self, identity: str) -> int:
        """How many sessions on this replica proved agent identity `identity` (without
        `auth.agents`, the stand-in identity their token, certificate or address gave them)."""
        return self._per_identity.get(identity, 0)

    def _refused(self, session: Session, name: str, why: str) -> None:
        """Record that `session` may not stream `name` now (refused, or standing by), for `unblock`."""
        session.rejected[name] = why
        session.accounts.discard(name)
        if self.sessions.get(session.id) is session:  # an ended session is never unblocked
            self._refused_by.setdefault(name, {})[session.id] = None

    async def admit(self, session: Session, name: str, api_host: str, fingerprint: str = "") -> str | None:
        """Whether `session` may stream `name` (None) or stands by (why): one session streams an
        account at a time, on this replica and, through `claims`, across replicas. Two agents
        streaming one account would undo each other's changes in the cache.

        First of all, the session's agent identity must be allowed the account, and the account
        must not be bound to another identity (it is bound to this one from its first stream);
        raises StoreError when the database cannot say."""
        why = await self._admit(session, name, api_host, fingerprint)
        session.store_failures.pop(name, None)  # the database answered
        return why

    async def _admit(self, session: Session, name: str, api_host: str, fingerprint: str) -> str | None:
        if name in session.accounts:
            return None
        refused = await self._identity_refuses(session, name, bind=bool(api_host))
        if refused is not None:
            return refused
        if not api_host:
            return None
        record = self.accounts.get(name)
        if record is not None and record.state != ORPHANED:
            if not record.same_cluster(api_host, fingerprint):
                return None  # another cluster under a held name: `describe` refuses it, saying so
            streaming = [self.sessions[i] for i in record.sessions if i != session.id and i in self.sessions]
            if streaming:
                local = f"{STANDING_BY} agent {streaming[0].agent_id} streams account {name!r} on this hub replica"
                self._stand_by(session, name, local)
                return local
        if self.claims is None:
            return None
        why = await self.claims.claim(session, name, 1, api_host, fingerprint)
        if self.sessions.get(session.id) is not session:
            if why is None:
                self.claims.connections_changed(name, 0)
            return "the session ended"
        if why is not None:
            self._stand_by(session, name, why)
        else:
            session.refused.pop(name, None)
        return why

    async def _identity_refuses(self, session: Session, name: str, *, bind: bool) -> str | None:
        grant = session.grant
        if grant is None or not grant.configured:
            return None
        why: str | None = None
        if not grant.allows_account(name):
            why = (
                f"agent identity {grant.name!r} may not stream account {name!r} "
                f"(its accounts: {grant.allowed_accounts()})"
            )
        else:
            bound = await self._binding(name, grant.name, session.zone_id, bind)
            if bound is not None and bound != grant.name:
                why = (
                    f"account {name!r} is bound to agent identity {bound!r}; this agent proved identity "
                    f"{grant.name!r}, so it may not stream it (an admin releases the binding to move the account)"
                )
        if why is None:
            return None
        return self._reject(session, name, why, f"agent {session.agent_id} (identity {grant.name})")

    async def may_receive(self, session: Session, name: str) -> str | None:
        """Why `session` may not be sent dynamic account `name`'s credentials (None: it may).

        The kubeconfig goes to the agents of one identity only: the one the account is bound to,
        or, while it is unbound, this session's, which it is bound to now, before anything is sent
        (so that a second identity of the same zone, asked next or at once, is refused). Raises
        StoreError when the database cannot say."""
        grant = session.grant
        if grant is None or not grant.configured:
            return None
        if not grant.allows_account(name):
            return f"agent identity {grant.name!r} may not stream account {name!r}"
        bound = await self._binding(name, grant.name, session.zone_id, True)
        if bound is not None and bound != grant.name:
            return (
                f"account {name!r} is bound to agent identity {bound!r}, and its credentials go only to that "
                f"identity's agents, not to {grant.name!r} (an admin releases the binding to move the account)"
            )
        return None

    def _reject(self, session: Session, name: str, why: str, who: str) -> str:
        """`session` may not stream `name`: said once in the log, and to the listeners; returns `why`."""
        if session.rejected.get(name) != why:
            log.warning("%s: %s", who, why)
        self._refused(session, name, why)
        self._notify(
            AgentAccountState.REJECTED,
            session,
            AccountRecord(
                name,
                reason=why,
                agent_state=AgentAccountState.REJECTED,
                zone_id=session.zone_id,
                agent_id=session.agent_id,
            ),
        )
        return why

    async def _binding(self, name: str, identity: str, zone: str, bind: bool) -> str | None:
        """The identity `name` is bound to, binding it to `identity` first when `bind` and unbound."""
        if self.bindings is None:
            if bind:
                return self._bound.setdefault(name, identity)
            return self._bound.get(name)
        if bind:
            row = await self.bindings.bind(name, identity, zone)
            if row.identity == identity and name not in self._bound:
                log.info("account %s is bound to agent identity %s (zone %r)", name, identity, zone)
            self._bound[name] = row.identity
            return row.identity
        found = await self.bindings.get(name)
        return None if found is None else found.identity

    async def release_binding(self, account: str) -> bool:
        """Forget which agent identity `account` is bound to (an admin's decision: the cluster
        moves to another agent); True if it was bound. The next identity to stream it binds it,
        and agents refused it are asked to describe it again. Raises StoreError."""
        released = self._bound.pop(account, None) is not None
        if self.bindings is not None:
            released = await self.bindings.release(account)
        if released:
            log.warning("account %s: its agent identity binding was released", account)
        self.unblock(account)
        return released

    def _stand_by(self, session: Session, name: str, why: str) -> None:
        if session.rejected.get(name) != why:
            log.info("agent %s: account %s: %s", session.agent_id, name, why)
        self._refused(session, name, why)

    def holds(self, name: str) -> bool:
        """Whether this replica streams the account, or serves it from cache in its grace period."""
        record = self.accounts.get(name)
        return record is not None and record.state != ORPHANED

    def give_up(self, name: str, why: str) -> None:
        """Another replica streams the account now: its sessions here stand by, and this replica's
        copy of its objects goes (reads are forwarded to the holder). Its state is the holder's to
        write."""
        record = self.accounts.pop(name, None)
        if record is None:
            return
        log.warning("account %s: %s; this replica gives it up", name, why)
        # What this replica had still to record of it is no longer its to write, even if it failed once.
        self._pending.pop(name, None)
        self._given_up.add(name)
        if record.orphan_timer is not None:
            record.orphan_timer.cancel()
        for session_id in record.sessions:
            session = self.sessions.get(session_id)
            if session is not None:
                reason = f"{STANDING_BY} {why}"
                self._stand_by(session, name, reason)
                session.refused[name] = reason
                if session.control is not None:
                    session.control(pb.CachingControl(account_rejected=pb.AccountRejected(name=name, reason=reason)))
        self.cache.drop_account(name)

    def describe(
        self,
        session: Session,
        name: str,
        *,
        api_host: str,
        fingerprint: str,
        server_version: str,
        agent_state: str,
        reason: str,
        kinds: list[str],
        properties: dict[str, Any],
        kinds_not_watching: list[str] | None = None,
    ) -> str | None:
        """Record what an agent says about an account; returns why it is refused, or None.

        An account whose agent has not reached its API server yet names no cluster: it is neither
        registered nor refused until it does (its events can only follow that).
        """
        if not api_host:
            # Not registered, but listeners still learn how it goes (e.g. an error before the server answered).
            self._notify(
                "described",
                session,
                AccountRecord(
                    name, agent_state=agent_state, reason=reason, zone_id=session.zone_id, agent_id=session.agent_id
                ),
            )
            return None
        record = self.accounts.get(name)
        if record is not None and record.state != ORPHANED and not record.same_cluster(api_host, fingerprint):
            others = record.sessions - {session.id}
            # Agent ids are self-declared, so even "the same agent" cannot move a name to another
            # cluster while it is held: a rotated API server certificate waits for the grace period.
            if others or record.state == DISCONNECTED:
                owner = record.agent_id or "another agent"
                why = (
                    f"account {name!r} is already registered for another cluster "
                    f"(API server {record.api_host}, certificate fingerprint {record.fingerprint or 'unknown'}, "
                    f"served by {owner}); this agent describes API server {api_host or 'unknown'} "
                    f"with fingerprint {fingerprint or 'unknown'}"
                )
                record.sessions.discard(session.id)
                return self._reject(session, name, why, f"agent {session.agent_id}")
            # The only session serving it now points it elsewhere: its next snapshot replaces the old objects.
        was_serving = record is not None and record.state == ACTIVE
        if record is None or record.state == ORPHANED:
            record = self.accounts[name] = AccountRecord(name)
            log.info("account %s registered by agent %s", name, session.agent_id)
        session.rejected.pop(name, None)
        session.accounts.add(name)
        record.sessions.add(session.id)
        if record.state != ACTIVE:
            log.info("account %s is served again, by agent %s", name, session.agent_id)
        self._serve(record)
        before = (record.api_host, record.fingerprint, record.zone_id, record.agent_id, record.properties)
        record.api_host = api_host or record.api_host
        record.fingerprint = fingerprint or record.fingerprint
        record.server_version = server_version or record.server_version
        record.agent_state, record.reason = agent_state, reason
        record.kinds, record.properties = kinds, self._with_stored_permissions(name, properties)
        record.kinds_not_watching = list(kinds_not_watching or ())
        record.zone_id, record.agent_id = session.zone_id, session.agent_id
        if not was_serving or before != (
            record.api_host,
            record.fingerprint,
            record.zone_id,
            record.agent_id,
            record.properties,
        ):
            self._record(record, AccountState.ACTIVE)
            if before[:2] != (record.api_host, record.fingerprint):
                self.unblock(name)  # refused for the old identity; maybe not for the new one
        self._notify("described", session, record)
        if agent_state == AgentAccountState.WATCHING:
            gone = self.cache.retain(
                name, kinds, properties.get("namespaces") or (), properties.get("omitNamespaces") or ()
            )
            if gone:
                log.info(
                    "account %s: %d cached object(s) of kinds or namespaces no longer followed removed", name, gone
                )
        return None

    def remove(self, session: Session, name: str) -> None:
        """The agent stopped following the account on purpose: nothing to wait for."""
        served = name in session.accounts
        session.accounts.discard(name)
        session.rejected.pop(name, None)
        record = self.accounts.get(name)
        if record is None or not served:
            return  # only an agent serving the account can give it up
        record.sessions.discard(session.id)
        if not record.sessions:
            log.info(
                "account %s: agent %s stopped following it; INACTIVE, its objects leave the cache",
                name,
                session.agent_id,
            )
            self._forget(record)

    def close(self, session: Session) -> None:
        if self.sessions.pop(session.id, None) is None:
            return
        identity = self._identity_of.pop(session.id, session.identity)
        if (left := self._per_identity.get(identity, 0) - 1) > 0:
            self._per_identity[identity] = left
        else:
            self._per_identity.pop(identity, None)
        for name in session.rejected:
            if (refused := self._refused_by.get(name)) is not None:
                refused.pop(session.id, None)
                if not refused:
                    del self._refused_by[name]
        log.info("agent %s disconnected (session %s)", session.agent_id, session.id)
        self._notify("closed", session, None)
        loop = asyncio.get_running_loop()
        for name in session.accounts:
            record = self.accounts.get(name)
            if record is None:
                continue
            record.sessions.discard(session.id)
            if not record.sessions:
                record.state, record.disconnected_at = DISCONNECTED, time.time()
                record.orphan_timer = loop.call_later(self.grace_seconds, self._orphan, record)
                log.info("account %s: no agent serves it; served from cache for %gs", name, self.grace_seconds)
                if self.claims is not None:
                    self.claims.connections_changed(name, 0)
                self.unblock(name, standby_only=True)  # an agent standing by takes over now

    def _serve(self, record: AccountRecord) -> None:
        if record.orphan_timer is not None:
            record.orphan_timer.cancel()
            record.orphan_timer = None
        record.state, record.disconnected_at = ACTIVE, None

    def _orphan(self, record: AccountRecord) -> None:
        record.orphan_timer = None
        if record.sessions or self.accounts.get(record.name) is not record:
            return
        if self.claims is not None:
            task = asyncio.get_running_loop().create_task(self._orphan_shared(record, self.claims))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self._orphan_now(record)

    async def _orphan_shared(self, record: AccountRecord, claims: Claims) -> None:
        """With replicas, ORPHANED only when no replica holds an agent for it: if another replica
        took the account during the grace period, this one only lets its copy go."""
        released = await claims.release(record.name)
        if record.sessions or self.accounts.get(record.name) is not record:
            return
        if released:
            self._orphan_now(record)
        else:
            self.give_up(record.name, "another hub replica streams it now")

    def _orphan_now(self, record: AccountRecord) -> None:
        log.warning(
            "account %s: no agent came back within %gs; ORPHANED, its objects leave the cache",
            record.name,
            self.grace_seconds,
        )
        record.state = ORPHANED
        self.cache.drop_account(record.name)
        self._record(record, AccountState.ORPHANED)
        self._notify("orphaned", None, record)
        self.unblock(record.name)

    def _forget(self, record: AccountRecord) -> None:
        if record.orphan_timer is not None:
            record.orphan_timer.cancel()
        del self.accounts[record.name]
        self.cache.drop_account(record.name)
        self._record(record, AccountState.INACTIVE)  # no agent follows it any more; the row keeps its history
        if self.claims is not None:
            task = asyncio.get_running_loop().create_task(self.claims.release(record.name))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self.unblock(record.name)

    def ask_again_later(self, session: Session, name: str, why: str) -> float:
        """The database could not say whether `session` may stream `name`: ask its agent to
        describe it again as soon as the database answers again (one query every 0.5 s to 2 s
        finds out, however many accounts wait), or at the latest after a wait that doubles with
        each failure in a row (1 s to 30 s). Returns that wait."""
        failures = session.store_failures[name] = session.store_failures.get(name, 0) + 1
        delay = min(30.0, self.store_retry_seconds * 2 ** (failures - 1))
        self._refused(session, name, why)
        asyncio.get_running_loop().call_later(delay, self._ask_again, session.id, name, why)
        self._waiting_for_store[(session.id, name)] = why
        if self.store is not None and self._store_probe is None:
            self._store_probe = asyncio.get_running_loop().create_task(
                self._probe_store(self.store), name="registry: is the database back"
            )
            self._background.add(self._store_probe)
            self._store_probe.add_done_callback(self._background.discard)
        return delay

    async def _probe_store(self, store: Store) -> None:
        """While accounts wait for the database, ask it (one cheap read) whether it answers,
        more and more rarely up to `store_probe_max_seconds`; once it does, ask their agents
        for them again. An account would otherwise wait out its timer (up to 30 s) after the
        database is back, DISCONNECTED, maybe past the grace period."""
        delay = self.store_probe_seconds
        try:
            while self._waiting_for_store:
                await asyncio.sleep(delay)
                try:
                    await store.get_account(next(iter(self._waiting_for_store))[1])
                except StoreError:
                    delay = min(self.store_probe_max_seconds, delay * 2)
                    continue
                waiting, self._waiting_for_store = self._waiting_for_store, {}
                if waiting:
                    log.info("the database answers again: %d account claim(s) asked for again", len(waiting))
                for (session_id, name), why in waiting.items():
                    self._ask_again(session_id, name, why)
        finally:
            self._store_probe = None

    def _ask_again(self, session_id: str, name: str, why: str) -> None:
        self._waiting_for_store.pop((session_id, name), None)
        session = self.sessions.get(session_id)
        if session is None or session.rejected.get(name) != why:
            return  # the session ended, or the account was settled another way meanwhile
        session.refused.pop(name, None)
        if session.control is not None:
            session.control(pb.CachingControl(resync=pb.Resync(account=name)))

    def waiting(self) -> list[str]:
        """The accounts some session of this replica was refused or stands by for."""
        return list(self._refused_by)

    def unblock(self, name: str, standby_only: bool = False) -> None:
        """Agents refused this name (or, with `standby_only`, only those standing by for it) may
        now claim it: ask them to describe it again."""
        refused = self._refused_by.get(name)
        if refused is None:
            return
        for session_id in list(refused):
            session = self.sessions.get(session_id)
            why = None if session is None else session.rejected.get(name)
            if session is None or why is None:
                refused.pop(session_id, None)  # ended, or taken since: nothing left to unblock
                continue
            if standby_only and not why.startswith(STANDING_BY):
                continue
            session.refused.pop(name, None)
            if session.control is not None:
                session.control(pb.CachingControl(resync=pb.Resync(account=name)))
        if not refused and self._refused_by.get(name) is refused:
            del self._refused_by[name]

    def serves(self, session: Session, account: str) -> bool:
        return account in session.accounts

    def account_info(self, record: AccountRecord) -> dict[str, Any]:
        counts = {kind: n for kind, n in self.cache.counts(record.name).items() if n}
        doc: dict[str, Any] = {
            "name": record.name,
            "state": record.state,
            "agentState": record.agent_state,
            "apiHost": record.api_host,
            "certificateFingerprint": record.fingerprint,
            "serverVersion": record.server_version,
            "zoneId": record.zone_id,
            "agentId": record.agent_id,
            "kinds": record.kinds,
            "objects": sum(counts.values()),
            "objectsByKind": counts,
            "properties": record.properties,
            "registeredAt": _iso(record.registered_at),
            "agents": sorted(self.sessions[s].agent_id for s in record.sessions if s in self.sessions),
        }
        if record.reason:
            doc["reason"] = record.reason
        if record.disconnected_at is not None:
            doc["disconnectedAt"] = _iso(record.disconnected_at)
        doc["freshness"] = self.freshness(record)
        return doc

    def freshness(self, record: AccountRecord) -> dict[str, Any]:
        """How current this replica's copy of the account is: per kind, when its newest event
        reached the cache and whether its watch is established now. A quiet kind with an
        established watch is current however old its newest event; a kind not watching is behind
        by at most the age of its newest event."""
        now = time.time()
        last = self.cache.last_events(record.name)
        connected = record.state == ACTIVE and record.agent_state in _FOLLOWING
        not_watching = set(record.kinds_not_watching)
        kinds: dict[str, Any] = {}
        for label in sorted(set(record.kinds) | {k for k, t in last.items() if t}):
            at = last.get(label) or None
            kinds[label] = {
                "lastEventAt": _iso_ms(at),
                "lastEventAgeSeconds": None if at is None else round(max(0.0, now - at), 3),
                "watching": connected and label in record.kinds and label not in not_watching,
            }
        newest = max((t for t in last.values() if t), default=None)
        return {
            "lastEventAt": _iso_ms(newest),
            "lastEventAgeSeconds": None if newest is None else round(max(0.0, now - newest), 3),
            "watches": len(record.kinds),
            "watchesEstablished": sum(1 for k in kinds.values() if k["watching"]),
            "kinds": kinds,
        }


def _summary(fields: dict[str, Any]) -> str:
    """What a write would have recorded, for a log line: the state, the agent and the cluster."""
    shown = {k: fields[k] for k in ("state", "agent_id", "kube_host", "zone_id") if fields.get(k)}
    return ", ".join(f"{k}={str(v)[:200]!r}" for k, v in shown.items()) or "its cluster's identity"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _iso_ms(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


# The agent's states in which its watches run (one by one established or not).
_FOLLOWING = frozenset({AgentAccountState.WATCHING, AgentAccountState.SYNCING, AgentAccountState.ERROR})
