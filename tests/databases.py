"""The real databases tests run against: an SQLite file, the local PostgreSQL and MariaDB.

The fixtures themselves (`postgres_db`, `mariadb_db`, `db_url`) are in conftest.py, so that every
test module can take them; this module holds what they are made of. PostgreSQL and MariaDB tests
share one database per test session, created under a unique name (so parallel runs and other
suites never meet) and dropped at the end; `db_url` gives each test an empty schema in it. A
server that is down fails the tests, with how to start it: scripts/test does
(scripts/setup.sh ensure_databases).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "test"}
MY = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "db": "test"}
HOW_TO_START = (
    "run the suite with scripts/test, which starts the local PostgreSQL and MariaDB "
    "(scripts/setup.sh ensure_databases), or start the server yourself"
)
BACKENDS = ["sqlite", "postgresql", "mariadb"]

T = TypeVar("T")


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from a sync session fixture, on its own thread and loop, so as not to
    disturb the event loops pytest-asyncio gives each test."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fn()).result()  # type: ignore[arg-type]


def unique_db_name() -> str:
    return f"scaleagent_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def emptied(url: str) -> str:
    """`url` (the session's PostgreSQL or MariaDB database), emptied of the tables earlier tests
    left: the hubs about to use it start from revision 0, as on a new installation."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from scaleagent.hub.store import async_url
    from scaleagent.hub.store.models import VERSION_TABLE, Base

    async def drop() -> None:
        engine = create_async_engine(async_url(url))
        try:
            async with engine.begin() as conn:
                for table in Base.metadata.sorted_tables:
                    await conn.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
                await conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
        finally:
            await engine.dispose()

    run_async(drop)
    return url
