"""`Store`: the hub's accounts table (`kubesvc_accounts`) behind a small async API.

One `Store` per hub process, opened from the `database.url` setting. It hides which database
is behind it: SQLite (one file, a single replica) or PostgreSQL / MySQL / MariaDB (shared by the
replicas). Every method is one short transaction, so no session outlives a call and nothing
holds a lock across an `await` of the caller's. Errors from the database come out as
`StoreError` with a readable reason and the URL redacted; a password never reaches a message
or a log, because the engine is created with `hide_parameters` and every message goes through
`_scrub`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from pydantic_core import PydanticCustomError
from sqlalchemy import Connection, delete, event, func, select, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from . import migrate
from .errors import (
    AccountExists,
    AccountNotFound,
    CredentialsExist,
    CredentialsNotFound,
    StateConflict,
    StoreBusy,
    StoreError,
    StoreUnavailable,
)
from .models import LENGTHS, SOURCES, STATES, Account, Credentials
from .urls import check_database_url, redact_url

__all__ = ["CONNECT_TIMEOUT_SECONDS", "SQLITE_BUSY_TIMEOUT_MS", "AccountRow", "CredentialsRow", "Store", "async_url"]

CONNECT_TIMEOUT_SECONDS = 10
"""How long opening a connection to a database server may take before the store reports it
unreachable (the drivers' own defaults are 60 s or none, far too long for a hub starting up)."""

SQLITE_BUSY_TIMEOUT_MS = 5000
"""How long an SQLite statement waits for another connection's write lock. The wait happens on
aiosqlite's own thread, never on the event loop."""

_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg", "mysql": "aiomysql", "mariadb": "aiomysql"}
"""The one async driver the hub ships for each database it supports."""

_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}
"""MariaDB goes through SQLAlchemy's `mysql` dialect, which detects MariaDB by itself; the
`mariadb` dialect would add nothing but a refusal to talk to MySQL."""

_FIELDS = (
    "state",
    "zone_id",
    "kubeconfig_file",
    "kubeconfig_encrypted",
    "properties",
    "kube_host",
    "cert_fingerprint",
    "agent_id",
    "error_message",
    "failed_count",
    "source",
    "desired_state",
)
"""What `upsert_account` may set. `id`, `name` and the timestamps belong to the store."""

log = logging.getLogger("scaleagent.hub.store")


# Reads select the table's columns, not ORM objects: a hundred accounts listed took 9 ms of CPU as
# objects (identity map, instrumented attributes) and 7.5 ms as rows; `GET /armory/accounts` lists them.
_ACCOUNT_COLUMNS = Account.__table__


@dataclass(frozen=True, slots=True)
class AccountRow:
    """One account as stored: a detached copy, safe to keep and pass around after the call.

    `created_at` and `updated_at` are aware UTC datetimes whatever the database;
    `kubeconfig_encrypted` is left out of `repr()` so that logging a row can't dump it.
    `source` and `desired_state` (schema revision 0002) come last, with defaults, so that code
    building rows by position keeps working.
    """

    id: int
    name: str
    state: str
    zone_id: str | None
    kubeconfig_file: str | None
    kubeconfig_encrypted: bytes | None = field(repr=False)
    properties: dict[str, Any]
    kube_host: str | None
    cert_fingerprint: str | None
    agent_id: str | None
    error_message: str | None
    failed_count: int
    created_at: datetime
    updated_at: datetime
    source: str = "agent"
    desired_state: str | None = None

    @classmethod
    def _from_model(cls, row: Any) -> AccountRow:
        """From an `Account` or a row of `_ACCOUNT_COLUMNS`: both name their values alike. (A
        column named as one of a Row's own attributes, `count` or `index` say, would need
        `row._mapping` here.)"""
        return cls(
            id=row.id,
            name=row.name,
            state=row.state,
            zone_id=row.zone_id,
            kubeconfig_file=row.kubeconfig_file,
            kubeconfig_encrypted=row.kubeconfig_encrypted,
            properties=dict(row.properties or {}),
            kube_host=row.kube_host,
            cert_fingerprint=row.cert_fingerprint,
            agent_id=row.agent_id,
            error_message=row.error_message,
            failed_count=row.failed_count,
            created_at=_utc(row.created_at),
            updated_at=_utc(row.updated_at),
            source=row.source or "agent",
            desired_state=row.desired_state,
        )


