"""Bring the hub's database schema to the latest revision, safely when replicas start together.

Alembic runs in code (no alembic.ini) on a connection of the store's async engine, through
`AsyncConnection.run_sync`. Upgrading a database that is already current is a no-op.

Several replicas may start at the same moment against one fresh database. Each takes a
database-wide lock before looking at the schema, so the first migrates and the others, once it
is done, find nothing left to do:

- PostgreSQL: `pg_advisory_xact_lock`, held until the migration's transaction ends (PostgreSQL
  DDL is transactional, so a failed migration leaves nothing behind).
- MySQL/MariaDB: `GET_LOCK`, a named lock held by the connection and released afterwards. Their
  DDL commits implicitly, so a migration that fails half way can leave a table behind; the lock
  at least keeps two replicas from racing to create the same one.
- SQLite: the store begins every transaction with `BEGIN IMMEDIATE` (see store.py), which takes
  the file's write lock, and waits for it up to the busy timeout.

Within one process there is one more lock, an asyncio one: Alembic keeps the running migration in
module globals (`alembic.context`, `alembic.op`), so two migrations interleaved on one event loop
(two stores opened at once, as tests do) would trample each other's. The hub has one event loop;
running migrations from two threads at once is not supported.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.util.exc import CommandError
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .errors import StoreError
from .models import VERSION_TABLE

__all__ = ["HEAD", "MIGRATION_LOCK_SECONDS", "upgrade"]

HEAD = "0006"
"""The newest revision in `migrations/versions`; a test checks it against Alembic's own view."""

MIGRATION_LOCK_SECONDS = 60
"""How long a starting replica waits for another one's migration on MySQL/MariaDB before it
gives up. (PostgreSQL waits without limit: the lock ends with the other's transaction.)"""

SCRIPT_LOCATION = "scaleagent.hub.store:migrations"
"""Found through importlib, so it works from a wheel as well as from a source checkout."""

_LOCK_NAME = "scaleagent.hub.store.migrations"
_PG_LOCK_KEY = 0x5CA1EA6E0001  # any fixed bigint; the same in every replica

log = logging.getLogger("scaleagent.hub.store")

_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _in_process_lock() -> asyncio.Lock:
    """The lock that keeps this event loop to one Alembic run at a time (see the module doc)."""
    loop = asyncio.get_running_loop()
    lock = _loop_locks.get(loop)
    if lock is None:
        lock = _loop_locks[loop] = asyncio.Lock()
    return lock


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for our migrations, with the connection env.py must use."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def _upgrade_sync(connection: Connection) -> str | None:
    """Run inside `run_sync`: upgrade to head and return the revision the database is now at."""
    command.upgrade(alembic_config(connection), "head")
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


async def upgrade(engine: AsyncEngine, display: str) -> str | None:
    """Upgrade the database behind `engine` to `HEAD` and return its revision. `display` is the
    redacted URL, for messages. Raises StoreError when another replica holds the migration lock
    too long or the database has a revision this code does not know (a newer hub migrated it).
    Connection failures propagate as they are: the caller turns them into a StoreError."""
    async with _in_process_lock():
        return await _upgrade_locked(engine, display)


async def _upgrade_locked(engine: AsyncEngine, display: str) -> str | None:
    async with engine.connect() as conn:
        dialect = conn.dialect.name
        if dialect == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        elif dialect == "mysql":
            got = (
                await conn.execute(
                    text("SELECT GET_LOCK(:name, :timeout)"), {"name": _LOCK_NAME, "timeout": MIGRATION_LOCK_SECONDS}
                )
            ).scalar()
            if got != 1:
                raise StoreError(
                    f"{display}: waited {MIGRATION_LOCK_SECONDS} s for another hub replica to finish migrating "
                    f"the database schema (lock {_LOCK_NAME!r}); is one stuck?"
                )
        try:
            try:
                revision = await conn.run_sync(_upgrade_sync)
            except CommandError as exc:
                raise StoreError(
                    f"{display}: cannot upgrade the database schema to revision {HEAD}: {exc}. "
                    "If a newer version of the hub has already upgraded this database, run that version"
                ) from None
            await conn.commit()
        finally:
            if dialect == "mysql":
                await _release_mysql_lock(conn)
    log.debug("database %s is at schema revision %s", display, revision)
    return revision


async def _release_mysql_lock(conn: AsyncConnection) -> None:
    """Release the named lock; if that fails (the connection broke), drop the connection, which
    releases it on the server too, rather than return it to the pool still holding the lock."""
    try:
        await conn.rollback()
        await conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _LOCK_NAME})
        await conn.rollback()
    except Exception:
        await conn.invalidate()
