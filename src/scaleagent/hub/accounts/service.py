"""Dynamic accounts: accounts stored in `kubesvc_accounts`, migrated to agents on request, retried
when they fail and recovered when their agents come back.

The service is the only writer of its accounts' `state` (the rows it created, `source = 'api'`;
their names are in `registry.managed`, so the registry records only what agents say about the
cluster). Requests are checked whole before anything is written, and written in one transaction,
so a rejected request changes nothing. What follows a request happens in the background:

- migration (PATCH `state: ACTIVE`): resolve the kubeconfig reference, store it encrypted, send
  AddAccounts to the agents of the account's zone, or without a zone to one connected agent
  after another until one takes it (its zone is then recorded). The account is ACTIVATING until
  an agent reports it `watching` (ACTIVE) or every agent that took it reports an error or leaves
  (FAILED, with the reason).
- deactivation (PATCH `state: INACTIVE`): DeleteAccounts to the agents serving it, then INACTIVE.
- retries: FAILED accounts are tried again every `retryFrequencySeconds`, at most `maxRetries`
  times after the first failure (`failed_count` counts the failures).
- orphans: an ACTIVE account whose agents all left past the grace period is ORPHANED; it is sent
  again to a connected agent of its zone right away if there is one, or to the next one that
  connects, and is ACTIVE again once that agent reports it watching. After a hub restart, ACTIVE
  accounts are sent again the same way.

Every state change goes through `states.check_transition`. Operations on one account are
serialised by a lock per account in this process; between replicas, each write is conditional
on the state it expects (`Store.update_accounts(expect_states=...)`), so two replicas cannot both
act on the same change. Agent sessions are per replica: this replica sends to its own agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ...kube.reflector import Backoff
from ...protocol.states import AgentAccountState as A
from ..states import TRANSIENT, AccountState, TransitionError, check_transition
from ..store import AccountExists, AccountNotFound, AccountRow, StateConflict, Store, StoreError, StoreTransient
from .errors import Conflict, DecryptionError, EncryptionKeyError, InvalidRequest, KubeconfigRefError, UnknownAccounts
from .kubeconfig_refs import KubeconfigResolver
from .models import SETTINGS, AccountChange, AccountIn, check_account_name, check_settings
from .secrets_box import SecretBox

if TYPE_CHECKING:
    from ..agents.registry import AccountRecord, Registry, Session
    from ..config import DynamicAccountsConfig, HubConfig

__all__ = ["AccountsService", "Dispatcher"]

S = AccountState
SOURCE = "api"
# How long a background handler keeps trying while the database fails; the periodic repair
# (every dynamicAccounts.retryFrequencySeconds) covers longer outages.
STORE_RETRY_SECONDS = 300.0

log = logging.getLogger("scaleagent.hub.accounts")


class Dispatcher(Protocol):
    """What the service needs from `hub.dynamic.AccountDispatcher`: ask one session's agent to
    add or delete accounts and get {name: (accepted, reason)} back, never an exception for what
    the agent or the network did."""

    async def add(self, session: Session, accounts: list[Any], timeout: float = ...) -> dict[str, tuple[bool, str]]: ...

    async def delete(self, session: Session, names: list[str], timeout: float = ...) -> dict[str, tuple[bool, str]]: ...


@dataclass
class _Sent:
    """An account this replica sent to agents and that has not reported `watching` yet.

    `resend` marks orphan and restart recovery, which leaves the stored state alone (ACTIVE or
    ORPHANED) until an agent reports: only a migration has ACTIVATING to resolve."""

    sessions: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)
    resend: bool = False


class AccountsService:
    """Dynamic accounts over the store, the registry (who is connected, what they report) and
    the dispatcher (AddAccounts/DeleteAccounts). `start()` after the registry's, `stop()` before
    the store closes."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        dispatcher: Dispatcher,
        *,
        config: DynamicAccountsConfig,
        box: SecretBox,
        resolver: KubeconfigResolver,
    ) -> None:
        self.store = store
        self.registry = registry
        self.dispatcher = dispatcher
        self.config = config
        self.box = box
        self.resolver = resolver
        self._locks: dict[str, asyncio.Lock] = {}
        self._sent: dict[str, _Sent] = {}
        # Deleted through the API while an agent may still follow them (it was away): told to stop
        # when it describes them. Forgotten when an account of that name is created again.
        self._deleted: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retry_task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._started = False
        # With replicas: asks the other replicas to do what this one cannot for lack of agents
        # (`offer(what, names)` -> the names one of them took; hub/replicas/offers.py).
        self.offer: Callable[[str, list[str]], Awaitable[list[str]]] | None = None

    @classmethod
    def for_hub(cls, config: HubConfig, store: Store, registry: Registry, dispatcher: Dispatcher) -> AccountsService:
        """The service as a hub builds it from its configuration."""
        box = SecretBox.for_hub(
            config.dynamic_accounts.encryption_key.get_secret_value(), config.database.url, store.url_for_display
        )
        return cls(
            store,
            registry,
            dispatcher,
            config=config.dynamic_accounts,
            box=box,
            resolver=KubeconfigResolver.from_config(config.kubernetes, config.dynamic_accounts.kubeconfig_directories),
        )

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take over the dynamic accounts in the database: their names become managed, requests
        a previous run left half done are failed (and so retried), and agents are followed from
        now on. Call it before agents can connect, so that none is missed."""
        rows = await self.store.list_accounts(source=SOURCE)
        self._manage(rows)
        for row in rows:
            # With replicas, another replica may be carrying it out now: the periodic repair
            # (repair_stuck) settles the ones nobody is working on.
            if row.state == S.DELETING and self.offer is None:
                await self._move(
                    row.name,
                    [S.DELETING],
                    S.DELETE_FAILED,
                    error_message="the hub restarted during the deletion; DELETE the account again",
                )
            elif row.state in TRANSIENT and self.offer is None:
                what = "migration" if row.state in (S.TO_MIGRATE, S.ACTIVATING) else "deactivation"
                await self._move(
                    row.name,
                    [row.state],
                    S.FAILED,
                    error_message=f"the hub restarted during the {what}; it will be retried",
                )
        self.registry.listeners.append(self._on_registry)
        self._retry_task = asyncio.get_running_loop().create_task(self._retry_forever(), name="accounts retries")
        self._started = True
        active = sum(1 for row in rows if row.state == S.ACTIVE)
        log.info("dynamic accounts: %d stored (%d ACTIVE, sent again to agents as they connect)", len(rows), active)

    async def stop(self) -> None:
        """Stop the retry loop and the background work; what is unfinished is failed at the next
        start and retried then."""
        with contextlib.suppress(ValueError):
            self.registry.listeners.remove(self._on_registry)
        tasks = [t for t in [self._retry_task, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self.resolver.close()

    # --- requests ------------------------------------------------------------------------------

    async def create(self, accounts: list[AccountIn]) -> list[AccountRow]:
        """Store new accounts INACTIVE, all or none. Raises Conflict if a name exists, or
        InvalidRequest for a kubeconfigFile this hub does not take (a plain path, unless
        kubeconfigDirectories are configured)."""
        _check_unique(a.name for a in accounts)
        refused = [
            f"account {a.name!r}: kubeconfigFile: {why}"
            for a in accounts
            if (why := self.resolver.refusal(a.kubeconfigFile)) is not None
        ]
        if refused:
            raise InvalidRequest(refused)
        rows = {
            a.name: {
                "zone_id": a.zoneId,
                "kubeconfig_file": a.kubeconfigFile,
                "properties": _settings(a.given()),
                "source": SOURCE,
                "state": S.INACTIVE,
                "desired_state": S.INACTIVE,
            }
            for a in accounts
        }
        try:
            created = await self.store.create_accounts(rows)
        except AccountExists as e:
            existing = await self.store.list_accounts(names=e.names)
            configured = [r.name for r in existing if r.source != SOURCE]
            message = f"{e}: choose another name"
            if configured:
                message += (
                    f" ({', '.join(map(repr, configured))} {'is' if len(configured) == 1 else 'are'} "
                    "configured in an agent's own file)"
                )
            raise Conflict(message) from None
        self._manage(created)
        self._deleted.difference_update(rows)
        log.info("dynamic accounts created: %s", ", ".join(rows))
        self._notify()
        return created

    async def patch(self, changes: list[AccountChange]) -> list[AccountRow]:
        """Apply changes to existing accounts, all or none, and start what they ask for.

        `state: ACTIVE` migrates (again; the failure count starts over), `state: INACTIVE`
        deactivates; other fields replace the stored ones. Changing the settings of an ACTIVE
        account sends it to its agents again. Raises UnknownAccounts, InvalidRequest (settings
        that contradict each other once merged) or Conflict (a state change the lifecycle does
        not allow, or the account changed meanwhile)."""
        names = [c.name for c in changes]
        _check_unique(names)
        rows = await self._own(names)
        updates: dict[str, dict[str, Any]] = {}
        expect: dict[str, list[str]] = {}
        problems: list[str] = []
        transitions: list[TransitionError] = []
        to_migrate: list[str] = []
        to_deactivate: list[str] = []
        for change in changes:
            row = rows[change.name]
            given = change.given()
            fields = _row_fields(row)
            merged = fields | given
            try:
                check_settings(merged)
            except ValueError as e:
                problems.append(f"{change.name!r}: {e}")
                continue
            if "kubeconfigFile" in given or change.state == S.ACTIVE:
                why = self.resolver.refusal(merged.get("kubeconfigFile"))
                if why is not None:
                    problems.append(f"{change.name!r}: kubeconfigFile: {why}")
                    continue
            values = _stored(row, given)
            changed = bool(values)
            target: AccountState | None = None
            if change.state == S.ACTIVE:
                target = S.TO_MIGRATE
            elif change.state == S.INACTIVE and row.state not in (S.INACTIVE, S.TO_DEACTIVATE, S.DEACTIVATING):
                target = S.TO_DEACTIVATE
            elif change.state is None and changed and row.state == S.ACTIVE:
                target = S.TO_MIGRATE  # its agents must follow the new settings
            try:
                if target is not None:
                    check_transition(row.name, row.state, target)
                elif changed and row.state == S.DELETE_FAILED:
                    raise TransitionError(
                        row.name,
                        row.state,
                        row.state,
                        "a deletion of it failed half-way: DELETE it again (its settings cannot change)",
                    )
                elif changed and row.state in TRANSIENT:
                    raise TransitionError(
                        row.name,
                        row.state,
                        row.state,
                        f"its settings cannot change while it is {row.state}; wait until the request in progress ends",
                    )
            except TransitionError as e:
                transitions.append(e)
                continue
            if target == S.TO_MIGRATE:
                values |= {"state": S.TO_MIGRATE, "desired_state": S.ACTIVE, "failed_count": 0, "error_message": None}
                to_migrate.append(row.name)
            elif target == S.TO_DEACTIVATE:
                values |= {"state": S.TO_DEACTIVATE, "desired_state": S.INACTIVE, "error_message": None}
                to_deactivate.append(row.name)
            if values:
                updates[row.name] = values
                expect[row.name] = [row.state]
        if problems:
            raise InvalidRequest(problems)
        if transitions:
            raise Conflict("; ".join(str(t) for t in transitions), transitions)
        try:
            written = await self.store.update_accounts(updates, expect_states=expect)
        except StateConflict as e:
            raise Conflict(
                f"{e} any more: it changed while this request was being checked; look at it again "
                "and repeat the request if it still applies"
            ) from None
        except AccountNotFound as e:
            raise UnknownAccounts([e.name]) from None
        for row in written:
            if row.name in to_migrate or row.name in to_deactivate:
                log.info(
                    "account %s: %s requested", row.name, "migration" if row.name in to_migrate else "deactivation"
                )
        self._notify()
        if to_migrate:
            self._handle(lambda: self._migrate(to_migrate), f"migration of {', '.join(to_migrate)}")
        if to_deactivate:
            self._handle(lambda: self._deactivate(to_deactivate), f"deactivation of {', '.join(to_deactivate)}")
        self._manage(written)  # changed permissions hold at once, whatever the agent says
        by_name = {row.name: row for row in written}
        return [by_name.get(name, rows[name]) for name in names]

    async def get(self, name: str) -> AccountRow:
        """One dynamic account; UnknownAccounts if there is none by that name."""
        try:
            check_account_name(name)
        except ValueError as e:
            raise InvalidRequest(str(e)) from None
        return (await self._own([name]))[name]

    async def list_accounts(
        self, *, states: Collection[str] = (), zone_id: str | None = None, name: str | None = None
    ) -> list[AccountRow]:
        """Dynamic accounts ordered by name, filtered by state (any of), zone and name (exact,
        or a pattern with `*` and `?`)."""
        bad = [s for s in states if s not in S.__members__]
        if bad:
            raise InvalidRequest(f"state: {', '.join(map(repr, bad))} is not an account state; use {', '.join(S)}")
        rows = await self.store.list_accounts(states=list(states), source=SOURCE)
        if zone_id is not None:
            rows = [r for r in rows if (r.zone_id or "") == zone_id]
        if name is not None:
            if any(c in name for c in "*?["):
                rows = [r for r in rows if fnmatch.fnmatchcase(r.name, name)]
            else:
                rows = [r for r in rows if r.name == name]
        return rows

    async def delete(self, names: list[str]) -> tuple[list[str], list[str]]:
        """Tell the agents following these accounts to stop, then delete their rows; all named
        accounts must exist (UnknownAccounts otherwise, and nothing is deleted). Returns the
        names deleted and warnings (agents that did not confirm they stopped)."""
        _check_unique(names)
        await self._own(names)
        warnings: list[str] = []
        async with self._locked(names):
            rows = await self._own(names)  # still there (a concurrent DELETE may have won)
            await self._mark_deleting(rows)
            targets = {name: self._sessions_following(name) for name in names}
            for name in names:
                self._sent.pop(name, None)
            warnings += await self._offered("stop", list(names))
            for name, result in (await self._delete_on(targets)).items():
                for agent, reason in result:
                    warnings.append(f"account {name!r}: agent {agent} did not confirm it stopped: {reason}")
            try:
                deleted = await self.store.delete_accounts(names)
            except StoreError as e:
                # Refused (a 503): the rows stay, DELETING, and their agents have stopped. They
                # become DELETE_FAILED (now if the database answers, else at the next repair or
                # start), so the account does not look served; a DELETE again finishes the work.
                for name in names:
                    with contextlib.suppress(StoreError):
                        await self._store_quietly(
                            name,
                            [S.DELETING],
                            state=S.DELETE_FAILED,
                            error_message=f"the database failed while deleting the account ({e}); DELETE it again",
                        )
                self._notify()
                raise
        for name in deleted:
            # While an agent still describes it, the registry must keep treating it as managed.
            if name not in self.registry.accounts:
                self.registry.unmanage(name)
            else:
                self._deleted.add(name)
                record = self.registry.accounts[name]
                if record.state != "ACTIVE" or not record.sessions:
                    warnings.append(
                        f"account {name!r}: its agent is not connected; it is told to stop following "
                        "the account when it comes back"
                    )
        for warning in warnings:
            log.warning("%s", warning)
        log.info("dynamic accounts deleted: %s", ", ".join(deleted))
        self._notify()
        return deleted, warnings

    async def _mark_deleting(self, rows: Mapping[str, AccountRow]) -> None:
        """Move every account to DELETING before anything is stopped, all or none: a DELETE
        already in progress is a Conflict (409), and a deletion that stops half-way is then seen
        (DELETE_FAILED) rather than an account that looks ACTIVE with no agent."""
        transitions: list[TransitionError] = []
        for row in rows.values():
            try:
                check_transition(row.name, row.state, S.DELETING)
            except TransitionError as e:
                transitions.append(e)
        if transitions:
            raise Conflict("; ".join(str(t) for t in transitions), transitions)
        updates = {name: {"state": S.DELETING, "error_message": None} for name in rows}
        try:
            await self.store.update_accounts(updates, expect_states={n: [r.state] for n, r in rows.items()})
        except StateConflict as e:
            raise Conflict(f"{e} any more: it changed while the deletion was being checked; DELETE it again") from None
        self._notify()

    # --- waiting (for tests and tools that must not poll blindly) -------------------------------

    async def wait_for(self, predicate: Callable[[], Awaitable[bool]], timeout: float) -> None:
        """Return once `predicate()` is true, checking it after every change the service makes;
        TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed
            if await predicate():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout:g}s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- migration -----------------------------------------------------------------------------

    async def migrate_here(self, names: list[str]) -> list[str]:
        """Another replica has no agent for these accounts: send those this replica's agents may
        take; the rest stay TO_MIGRATE for it. Returns the names taken (ACTIVATING)."""
        self.registry.managed.update(names)
        return await self._migrate(names, here_only=True)

    async def stop_here(self, names: list[str]) -> list[str]:
        """Another replica deletes or deactivates these accounts: this replica's agents following
        them stop. Returns warnings for agents that did not confirm."""
        async with self._locked(names):
            targets = {name: self._sessions_following(name) for name in names}
            for name in names:
                self._sent.pop(name, None)
            failures = await self._delete_on(targets)
        return [
            f"account {name!r}: agent {agent} did not confirm it stopped: {reason}"
            for name, result in failures.items()
            for agent, reason in result
        ]

    async def _offered(self, what: str, names: list[str]) -> list[str]:
        if self.offer is None or not names:
            return []
        try:
            return await self.offer(what, names)
        except Exception:  # an unreachable replica is the offer's business; nothing may break the request
            log.exception("offering %s of %s to the other replicas failed", what, ", ".join(names))
            return []

    async def _migrate(self, names: list[str], here_only: bool = False) -> list[str]:
        """Carry accounts from TO_MIGRATE to ACTIVATING (or FAILED); returns the names moved on.
        With `here_only` (asked by another replica), accounts no agent here may take stay TO_MIGRATE."""
        async with self._locked(names):
            rows = [r for r in await self.store.list_accounts(names=names, source=SOURCE) if r.state == S.TO_MIGRATE]
            self._manage(rows)  # the permissions sent with it are those that hold here
            specs: dict[str, Any] = {}
            snapshots: dict[str, dict[str, Any]] = {}
            for row in rows:
                try:
                    specs[row.name], snapshot = await self._resolve(row)
                except (KubeconfigRefError, EncryptionKeyError, StoreError) as e:
                    await self._fail(
                        row.name,
                        [S.TO_MIGRATE],
                        f"cannot resolve kubeconfigFile: {e}" if isinstance(e, KubeconfigRefError) else str(e),
                    )
                    continue
                if snapshot is not None:
                    snapshots[row.name] = snapshot
            await self._store_snapshots(snapshots, specs)
            rows = [r for r in rows if r.name in specs]
            # Where each account goes: its zone's agents, the agents already following it (new
            # settings), or else the first connected agent that takes it.
            to_all: dict[str, list[Session]] = {}
            first_taker: list[AccountRow] = []
            for row in rows:
                if row.zone_id is not None:
                    to_all[row.name] = self._sessions(row.zone_id)
                    await self._stop_elsewhere(row)
                elif following := [s for s in self._live(self._sessions_following(row.name))]:
                    to_all[row.name] = following
                else:
                    first_taker.append(row)
            candidates = self._sessions(None)
            unreachable = [n for n, sessions in to_all.items() if not sessions]
            if not candidates:
                unreachable += [r.name for r in first_taker]
                first_taker = []
            if here_only:
                for name in unreachable:
                    to_all.pop(name, None)
                unreachable = []
            elif unreachable and self.offer is not None:
                offered = set(await self._offered("migrate", unreachable))
                for name in offered:
                    to_all.pop(name, None)
                unreachable = [n for n in unreachable if n not in offered]
                rows = [r for r in rows if r.name not in offered]
            for name in unreachable:
                zone = next(r.zone_id for r in rows if r.name == name)
                where = f"in zone {zone!r} " if zone is not None else ""
                await self._fail(
                    name,
                    [S.TO_MIGRATE],
                    f"no agent {where}that accepts dynamic accounts is connected "
                    f"to this hub{self._connected_summary()}",
                )
                to_all.pop(name, None)
            sending = [*to_all, *(r.name for r in first_taker)]
            moved = await self._move_all(sending, [S.TO_MIGRATE], S.ACTIVATING)
            for name in moved:
                self._sent[name] = _Sent()
            refusals: dict[str, list[str]] = {name: [] for name in moved}
            # Zone (or current agents): every one of them, at once.
            per_session: dict[str, tuple[Session, list[Any]]] = {}
            for name, sessions in to_all.items():
                if name in moved:
                    await self._bind_first(name, sessions)
                    for s in sessions:
                        per_session.setdefault(s.id, (s, []))[1].append(specs[name])
            results = await asyncio.gather(*(self._add(s, batch) for s, batch in per_session.values()))
            for (session, _), result in zip(per_session.values(), results, strict=True):
                self._record_answers(session, result, refusals)
            # No zone: one agent after another, until each account is taken.
            remaining = [r.name for r in first_taker if r.name in moved]
            for session in candidates:
                if not remaining:
                    break
                result = await self._add(session, [specs[n] for n in remaining])
                taken = self._record_answers(session, result, refusals)
                await self._store_all(
                    list(taken), [S.ACTIVATING], zone_id=session.zone_id or None, agent_id=session.agent_id
                )
                remaining = [n for n in remaining if n not in taken]
            for name in moved:
                sent = self._sent.get(name)
                if sent is not None and not sent.sessions:
                    self._sent.pop(name, None)
                    why = "; ".join(refusals[name]) or "no agent answered"
                    await self._fail(name, [S.ACTIVATING], f"no agent took the account: {why}")
            self._notify()
            return moved

    async def _resolve(self, row: AccountRow) -> tuple[Any, dict[str, Any] | None]:
        """The account to send: its kubeconfig resolved now, or none for the agent's own service
        account; and the fields that store the snapshot recovery sends again (the kubeconfig
        encrypted), or None when there is nothing to store."""
        from ..agents.dispatch import DynamicAccountSpec

        content: bytes | None = None
        encrypted: bytes | None = None
        if row.kubeconfig_file:
            content = await self.resolver.resolve(row.kubeconfig_file, row.properties.get("context"))
            await self.box.ready()
            encrypted = self.box.encrypt(content)
        snapshot = (
            {"kubeconfig_encrypted": encrypted}
            if encrypted is not None or row.kubeconfig_encrypted is not None
            else None
        )
        spec = DynamicAccountSpec(
            name=row.name,
            kubeconfig=content,
            context=row.properties.get("context"),
            properties=_agent_properties(row.properties),
        )
        return spec, snapshot

    async def _store_snapshots(self, snapshots: dict[str, dict[str, Any]], specs: dict[str, Any]) -> None:
        """Store the resolved kubeconfigs of accounts being migrated, in one transaction. An
        account no longer TO_MIGRATE (moved on or deleted meanwhile) is not sent: it leaves `specs`.

        A database that cannot take the write now (StoreTransient) fails none of them: the error
        goes up to `_retrying`, which runs the migration again (the rows are still TO_MIGRATE). A
        refusal that would come again is looked for account by account, and fails only the one
        refused."""
        if not snapshots:
            return
        try:
            stored = await self.store.update_accounts(
                snapshots, expect_states={name: [S.TO_MIGRATE] for name in snapshots}, skip_conflicts=True
            )
        except StoreTransient:
            raise
        except StoreError:
            stored = []
            for name, fields in snapshots.items():
                try:
                    stored.append(await self.store.update_account(name, expect_states=[S.TO_MIGRATE], **fields))
                except (StateConflict, AccountNotFound):
                    pass
                except StoreTransient:
                    raise
                except StoreError as e:
                    specs.pop(name, None)
                    await self._fail(name, [S.TO_MIGRATE], str(e))
        for name in snapshots.keys() - {row.name for row in stored}:
            log.debug("account %s: not migrated: it left TO_MIGRATE meanwhile", name)
            specs.pop(name, None)

    async def _stored_spec(self, row: AccountRow) -> Any:
        """The account to send again (recovery): the stored snapshot, decrypted."""
        from ..agents.dispatch import DynamicAccountSpec

        content = None
        if row.kubeconfig_encrypted is not None:
            await self.box.ready()
            content = self.box.decrypt(row.kubeconfig_encrypted)
        elif row.kubeconfig_file:
            raise DecryptionError("no kubeconfig snapshot is stored; migrate the account again (PATCH state ACTIVE)")
        return DynamicAccountSpec(
            name=row.name,
            kubeconfig=content,
            context=row.properties.get("context"),
            properties=_agent_properties(row.properties),
        )

    async def _add(self, session: Session, specs: list[Any]) -> dict[str, tuple[bool, str]]:
        """AddAccounts to one session; whatever goes wrong is a refusal with the reason."""
        try:
            return await self.dispatcher.add(session, specs, timeout=self.config.agent_timeout_seconds)
        except Exception as e:
            log.exception("sending AddAccounts to agent %s failed", session.agent_id)
            return {spec.name: (False, f"cannot send to agent {session.agent_id}: {e}") for spec in specs}

    async def _bind_first(self, name: str, sessions: list[Session]) -> None:
        """Before an account is sent to all these sessions at once: bind it (if unbound) to the
        identity of the oldest that may take it, rather than to whichever send the database
        happens to see first; the others are then refused by the dispatcher."""
        for session in sorted(sessions, key=lambda s: s.connected_at):
            try:
                if await self.registry.may_receive(session, name) is None:
                    return
            except StoreError:
                return  # the dispatcher says so, for each session

    def _record_answers(
        self, session: Session, result: dict[str, tuple[bool, str]], refusals: dict[str, list[str]]
    ) -> list[str]:
        """Note which accounts `session` took (they now wait for its report) and why it refused
        the others; returns the names taken."""
        taken = []
        live = self.registry.sessions.get(session.id) is session
        for name, (accepted, reason) in result.items():
            sent = self._sent.get(name)
            if accepted and not live:
                # It left after answering: no report will ever come from it.
                accepted, reason = False, f"disconnected right after taking the account ({reason or 'accepted'})"
            if accepted and sent is not None:
                sent.sessions.add(session.id)
                taken.append(name)
            elif not accepted and name in refusals:
                refusals[name].append(f"agent {session.agent_id}: {reason}")
        return taken

    async def _stop_elsewhere(self, row: AccountRow) -> None:
        """An account moving to another zone: the agents of the old one stop following it."""
        assert row.zone_id is not None
        elsewhere = {s for s in self._live(self._sessions_following(row.name)) if s.zone_id != row.zone_id}
        if elsewhere:
            await self._delete_on({row.name: elsewhere})

    # --- deactivation --------------------------------------------------------------------------

    async def _deactivate(self, names: list[str]) -> None:
        """Carry accounts from TO_DEACTIVATE to INACTIVE (or FAILED)."""
        async with self._locked(names):
            rows = [r for r in await self.store.list_accounts(names=names, source=SOURCE) if r.state == S.TO_DEACTIVATE]
            # Agents on other replicas following these accounts stop too (they answer for themselves).
            await self._offered("stop", [r.name for r in rows])
            targets = {}
            for row in rows:
                following = self._sessions_following(row.name)
                self._sent.pop(row.name, None)
                if following:
                    targets[row.name] = following
                else:
                    await self._move(
                        row.name, [S.TO_DEACTIVATE], S.INACTIVE, error_message=None, kubeconfig_encrypted=None
                    )
            moved = await self._move_all(list(targets), [S.TO_DEACTIVATE], S.DEACTIVATING)
            failures = await self._delete_on({name: targets[name] for name in moved})
            # The agents have acted: what they did is recorded even if the database fails now
            # (tried again until it answers), or the account would stay DEACTIVATING.
            for name in moved:
                if failures.get(name):
                    why = "; ".join(f"agent {agent}: {reason}" for agent, reason in failures[name])
                    await self._retrying(
                        functools.partial(
                            self._fail,
                            name,
                            [S.DEACTIVATING],
                            f"deactivation: not every agent stopped following it: {why}",
                        ),
                        f"account {name} deactivation",
                    )
                else:
                    await self._retrying(
                        functools.partial(
                            self._move,
                            name,
                            [S.DEACTIVATING],
                            S.INACTIVE,
                            error_message=None,
                            kubeconfig_encrypted=None,
                        ),
                        f"account {name} deactivation",
                    )
            self._notify()

    async def _delete_on(self, targets: Mapping[str, Iterable[Session]]) -> dict[str, list[tuple[str, str]]]:
        """DeleteAccounts to each session for its accounts, all sessions at once; returns
        {name: [(agent id, reason)]} of the refusals."""
        per_session: dict[str, tuple[Session, list[str]]] = {}
        for name, sessions in targets.items():
            for session in sessions:
                per_session.setdefault(session.id, (session, []))[1].append(name)

        async def one(session: Session, batch: list[str]) -> dict[str, tuple[bool, str]]:
            try:
                return await self.dispatcher.delete(session, batch, timeout=self.config.agent_timeout_seconds)
            except Exception as e:
                log.exception("sending DeleteAccounts to agent %s failed", session.agent_id)
                return {name: (False, f"cannot send to agent {session.agent_id}: {e}") for name in batch}

        results = await asyncio.gather(*(one(s, batch) for s, batch in per_session.values()))
        failures: dict[str, list[tuple[str, str]]] = {}
        for (session, _), result in zip(per_session.values(), results, strict=True):
            for name, (accepted, reason) in result.items():
                if not accepted:
                    failures.setdefault(name, []).append((session.agent_id, reason))
        return failures

    # --- what agents report --------------------------------------------------------------------

    def _on_registry(self, what: str, session: Session | None, record: AccountRecord | None) -> None:
        """A registry listener: runs inside the registry's call, so it only schedules work. Each
        handler ends by notifying `wait_for` waiters, whether or not it changed a row, and is
        run again while the database fails (`_handle`)."""
        if what == "described" and session is not None and record is not None:
            if record.name in self.registry.managed and record.agent_state in (A.WATCHING, A.ERROR):
                name, state, reason = record.name, record.agent_state, record.reason
                cluster = (record.api_host, record.fingerprint)
                self._handle(
                    lambda: self._on_described(session, name, state, reason, cluster=cluster),
                    f"account {name} described by agent {session.agent_id}",
                )
        elif what == "rejected" and session is not None and record is not None:
            if record.name in self.registry.managed:
                name, reason = record.name, session.rejected.get(record.name, "the hub refused it")
                self._handle(lambda: self._on_described(session, name, A.ERROR, reason), f"account {name} rejected")
        elif what == "orphaned" and record is not None and record.name in self.registry.managed:
            name = record.name
            self._handle(lambda: self._on_orphaned(name), f"account {name} orphaned")
        elif what == "opened" and session is not None:
            self._handle(lambda: self._recover(session), f"agent {session.agent_id} connected")
        elif what == "closed" and session is not None:
            self._handle(lambda: self._on_closed(session), f"agent {session.agent_id} left")

    def _handle(self, work: Callable[[], Awaitable[Any]], what: str) -> None:
        self._spawn(self._notifying(self._retrying(work, what)), what)

    async def _retrying(self, work: Callable[[], Awaitable[Any]], what: str) -> None:
        """Run a handler again, with backoff, while the database fails: a write lost to a short
        outage left an account ACTIVATING for good. The handlers read before they write, so a
        second run does only what the first did not. After STORE_RETRY_SECONDS the periodic
        repair (`repair_stuck`) is what is left."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(initial=0.5, maximum=10.0)
        give_up = loop.time() + STORE_RETRY_SECONDS
        failed_since: float | None = None
        while True:
            try:
                await work()
            except (StateConflict, AccountNotFound):
                raise  # an answer of the database, not a failure of it
            except StoreError as e:
                if loop.time() > give_up:
                    raise
                if failed_since is None:
                    failed_since = loop.time()
                    log.warning("dynamic accounts: %s: %s; trying again until the database answers", what, e)
                await asyncio.sleep(backoff.next())
                continue
            if failed_since is not None:
                log.info(
                    "dynamic accounts: %s: done after the database came back (%.0fs)", what, loop.time() - failed_since
                )
            return

    async def _notifying(self, work: Awaitable[Any]) -> None:
        try:
            await work
        finally:
            self._notify()

    async def _on_described(
        self, session: Session, name: str, agent_state: str, reason: str, cluster: tuple[str, str] = ("", "")
    ) -> None:
        """An agent reports on an account: watching makes it ACTIVE (recording the cluster it
        reached at once, rather than after the registry's own write); an error fails a
        migration once every agent it was sent to has failed or left."""
        async with self._locked([name]):
            row = await self.store.get_account(name)
            if row is None and name in self._deleted:
                # Deleted while this agent was away: it still follows the account, and must stop.
                if agent_state != A.STOPPED:
                    failures = await self._delete_on({name: [session]})
                    if failures:
                        log.warning(
                            "account %s was deleted but agent %s still follows it and did not stop: %s",
                            name,
                            session.agent_id,
                            failures[name],
                        )
                return
            if row is None or row.source != SOURCE:
                return
            sent = self._sent.get(name)
            if agent_state == A.WATCHING:
                if sent is not None:
                    self._sent.pop(name, None)
                if row.state in (S.ACTIVATING, S.ORPHANED, S.FAILED) and row.desired_state == S.ACTIVE:
                    fields: dict[str, Any] = {"error_message": None, "agent_id": session.agent_id}
                    if cluster[0]:
                        fields |= {"kube_host": cluster[0], "cert_fingerprint": cluster[1] or None}
                    if row.zone_id is None and session.zone_id:
                        fields["zone_id"] = session.zone_id
                    if await self._move(name, [row.state], S.ACTIVE, **fields):
                        log.info("account %s is ACTIVE: agent %s watches it", name, session.agent_id)
                elif row.state == S.INACTIVE:
                    # Left over (a deactivation the hub did not finish): the agent must stop.
                    failures = await self._delete_on({name: [session]})
                    if failures:
                        log.warning(
                            "account %s is INACTIVE but agent %s still follows it and did not stop: %s",
                            name,
                            session.agent_id,
                            failures[name],
                        )
                return
            # agent_state == A.ERROR
            if sent is None or session.id not in sent.sessions:
                return
            sent.sessions.discard(session.id)
            sent.errors[session.id] = f"agent {session.agent_id}: {reason or 'error'}"
            if sent.sessions:
                return  # another agent it was sent to may still succeed
            self._sent.pop(name, None)
            why = "; ".join(sent.errors.values())
            if sent.resend or row.state != S.ACTIVATING:
                await self._store_quietly(name, [row.state], error_message=why)
                log.warning("account %s: sent again, but %s", name, why)
            else:
                await self._fail(name, [S.ACTIVATING], why)
            # A failed account is followed by no agent: stop those that took it and failed.
            errored = [s for s in self._live(self.registry.sessions.get(i) for i in sent.errors)]
            if errored and not sent.resend:
                await self._delete_on({name: errored})

    async def _on_closed(self, session: Session) -> None:
        """An agent left: a migration waiting only for it has failed (the retry loop may find
        another agent); recovery sends waiting for it are forgotten."""
        affected = [name for name, sent in self._sent.items() if session.id in sent.sessions]
        for name in affected:
            async with self._locked([name]):
                sent = self._sent.get(name)
                if sent is None or session.id not in sent.sessions:
                    continue
                sent.sessions.discard(session.id)
                sent.errors[session.id] = f"agent {session.agent_id} disconnected before the account was active"
                if sent.sessions:
                    continue
                self._sent.pop(name, None)
                if not sent.resend:
                    await self._fail(name, [S.ACTIVATING], "; ".join(sent.errors.values()))

    async def _on_orphaned(self, name: str) -> None:
        """The registry's grace period ended with no agent: ORPHANED, then offered at once to a
        connected agent that may take it."""
        async with self._locked([name]):
            row = await self.store.get_account(name)
            if row is None or row.source != SOURCE or row.state != S.ACTIVE:
                return
            if await self._move(
                name,
                [S.ACTIVE],
                S.ORPHANED,
                error_message="every agent serving it went away; it is sent again to the next agent of its zone",
            ):
                log.warning("account %s is ORPHANED", name)
        # Another connected agent of its zone can take it now.
        for session in self._sessions(None):
            if await self._recover(session, only=[name]):
                break

    async def _recover(self, session: Session, only: list[str] | None = None) -> bool:
        """Send `session` the dynamic accounts that should be followed and are not: ORPHANED or
        ACTIVE (after a hub restart) ones of its zone (or without one) that no live session
        serves and that are not on their way to an agent already. Returns whether any was taken."""
        if not session.dynamic_accounts_enabled:
            return False
        rows = await self.store.list_accounts(states=[S.ACTIVE, S.ORPHANED], source=SOURCE, names=only or ())
        self._manage(rows)  # created through another replica, maybe
        names = [r.name for r in rows if self._wants(r, session)]
        if not names:
            return False
        async with self._locked(names):
            if self.registry.sessions.get(session.id) is not session:
                return False
            rows = [r for r in await self.store.list_accounts(names=names, source=SOURCE) if self._wants(r, session)]
            specs = []
            for row in rows:
                try:
                    specs.append(await self._stored_spec(row))
                except (DecryptionError, EncryptionKeyError) as e:
                    if row.kubeconfig_file and await self._move(
                        row.name, [row.state], S.TO_MIGRATE, error_message=f"cannot be sent again: {e}"
                    ):
                        # The snapshot is unreadable (a key rotated or lost): resolve the reference afresh.
                        log.warning("account %s: stored kubeconfig unreadable (%s); migrating it again", row.name, e)
                        self._spawn(self._migrate([row.name]), "migrate again")
                    else:
                        await self._store_quietly(row.name, [row.state], error_message=f"cannot be sent again: {e}")
            if not specs:
                return False
            for spec in specs:
                self._sent[spec.name] = _Sent(resend=True)
            log.info("sending account(s) %s again, to agent %s", ", ".join(s.name for s in specs), session.agent_id)
            result = await self._add(session, specs)
            taken = self._record_answers(session, result, {})
            by_name = {r.name: r for r in rows}
            for spec in specs:
                if spec.name in taken:
                    if by_name[spec.name].zone_id is None and session.zone_id:
                        await self._store_quietly(spec.name, [by_name[spec.name].state], zone_id=session.zone_id)
                else:
                    self._sent.pop(spec.name, None)
                    accepted, reason = result.get(spec.name, (False, "no answer"))
                    log.warning("account %s: agent %s did not take it back: %s", spec.name, session.agent_id, reason)
            return bool(taken)

    def _wants(self, row: AccountRow, session: Session) -> bool:
        """Whether `session` should be sent `row` to recover it."""
        if row.desired_state != S.ACTIVE or row.name in self._sent:
            return False
        if row.zone_id is not None and row.zone_id != session.zone_id:
            return False
        return not self._live(self._sessions_following(row.name))

    # --- retries -------------------------------------------------------------------------------

    async def _retry_forever(self) -> None:
        """Every retryFrequencySeconds, repair accounts stuck in a transient state and try FAILED
        ones again (a periodic timer: the interval is the setting, nothing waits on it for
        synchronisation)."""
        while True:
            await asyncio.sleep(self.config.retry_frequency_seconds)
            try:
                await self.repair_stuck()
                await self.retry_failed()
                await self.refresh_permissions()
            except StoreError as e:
                log.error("dynamic accounts: retrying failed accounts: %s", e)

    async def refresh_permissions(self) -> None:
        """Read again the permissions of the dynamic accounts this replica streams: one changed
        through another replica (which sends the account to the agents it has, maybe not to this
        replica's) holds here within retryFrequencySeconds."""
        held = [name for name in self.registry.accounts if name in self.registry.managed]
        if held:
            self._manage(await self.store.list_accounts(names=held, source=SOURCE))

    async def repair_stuck(self) -> None:
        """Move on accounts whose transient state no handler will move any more (a write lost for
        longer than the handlers retry): what the hub otherwise only did at its next start.

        An account being worked on (its lock held), or waiting for an agent's first report, is
        left alone: a large cluster's first snapshot may keep it ACTIVATING for minutes."""
        now = datetime.now(UTC)
        for row in await self.store.list_accounts(states=sorted(TRANSIENT), source=SOURCE):
            lock = self._locks.get(row.name)
            if lock is not None and lock.locked():
                continue
            if (now - row.updated_at).total_seconds() < self.config.retry_frequency_seconds:
                continue
            record = self.registry.accounts.get(row.name)
            watching = [
                s
                for s in self._live(self.registry.sessions.get(i) for i in (record.sessions if record else ()))
                if record is not None and record.agent_state == A.WATCHING
            ]
            if row.state == S.ACTIVATING and watching and record is not None:
                log.warning(
                    "account %s: ACTIVATING although agent %s watches it (a lost write); repairing",
                    row.name,
                    watching[0].agent_id,
                )
                await self._on_described(
                    watching[0], row.name, A.WATCHING, "", cluster=(record.api_host, record.fingerprint)
                )
            elif row.state == S.DELETING:
                # No DELETE holds its lock: the replica carrying it out stopped half-way.
                if await self._move(
                    row.name,
                    [S.DELETING],
                    S.DELETE_FAILED,
                    error_message="the deletion stopped half-way (its hub replica stopped or a database "
                    "write failed); DELETE the account again",
                ):
                    log.warning("account %s: stuck DELETING; DELETE_FAILED", row.name)
            elif row.name not in self._sent or not self._sessions_following(row.name):
                self._sent.pop(row.name, None)
                what = "migration" if row.state in (S.TO_MIGRATE, S.ACTIVATING) else "deactivation"
                if await self._move(
                    row.name,
                    [row.state],
                    S.FAILED,
                    error_message=f"the {what} stopped half-way (a database write failed); it will be retried",
                ):
                    log.warning("account %s: stuck %s; FAILED, to be retried", row.name, row.state)

    async def retry_failed(self) -> None:
        """Try once more the FAILED accounts that have retries left and failed at least
        retryFrequencySeconds ago: a migration, or a deactivation, as their user asked."""
        now = datetime.now(UTC)
        due = [
            r
            for r in await self.store.list_accounts(states=[S.FAILED], source=SOURCE)
            if r.failed_count <= self.config.max_retries
            and (now - r.updated_at).total_seconds() >= self.config.retry_frequency_seconds
        ]
        migrate = [r.name for r in due if r.desired_state != S.INACTIVE and r.name not in self._sent]
        deactivate = [r.name for r in due if r.desired_state == S.INACTIVE]
        migrate = await self._move_all(migrate, [S.FAILED], S.TO_MIGRATE)
        deactivate = await self._move_all(deactivate, [S.FAILED], S.TO_DEACTIVATE)
        for name in [*migrate, *deactivate]:
            log.info(
                "account %s: retrying (after %d failure(s))", name, next(r.failed_count for r in due if r.name == name)
            )
        if migrate:
            self._handle(lambda: self._migrate(migrate), f"migration of {', '.join(migrate)} (retry)")
        if deactivate:
            self._handle(lambda: self._deactivate(deactivate), f"deactivation of {', '.join(deactivate)} (retry)")

    # --- helpers -------------------------------------------------------------------------------

    def _manage(self, rows: Iterable[AccountRow]) -> None:
        """These accounts are this service's: their permissions are the stored ones, whatever
        their agents describe (registry.manage)."""
        for row in rows:
            self.registry.manage(row.name, (row.properties or {}).get("permissions"))

    async def _own(self, names: list[str]) -> dict[str, AccountRow]:
        """The dynamic accounts `names`, all of them, or UnknownAccounts."""
        rows = {r.name: r for r in await self.store.list_accounts(names=names)}
        missing = [n for n in names if n not in rows]
        configured = [n for n in names if n in rows and rows[n].source != SOURCE]
        if missing or configured:
            raise UnknownAccounts(missing, configured)
        return rows

    async def _move(
        self, name: str, from_states: list[str], to_state: AccountState, **fields: Any
    ) -> AccountRow | None:
        """Move one account to `to_state` if it is still in one of `from_states`; None if it is
        not (someone else moved it first) or is gone."""
        for state in from_states:
            check_transition(name, state, to_state)
        rows = await self._store_all([name], from_states, state=to_state, **fields)
        return rows[0] if rows else None

    async def _move_all(self, names: list[str], from_states: list[str], to_state: AccountState) -> list[str]:
        """`_move` for several accounts, in one transaction; returns those moved, in order."""
        for name in names:
            for state in from_states:
                check_transition(name, state, to_state)
        rows = await self._store_all(names, from_states, state=to_state)
        return [row.name for row in rows]

    async def _fail(self, name: str, from_states: list[str], reason: str) -> None:
        """FAILED with `reason`, one more failure counted."""
        row = await self.store.get_account(name)
        if row is None or row.state not in from_states:
            return
        if await self._move(name, [row.state], S.FAILED, error_message=reason, failed_count=row.failed_count + 1):
            failures = row.failed_count + 1
            left = (
                ""
                if failures <= self.config.max_retries
                else (
                    f"; no retries left (dynamicAccounts.maxRetries is {self.config.max_retries}): "
                    "PATCH it to ACTIVE to start over"
                )
            )
            log.warning("account %s FAILED (failure %d): %s%s", name, failures, reason, left)

    async def _store_quietly(self, name: str, expect: list[str], **fields: Any) -> None:
        """Record fields without a state change, if the account is still in `expect`."""
        await self._store_all([name], expect, **fields)

    async def _store_all(self, names: list[str], expect: list[str], **fields: Any) -> list[AccountRow]:
        """Record the same fields for several accounts in one transaction, for each only if it is
        still in one of `expect` states; returns the rows written. One transaction rather than one
        per account: a hundred accounts migrated at once took a second of the hub's CPU that way."""
        if not names:
            return []
        rows = await self.store.update_accounts(
            {name: fields for name in names}, expect_states={name: expect for name in names}, skip_conflicts=True
        )
        if len(rows) < len(names):
            written = {row.name for row in rows}
            unwritten = ", ".join(n for n in names if n not in written)
            log.debug("account(s) %s: no longer %s: not written", unwritten, expect)
        if rows:
            self._notify()
        return rows

    def _sessions(self, zone_id: str | None) -> list[Session]:
        """Live sessions that take dynamic accounts, oldest first; only `zone_id`'s when given."""
        found = [
            s
            for s in self.registry.sessions.values()
            if s.dynamic_accounts_enabled and (zone_id is None or s.zone_id == zone_id)
        ]
        return sorted(found, key=lambda s: s.connected_at)

    def _sessions_following(self, name: str) -> list[Session]:
        """Sessions serving the account, or that took it and have not reported yet."""
        ids: set[str] = set()
        record = self.registry.accounts.get(name)
        if record is not None:
            ids |= record.sessions
        sent = self._sent.get(name)
        if sent is not None:
            ids |= sent.sessions
        return self._live(self.registry.sessions.get(i) for i in ids)

    def _live(self, sessions: Iterable[Session | None]) -> list[Session]:
        return [s for s in sessions if s is not None and self.registry.sessions.get(s.id) is s]

    def _connected_summary(self) -> str:
        sessions = list(self.registry.sessions.values())
        if not sessions:
            return " (no agent is connected)"
        shown = ", ".join(
            f"{s.agent_id} (zone {s.zone_id!r}{'' if s.dynamic_accounts_enabled else ', dynamic accounts disabled'})"
            for s in sessions[:10]
        )
        return f" (connected: {shown}{', ...' if len(sessions) > 10 else ''})"

    @contextlib.asynccontextmanager
    async def _locked(self, names: Iterable[str]) -> AsyncIterator[None]:
        """Hold the locks of these accounts (in name order, so two batches cannot deadlock)."""
        locks = [self._locks.setdefault(name, asyncio.Lock()) for name in sorted(set(names))]
        async with contextlib.AsyncExitStack() as stack:
            for lock in locks:
                await stack.enter_async_context(lock)
            yield

    def _spawn(self, coro: Awaitable[Any], what: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(f"accounts {what}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dynamic accounts: %s failed", task.get_name(), exc_info=task.exception())


def _check_unique(names: Iterable[str]) -> None:
    seen: set[str] = set()
    twice = []
    for name in names:
        if name in seen:
            twice.append(name)
        seen.add(name)
    if twice:
        raise InvalidRequest(f"{', '.join(map(repr, twice))} appear{'s' if len(twice) == 1 else ''} more than once")


def _settings(given: dict[str, Any]) -> dict[str, Any]:
    """The settings to store in `properties`: those given and not null."""
    return {key: given[key] for key in SETTINGS if given.get(key) is not None}


def _row_fields(row: AccountRow) -> dict[str, Any]:
    """A row as request fields (camelCase), to merge a change into."""
    return {
        "zoneId": row.zone_id,
        "kubeconfigFile": row.kubeconfig_file,
        **{key: row.properties.get(key) for key in SETTINGS},
    }


def _stored(row: AccountRow, given: dict[str, Any]) -> dict[str, Any]:
    """The column values a change sets, only those that differ from the row."""
    values: dict[str, Any] = {}
    if "zoneId" in given and given["zoneId"] != row.zone_id:
        values["zone_id"] = given["zoneId"]
    if "kubeconfigFile" in given and given["kubeconfigFile"] != row.kubeconfig_file:
        values["kubeconfig_file"] = given["kubeconfigFile"]
    properties = dict(row.properties)
    for key in SETTINGS:
        if key in given:
            if given[key] is None:
                properties.pop(key, None)
            else:
                properties[key] = given[key]
    if properties != row.properties:
        values["properties"] = properties
    return values


def _agent_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """The properties sent to the agent: the settings but `context`, which has its own field."""
    return {key: value for key, value in properties.items() if key in SETTINGS and key != "context"}