@dataclass(frozen=True, slots=True)
class CredentialsRow:
    """One stored Account Management definition (`clouddriver_credentials`), detached like
    `AccountRow`. `body` is the definition as accepted (a fresh copy: changing it changes
    nothing stored); `migrated_at` is when it was made a dynamic account, or None."""

    id: int
    name: str
    type: str
    body: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    migrated_at: datetime | None

    @classmethod
    def _from_model(cls, row: Credentials) -> CredentialsRow:
        return cls(
            id=row.id,
            name=row.name,
            type=row.type,
            body=json.loads(json.dumps(row.body or {})),
            created_at=_utc(row.created_at),
            updated_at=_utc(row.updated_at),
            migrated_at=None if row.migrated_at is None else _utc(row.migrated_at),
        )


_KEEP: Any = object()
"""`update_credentials`' default for "leave this column as it is" (None is a value: it clears)."""


def async_url(url: str) -> URL:
    """The SQLAlchemy URL the store connects with: `url` (a `database.url` setting) with the
    hub's async driver for its database, and MySQL's charset set to utf8mb4 unless given.

    `sqlite://`, `postgresql://`, `mysql://` and `mariadb://` get aiosqlite, asyncpg and
    aiomysql; naming one of those drivers explicitly is fine, naming another (psycopg2,
    pymysql, ...) is refused, since the hub only ships these and must not block its event loop.
    Raises StoreError; messages never repeat the URL's password.
    """
    try:
        check_database_url(url)
    except PydanticCustomError as exc:
        raise StoreError(f"database URL: {exc.message()}") from None
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # SQLAlchemy's message repeats the URL
        raise StoreError(
            "database URL: SQLAlchemy cannot parse it; the value is not shown, it may hold a password"
        ) from None
    dialect, _, driver = parsed.drivername.partition("+")
    wanted = _DRIVERS[dialect]  # check_database_url admitted only these dialects
    if driver and driver != wanted:
        raise StoreError(
            f"database URL {redact_url(url)}: the driver {driver!r} is not supported for {dialect}; the hub "
            f"is asynchronous and ships {wanted}: write '{dialect}://...' or '{dialect}+{wanted}://...'"
        )
    parsed = parsed.set(drivername=f"{_DIALECTS[dialect]}+{wanted}")
    if dialect == "sqlite":
        if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
            raise StoreError(
                f"database URL {redact_url(url)}: an in-memory SQLite database would vanish with the hub "
                "and cannot be shared by its connections; name a file: 'sqlite:///scale-agent-hub.db'"
            )
    elif _DIALECTS[dialect] == "mysql" and "charset" not in parsed.query:
        # Without it the connection may use latin1 or 3-byte utf8, and names or messages with
        # other characters would fail or be mangled on MySQL only.
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


class Store:
    """The hub's SQL store. Create it with `await Store.open(url)`, end with `await close()`
    (or use `async with`). Safe to share between tasks: each call takes its own connection."""

    url_for_display: str
    """The database URL with any password replaced by `***`: for logs and messages."""

    def __init__(self, engine: AsyncEngine, url_for_display: str, secret: str | None) -> None:
        """Use `Store.open()`; this only wires up an engine that is already migrated."""
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self._secret = secret
        self.url_for_display = url_for_display

    @classmethod
    async def open(cls, url: str) -> Store:
        """Connect to the database at `url` (a `database.url` setting) and bring its schema up
        to date, creating the table on first use; for SQLite, create the file and its directory.

        Raises StoreError, with the URL redacted, when the URL is unsupported, the database
        cannot be reached or refuses us, or its schema is newer than this hub's.
        """
        target = async_url(url)
        display = redact_url(url)
        secret = target.password or target.query.get("password") or None
        if not isinstance(secret, str):  # a repeated ?password= parameter: hide none rather than guess
            secret = None
        if target.get_backend_name() == "sqlite":
            _make_parent_dir(target, display)
        engine = _create_engine(target)
        store = cls(engine, display, secret)
        try:
            revision = await migrate.upgrade(engine, display)
        except StoreError:
            await engine.dispose()
            raise
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the database {_where(target)} ({display}): {store._reason(exc)}") from None
        log.info("database %s opened (schema revision %s)", display, revision)
        return store

    async def close(self) -> None:
        """Close every pooled connection. The store can't be used afterwards."""
        await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Store({self.url_for_display!r})"

    # --- accounts ---------------------------------------------------------------------------

    async def upsert_account(self, name: str, **fields: Any) -> AccountRow:
        """Create the account `name`, or update the fields given if it exists; return it as stored.

        Fields are the columns other than `id`, `name` and the timestamps (see `AccountRow`);
        those not given keep their value, or on insert take their default (`state` INACTIVE,
        the state of a newly added account; `properties` {}; `failed_count` 0).
        `updated_at` is set to now (or kept, if it is later: replicas' clocks differ, and it
        must never go backwards), and `created_at` to now on insert.

        Two replicas creating the same name at once: the loser's insert hits the unique
        constraint, and it retries once as an update, so both calls succeed.
        """
        _check_name(name)
        values = _check_fields(fields)
        for attempt in (1, 2):
            try:
                async with self._transaction("upsert_account", name) as session:
                    row = (await session.execute(select(Account).where(Account.name == name))).scalar_one_or_none()
                    now = _now()
                    if row is None:
                        row = Account(
                            name=name, state="INACTIVE", properties={}, failed_count=0, created_at=now, updated_at=now
                        )
                        session.add(row)
                    else:
                        row.updated_at = max(now, _utc(row.updated_at))
                    for key, value in values.items():
                        setattr(row, key, value)
                    await session.flush()
                    result = AccountRow._from_model(row)
                return result
            except IntegrityError as exc:
                if attempt == 2:
                    raise StoreError(
                        f"upsert_account {name!r} on {self.url_for_display}: the database refused it twice: "
                        f"{self._reason(exc)}"
                    ) from None
                log.debug("account %r was created concurrently; retrying as an update", name)
        raise AssertionError("unreachable")

    async def get_account(self, name: str) -> AccountRow | None:
        """The account `name`, or None if there is none."""
        _check_name(name)
        async with self._transaction("get_account", name) as session:
            row = (await session.execute(select(_ACCOUNT_COLUMNS).where(Account.name == name))).one_or_none()
            return None if row is None else AccountRow._from_model(row)

    async def list_accounts(
        self, *, states: Collection[str] = (), source: str | None = None, names: Collection[str] = ()
    ) -> list[AccountRow]:
        """All accounts ordered by name, or only those in one of `states` when it is not empty,
        only those created by `source` (see SOURCES) when it is given, and only those named in
        `names` when it is not empty."""
        if isinstance(states, str):  # list_accounts(states="ACTIVE") would otherwise mean letters
            raise StoreError(f"list_accounts: states must be a collection of states, not the string {states!r}")
        if isinstance(names, str):
            raise StoreError(f"list_accounts: names must be a collection of names, not the string {names!r}")
        for name in names:
            _check_name(name)
        for state in states:
            _check_state(state)
        if source is not None:
            _check_source(source)
        query = select(_ACCOUNT_COLUMNS).order_by(Account.name)
        if states:
            query = query.where(Account.state.in_(sorted(set(states))))
        if source is not None:
            query = query.where(Account.source == source)
        if names:
            query = query.where(Account.name.in_(sorted(set(names))))
        async with self._transaction("list_accounts") as session:
            return [AccountRow._from_model(row) for row in await session.execute(query)]

    async def count_by_state(self) -> dict[str, int]:
        """How many accounts are in each lifecycle state (states with none are left out)."""
        query = select(Account.state, func.count()).group_by(Account.state)
        async with self._transaction("count accounts by state") as session:
            return {state: int(n) for state, n in (await session.execute(query)).all()}

    async def set_state(self, name: str, state: str, *, error_message: str | None = None) -> None:
        """Move the account `name` to `state` and set its `error_message` (None clears it: a
        message describes the latest failure, not history). `failed_count` is left to the caller
        (`upsert_account(name, failed_count=...)`). Raises AccountNotFound if there is no such
        account."""
        _check_name(name)
        _check_state(state)
        if error_message is not None and not isinstance(error_message, str):
            raise StoreError(
                f"set_state {name!r}: error_message must be a string or None, got {type(error_message).__name__}"
            )
        async with self._transaction("set_state", name) as session:
            result = await session.execute(
                update(Account)
                .where(Account.name == name)
                .values(state=state, error_message=error_message, updated_at=_now())
                .execution_options(synchronize_session=False)
            )
            if _rowcount(result) == 0:
                raise AccountNotFound(name)

    async def delete_account(self, name: str) -> bool:
        """Delete the account `name`; False if there was none (deleting twice is not an error,
        so that two replicas carrying out the same request both succeed)."""
        _check_name(name)
        async with self._transaction("delete_account", name) as session:
            result = await session.execute(
                delete(Account).where(Account.name == name).execution_options(synchronize_session=False)
            )
            return _rowcount(result) > 0

    async def create_accounts(self, accounts: Mapping[str, Mapping[str, Any]]) -> list[AccountRow]:
        """Create every account of `accounts` ({name: fields}, fields as for `upsert_account`) in
        one transaction, or none: if any name already has a row, raise AccountExists naming all
        such names and create nothing. For requests that must be applied whole or not at all.

        Another replica creating one of the names at the same moment makes the insert hit the
        unique constraint; that is reported as AccountExists too (the name now exists)."""
        checked = {name: _check_fields(dict(fields)) for name, fields in accounts.items()}
        for name in checked:
            _check_name(name)
        if not checked:
            return []
        try:
            async with self._transaction("create_accounts") as session:
                existing = sorted(
                    (await session.execute(select(Account.name).where(Account.name.in_(list(checked))))).scalars()
                )
                if existing:
                    raise AccountExists(existing)
                now = _now()
                rows = []
                for name, values in checked.items():
                    row = Account(
                        name=name,
                        state="INACTIVE",
                        properties={},
                        failed_count=0,
                        created_at=now,
                        updated_at=now,
                        source="agent",
                    )
                    for key, value in values.items():
                        setattr(row, key, value)
                    session.add(row)
                    rows.append(row)
                await session.flush()
                return [AccountRow._from_model(row) for row in rows]
        except IntegrityError:
            raced = sorted(r.name for r in await self._existing(list(checked)))
            raise AccountExists(raced or sorted(checked)) from None

    async def update_accounts(
        self,
        updates: Mapping[str, Mapping[str, Any]],
        *,
        expect_states: Mapping[str, Collection[str]] | None = None,
        skip_conflicts: bool = False,
    ) -> list[AccountRow]:
        """Update existing accounts ({name: fields}) in one transaction, all or none (but see
        `skip_conflicts`); return them as stored, in the order given.

        `expect_states` makes an update conditional: {name: states} means "only if the account
        is in one of these states now", checked with the row locked (SELECT ... FOR UPDATE; on
        SQLite the transaction holds the file's write lock), so that two replicas or two tasks
        cannot both move an account out of the same state. Raises AccountNotFound for a name
        without a row and StateConflict for a state that is not the expected one; either way
        nothing is written. Unlike `upsert_account`, this never creates a row: a write about an
        account deleted meanwhile must not bring it back.

        With `skip_conflicts`, an account without a row or in another state is left out (not
        written, not returned) instead of failing the others: how a hundred accounts move on in
        one transaction where a hundred transactions took a second, each account only if no one
        moved it first."""
        checked = {name: _check_fields(dict(fields)) for name, fields in updates.items()}
        expect = {name: sorted(set(states)) for name, states in (expect_states or {}).items()}
        for name in [*checked, *expect]:
            _check_name(name)
        for name, states in expect.items():
            if isinstance((expect_states or {})[name], str):
                raise StoreError(f"update_accounts: expected states of {name!r} must be a collection, not a string")
            if name not in checked:
                raise StoreError(f"update_accounts: expected states given for {name!r}, which is not updated")
            for state in states:
                _check_state(state)
        if not checked:
            return []
        async with self._transaction("update_accounts") as session:
            found = {
                row.name: row
                for row in (
                    await session.execute(select(Account).where(Account.name.in_(list(checked))).with_for_update())
                ).scalars()
            }
            now = _now()
            written = []
            for name, values in checked.items():
                row = found.get(name)
                if row is None:
                    if skip_conflicts:
                        continue
                    raise AccountNotFound(name)
                if name in expect and row.state not in expect[name]:
                    if skip_conflicts:
                        continue
                    raise StateConflict(name, expect[name], row.state)
                row.updated_at = max(now, _utc(row.updated_at))
                for key, value in values.items():
                    setattr(row, key, value)
                written.append(row)
            await session.flush()
            return [AccountRow._from_model(row) for row in written]

    async def update_account(
        self, name: str, *, expect_states: Collection[str] | None = None, **fields: Any
    ) -> AccountRow:
        """Update one existing account; `update_accounts` for one name (same errors, never
        creates a row)."""
        expect = None if expect_states is None else {name: expect_states}
        return (await self.update_accounts({name: fields}, expect_states=expect))[0]

    async def delete_accounts(self, names: Collection[str]) -> list[str]:
        """Delete the accounts `names` in one transaction; return those that existed."""
        if isinstance(names, str):
            raise StoreError(f"delete_accounts: names must be a collection of names, not the string {names!r}")
        for name in names:
            _check_name(name)
        if not names:
            return []
        async with self._transaction("delete_accounts") as session:
            existing = sorted(
                (
                    await session.execute(select(Account.name).where(Account.name.in_(list(names))).with_for_update())
                ).scalars()
            )
            if existing:
                await session.execute(
                    delete(Account).where(Account.name.in_(existing)).execution_options(synchronize_session=False)
                )
            return existing

    async def _existing(self, names: list[str]) -> list[AccountRow]:
        async with self._transaction("create_accounts") as session:
            return [
                AccountRow._from_model(row)
                for row in (await session.execute(select(Account).where(Account.name.in_(names)))).scalars()
            ]

    # --- Account Management definitions (clouddriver_credentials) -------------------------------

    async def create_credentials(
        self, name: str, type: str, body: Mapping[str, Any], *, migrated_at: datetime | None = None
    ) -> CredentialsRow:
        """Store a new definition; CredentialsExist if the name has one (also when another replica
        stores it at the same moment: the unique constraint decides), and nothing is written."""
        _check_name(name)
        values = _check_credentials(type, body)
        try:
            async with self._transaction("create_credentials", name) as session:
                exists = (
                    await session.execute(select(Credentials.id).where(Credentials.name == name))
                ).scalar_one_or_none()
                if exists is not None:
                    raise CredentialsExist(name)
                now = _now()
                row = Credentials(name=name, created_at=now, updated_at=now, migrated_at=migrated_at, **values)
                session.add(row)
                await session.flush()
                return CredentialsRow._from_model(row)
        except IntegrityError:
            raise CredentialsExist(name) from None

    async def update_credentials(
        self,
        name: str,
        *,
        type: str | None = None,
        body: Mapping[str, Any] | None = None,
        migrated_at: datetime | None = _KEEP,
    ) -> CredentialsRow:
        """Replace an existing definition's type and body (those given) and/or set `migrated_at`
        (None clears it); CredentialsNotFound if there is none. Never creates one: a write about a
        definition deleted meanwhile must not bring it back."""
        _check_name(name)
        values: dict[str, Any] = {}
        if body is not None:
            values = _check_credentials(type if type is not None else str(body.get("type", "")), body)
        elif type is not None:
            raise StoreError("update_credentials: a new type needs its body")
        if migrated_at is not _KEEP:
            values["migrated_at"] = migrated_at
        async with self._transaction("update_credentials", name) as session:
            row = (
                await session.execute(select(Credentials).where(Credentials.name == name).with_for_update())
            ).scalar_one_or_none()
            if row is None:
                raise CredentialsNotFound(name)
            row.updated_at = max(_now(), _utc(row.updated_at))
            for key, value in values.items():
                setattr(row, key, value)
            await session.flush()
            return CredentialsRow._from_model(row)

    async def upsert_credentials(
        self, name: str, type: str, body: Mapping[str, Any], *, migrated: bool = False
    ) -> CredentialsRow:
        """Store the definition, replacing any by that name. `migrated` records that it is a
        dynamic account now (keeping an earlier `migrated_at`). Two replicas writing the same new
        name at once: the loser's insert hits the unique constraint and it retries as an update."""
        _check_name(name)
        values = _check_credentials(type, body)
        for attempt in (1, 2):
            try:
                async with self._transaction("upsert_credentials", name) as session:
                    row = (
                        await session.execute(select(Credentials).where(Credentials.name == name).with_for_update())
                    ).scalar_one_or_none()
                    now = _now()
                    if row is None:
                        row = Credentials(name=name, created_at=now, updated_at=now, migrated_at=None)
                        session.add(row)
                    else:
                        row.updated_at = max(now, _utc(row.updated_at))
                    for key, value in values.items():
                        setattr(row, key, value)
                    if migrated and row.migrated_at is None:
                        row.migrated_at = now
                    await session.flush()
                    return CredentialsRow._from_model(row)
            except IntegrityError as exc:
                if attempt == 2:
                    raise StoreError(
                        f"upsert_credentials {name!r} on {self.url_for_display}: the database refused "
                        f"it twice: {self._reason(exc)}"
                    ) from None
        raise AssertionError("unreachable")

    async def get_credentials(self, name: str) -> CredentialsRow | None:
        """The definition `name`, or None."""
        _check_name(name)
        async with self._transaction("get_credentials", name) as session:
            row = (await session.execute(select(Credentials).where(Credentials.name == name))).scalar_one_or_none()
            return None if row is None else CredentialsRow._from_model(row)

    async def list_credentials(
        self, *, type: str | None = None, start: str | None = None, limit: int | None = None
    ) -> list[CredentialsRow]:
        """Definitions ordered by name: only of `type` when given, from the name `start` on
        (inclusive, as Clouddriver's `startingAccountName`), at most `limit`."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise StoreError(f"list_credentials: limit must be an integer >= 0, got {limit!r}")
        query = select(Credentials).order_by(Credentials.name)
        if type is not None:
            query = query.where(Credentials.type == type)
        if start is not None:
            query = query.where(Credentials.name >= start)
        if limit is not None:
            query = query.limit(limit)
        async with self._transaction("list_credentials") as session:
            return [CredentialsRow._from_model(row) for row in (await session.execute(query)).scalars()]

    async def delete_credentials(self, name: str) -> bool:
        """Delete the definition `name`; False if there was none (twice is not an error)."""
        _check_name(name)
        async with self._transaction("delete_credentials", name) as session:
            result = await session.execute(
                delete(Credentials).where(Credentials.name == name).execution_options(synchronize_session=False)
            )
            return _rowcount(result) > 0

    async def claim_credentials(self, name: str) -> bool:
        """Set `migrated_at` to now if it is not set yet, in one conditional UPDATE; True if this
        call set it. Replicas scanning at the same time each try, and only one migrates."""
        _check_name(name)
        async with self._transaction("claim_credentials", name) as session:
            result = await session.execute(
                update(Credentials)
                .where(Credentials.name == name, Credentials.migrated_at.is_(None))
                .values(migrated_at=_now())
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result) == 1

    # --- helpers ------------------------------------------------------------------------------

    def transaction(self, action: str, name: str | None = None) -> Any:
        """`async with store.transaction("what"):` one session and one transaction, for the other
        tables' modules (shared.py); errors become StoreError like this module's."""
        return self._transaction(action, name)

    @asynccontextmanager
    async def _transaction(self, action: str, name: str | None = None) -> AsyncIterator[AsyncSession]:
        """One session and one transaction, committed on success. Driver and connection errors
        become StoreError naming the action, the account and the database; IntegrityError passes
        through untouched for `upsert_account` to retry. What running again later may cure is told
        apart (StoreBusy, StoreUnavailable) from what it cannot (any other StoreError)."""
        try:
            async with self._sessions.begin() as session:
                yield session
        except (StoreError, IntegrityError):
            raise
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            subject = f"{action} {name!r}" if name is not None else action
            error = StoreBusy if _gave_up_for_another(exc) else StoreUnavailable if _unavailable(exc) else StoreError
            raise error(f"{subject} on {self.url_for_display}: {self._reason(exc)}") from None

    def _reason(self, exc: BaseException) -> str:
        """What the database or driver said, in one line, without SQL, parameters or password.

        SQLAlchemy's own message appends the statement, and the async adapters wrap the
        driver's exception in their own class; the driver's message is what a user can act on.
        """
        inner: BaseException = exc
        if isinstance(exc, DBAPIError) and exc.orig is not None:
            inner = exc.orig
            while inner.__cause__ is not None and type(inner).__module__.startswith("sqlalchemy"):
                inner = inner.__cause__
        args = inner.args
        if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
            text = f"{args[1]} (error {args[0]})"  # PyMySQL's (code, message)
        else:
            text = str(inner).strip() or type(inner).__name__
        if isinstance(exc, SQLAlchemyError) and inner is exc:
            text = text.split("\n[SQL:", 1)[0]
        text = " ".join(text.split())
        if self._secret:
            text = text.replace(self._secret, "***")
        return text


def _create_engine(url: URL) -> AsyncEngine:
    """An async engine for `url` (already mapped by `async_url`), with the per-database settings
    the store relies on."""
    backend = url.get_backend_name()
    options: dict[str, Any] = {"hide_parameters": True}  # errors and logs must not show values
    if backend == "postgresql":
        options |= {"pool_pre_ping": True, "connect_args": {"timeout": CONNECT_TIMEOUT_SECONDS}}
    elif backend == "mysql":
        # MySQL closes idle connections after wait_timeout (8 h by default): recycle before that.
        options |= {
            "pool_pre_ping": True,
            "pool_recycle": 3600,
            "connect_args": {"connect_timeout": CONNECT_TIMEOUT_SECONDS},
        }
    engine = create_async_engine(url, **options)
    if backend == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        event.listen(engine.sync_engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    """Set up each new SQLite connection.

    - `isolation_level = None`: stop Python's sqlite3 from starting transactions itself (it
      skips them for SELECT and DDL); `_sqlite_on_begin` begins them instead.
    - WAL: readers don't block the writer nor it them, so a slow reader can't stall the hub.
    - busy_timeout: a connection waiting for another's write lock retries for a while instead
      of failing at once with "database is locked". It waits on aiosqlite's thread.
    - synchronous=NORMAL: with WAL still crash-safe (a power cut may lose the last commits,
      never corrupt the file), and commits don't each wait for an fsync.
    """
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    """Begin every transaction with the write lock (`BEGIN IMMEDIATE`). A deferred BEGIN would
    let two transactions read and then both try to write, and in WAL mode the second fails at
    once (SQLITE_BUSY) instead of waiting; taking the lock first makes it wait its turn, and also
    serialises two hubs migrating one file."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _make_parent_dir(url: URL, display: str) -> None:
    """Create the SQLite file's directory, so that a fresh install's default path just works."""
    database = url.database or ""
    if database.startswith("file:"):  # a URI filename (?uri=true): leave it to SQLite
        return
    parent = Path(database).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the directory {str(parent)!r} for the database {display}: {exc.strerror}"
        ) from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"the directory {str(parent)!r} of the database {display} is not writable by this user; SQLite "
            "needs to create its journal files next to the database"
        )


def _where(url: URL) -> str:
    """Where the database is, for an error message: the file, host:port or socket."""
    if url.get_backend_name() == "sqlite":
        return f"file {url.database!r}"
    host = url.host or url.query.get("host") or url.query.get("unix_socket") or "localhost"
    if isinstance(host, tuple):
        host = ",".join(host)
    return f"at {host}:{url.port}" if url.port else f"at {host}"


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise StoreError(f"an account name must be a non-empty string, got {name!r}")
    if len(name) > LENGTHS["name"]:
        raise StoreError(f"account name {name[:40]!r}... is {len(name)} characters long; the most is {LENGTHS['name']}")


def _check_state(state: object) -> None:
    if state not in STATES:
        raise StoreError(f"{state!r} is not an account state; use one of {', '.join(STATES)}")


def _check_source(source: object) -> None:
    if source not in SOURCES:
        raise StoreError(f"{source!r} is not an account source; use one of {', '.join(SOURCES)}")


def _check_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Validate `upsert_account`'s fields before any SQL, so that a mistake is reported by name
    and alike on every database (they differ on over-long strings and on types)."""
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise StoreError(
            f"unknown account field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(_FIELDS)}"
        )
    values = dict(fields)
    for key, value in values.items():
        if key == "state":
            _check_state(value)
        elif key == "desired_state":
            if value is not None:
                _check_state(value)
        elif key == "source":
            _check_source(value)
        elif key == "kubeconfig_encrypted":
            if value is not None and not isinstance(value, bytes | bytearray | memoryview):
                raise StoreError(f"kubeconfig_encrypted must be bytes or None, got {type(value).__name__}")
            values[key] = None if value is None else bytes(value)
        elif key == "properties":
            if not isinstance(value, dict):
                raise StoreError(f"properties must be a dict, got {type(value).__name__}")
            try:
                # A round trip both checks it is JSON and detaches it from the caller's object.
                values[key] = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise StoreError(
                    f"properties must be JSON (str keys; str, number, bool, None, list, dict values): {exc}"
                ) from None
        elif key == "failed_count":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise StoreError(f"failed_count must be an integer >= 0, got {value!r}")
        else:
            if value is not None and not isinstance(value, str):
                raise StoreError(f"{key} must be a string or None, got {type(value).__name__}")
            limit = LENGTHS.get(key)
            if value is not None and limit is not None and len(value) > limit:
                raise StoreError(f"{key} is {len(value)} characters long; the most is {limit}")
    return values


def _check_credentials(kind: object, body: object) -> dict[str, Any]:
    """Validate a definition's type (`kind`) and body before any SQL; the values to store."""
    if not isinstance(kind, str) or not kind:
        raise StoreError(f"a definition's type must be a non-empty string, got {kind!r}")
    if len(kind) > LENGTHS["type"]:
        raise StoreError(f"type is {len(kind)} characters long; the most is {LENGTHS['type']}")
    if not isinstance(body, Mapping):
        raise StoreError(f"a definition's body must be a mapping, got {type(body).__name__}")
    try:
        copied = json.loads(json.dumps(dict(body), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"a definition's body must be JSON: {exc}") from None
    return {"type": kind, "body": copied}


def _now() -> datetime:
    """Now in UTC, to the microsecond every database keeps."""
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    """Make an aware UTC datetime of a value from the ORM; `UtcDateTime` does this on load, this
    covers values the session still holds as they were assigned."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _rowcount(result: Any) -> int:
    """Rows an UPDATE or DELETE matched (SQLAlchemy types execute()'s result as a plain Result,
    which has no rowcount; for these statements it is a CursorResult, which does)."""
    return int(result.rowcount)


# MySQL/MariaDB: deadlock found (1213); PostgreSQL: serialization failure, deadlock detected.
_DEADLOCK_CODES = {1213}
_DEADLOCK_SQLSTATES = {"40001", "40P01"}


def _gave_up_for_another(exc: BaseException) -> bool:
    """Whether the database rolled this transaction back to let a concurrent one through."""
    if not isinstance(exc, DBAPIError) or exc.orig is None:
        return False
    inner: BaseException | None = exc.orig
    while inner is not None:
        args = getattr(inner, "args", ())
        if args and isinstance(args[0], int) and args[0] in _DEADLOCK_CODES:
            return True
        if (
            getattr(inner, "sqlstate", None) in _DEADLOCK_SQLSTATES
            or getattr(inner, "pgcode", None) in _DEADLOCK_SQLSTATES
        ):
            return True
        inner = inner.__cause__
    return False


# What says the database could not do it now but may later (StoreUnavailable), by database:
# SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), another connection holding the lock past busy_timeout.
_SQLITE_BUSY_CODES = {5, 6}
# MySQL/MariaDB: too many connections (1040), server shutdown (1053), network errors (1158-1161),
# lock wait timeout (1205), connection killed (1927), idle client disconnected (4031), and the
# client's own: cannot connect (2002, 2003), server gone away (2006), connection lost (2013, 2055).
_MYSQL_UNAVAILABLE_CODES = {1040, 1053, 1158, 1159, 1160, 1161, 1205, 1927, 4031, 2002, 2003, 2006, 2013, 2055}
# PostgreSQL: a connection exception (class 08), out of resources (class 53: disk full, out of memory,
# too many connections), the server shutting down or starting (57P01, 57P02, 57P03), lock not available
# (55P03, a lock_timeout).
_PG_UNAVAILABLE_CLASSES = ("08", "53")
_PG_UNAVAILABLE_SQLSTATES = {"57P01", "57P02", "57P03", "55P03"}


def _unavailable(exc: BaseException) -> bool:
    """Whether the database could not do it now for a reason that passes (StoreUnavailable): it was
    unreachable, the connection broke, a lock or every pooled connection stayed busy past the wait.
    Anything else (a constraint, a value the database refuses, a missing table) fails the same way
    when run again, and is a plain StoreError."""
    if isinstance(exc, OSError | TimeoutError | PoolTimeout):
        return True  # cannot connect or the connection broke; no pooled connection came free in time
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True  # SQLAlchemy saw the connection drop under the statement
    inner: BaseException | None = exc.orig
    while inner is not None:
        if isinstance(inner, OSError | TimeoutError):
            return True
        if getattr(inner, "sqlite_errorcode", None) in _SQLITE_BUSY_CODES:
            return True
        args = getattr(inner, "args", ())
        if args and isinstance(args[0], int) and args[0] in _MYSQL_UNAVAILABLE_CODES:
            return True
        sqlstate = getattr(inner, "sqlstate", None) or getattr(inner, "pgcode", None)
        if isinstance(sqlstate, str) and (
            sqlstate[:2] in _PG_UNAVAILABLE_CLASSES or sqlstate in _PG_UNAVAILABLE_SQLSTATES
        ):
            return True
        inner = inner.__cause__
    return False
