"""The hub's SQL store against real databases: an SQLite file, the local PostgreSQL and MariaDB.

Every test that touches a database runs on all three (the `db_url` fixture, in conftest.py; see
tests/databases.py). PostgreSQL and MariaDB tests share one database per test session, created
under a unique name (so parallel runs and other suites never meet) and dropped at the end; each
test starts from an empty schema in it. A server that is down fails the tests, with how to start
it: scripts/test does (scripts/setup.sh ensure_databases).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, insert, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from scaleagent.hub.store import (
    STATES,
    AccountExists,
    AccountNotFound,
    AccountRow,
    StateConflict,
    Store,
    StoreError,
    StoreTransient,
    StoreUnavailable,
    async_url,
)
from scaleagent.hub.store.migrate import HEAD, alembic_config
from scaleagent.hub.store.models import VERSION_TABLE, Account, Base

T = TypeVar("T")


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    async with await Store.open(db_url) as opened:
        yield opened


async def with_engine(url: str, fn: Callable[[Connection], T]) -> T:
    """Run `fn` on a plain connection of our own, to look at the database behind the store's back."""
    engine: AsyncEngine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


# --- schema and migrations -------------------------------------------------------------------


async def test_open_creates_the_table_and_reopening_changes_nothing(db_url: str) -> None:
    async with await Store.open(db_url) as first:
        await first.upsert_account("kept")
    columns = await with_engine(db_url, lambda c: {col["name"] for col in inspect(c).get_columns("kubesvc_accounts")})
    assert columns == {column.name for column in Account.__table__.columns}
    assert await with_engine(db_url, current_revision) == HEAD

    async with await Store.open(db_url) as second:  # already at head: a no-op, data untouched
        assert [a.name for a in await second.list_accounts()] == ["kept"]
    assert await with_engine(db_url, current_revision) == HEAD


async def test_models_agree_with_the_migrations(store: Store, db_url: str) -> None:
    """The models describe the table the migrations create: autogenerate finds nothing to do."""

    def diff(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE, "compare_type": True})
        return compare_metadata(context, Base.metadata)

    assert await with_engine(db_url, diff) == []


def test_head_constant_matches_the_scripts() -> None:
    assert ScriptDirectory.from_config(alembic_config(None)).get_current_head() == HEAD  # type: ignore[arg-type]


async def test_replicas_starting_together_both_open(db_url: str) -> None:
    stores = await asyncio.gather(*(Store.open(db_url) for _ in range(3)))
    try:
        await stores[0].upsert_account("a")
        assert [a.name for a in await stores[2].list_accounts()] == ["a"]
    finally:
        for s in stores:
            await s.close()


async def test_a_schema_newer_than_the_hub_is_refused(store: Store, db_url: str) -> None:
    await store.close()
    await with_engine(db_url, lambda c: c.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")))
    with pytest.raises(StoreError, match=rf"revision {HEAD}.*newer version of the hub"):
        await Store.open(db_url)


# --- accounts ----------------------------------------------------------------------------------


async def test_upsert_inserts_then_updates(store: Store) -> None:
    before = datetime.now(UTC)
    created = await store.upsert_account("acc-1", zone_id="zone-a", kubeconfig_file="encryptedFile:k8s!n:kc!k:config")
    assert (created.name, created.state, created.zone_id, created.properties, created.failed_count) == (
        "acc-1",
        "INACTIVE",
        "zone-a",
        {},
        0,
    )
    assert created.created_at.tzinfo is UTC and created.created_at == created.updated_at
    assert before <= created.created_at <= datetime.now(UTC)

    updated = await store.upsert_account("acc-1", state="ACTIVE", agent_id="agent-7", failed_count=2)
    assert updated.id == created.id
    assert (updated.state, updated.zone_id, updated.agent_id, updated.failed_count) == (
        "ACTIVE",
        "zone-a",
        "agent-7",
        2,
    )
    assert updated.created_at == created.created_at
    assert updated.updated_at >= created.updated_at
    assert await store.get_account("acc-1") == updated
    assert await store.get_account("nope") is None


async def test_list_filters_by_state(store: Store) -> None:
    for name, state in [("c", "ACTIVE"), ("a", "FAILED"), ("b", "ACTIVE"), ("d", "INACTIVE")]:
        await store.upsert_account(name, state=state)
    assert [a.name for a in await store.list_accounts()] == ["a", "b", "c", "d"]
    assert [a.name for a in await store.list_accounts(states=["ACTIVE"])] == ["b", "c"]
    assert [a.name for a in await store.list_accounts(states={"FAILED", "INACTIVE"})] == ["a", "d"]
    assert await store.list_accounts(states=["ORPHANED"]) == []
    with pytest.raises(StoreError, match="'RUNNING' is not an account state"):
        await store.list_accounts(states=["RUNNING"])


async def test_set_state_sets_and_clears_the_error(store: Store) -> None:
    created = await store.upsert_account("acc")
    await store.set_state("acc", "FAILED", error_message="cannot reach https://10.0.0.1:6443: timeout")
    failed = await store.get_account("acc")
    assert failed is not None and (failed.state, failed.error_message) == (
        "FAILED",
        "cannot reach https://10.0.0.1:6443: timeout",
    )
    assert failed.updated_at >= created.updated_at and failed.created_at == created.created_at
    await store.set_state("acc", "ACTIVE")
    active = await store.get_account("acc")
    assert active is not None and (active.state, active.error_message) == ("ACTIVE", None)
    with pytest.raises(AccountNotFound, match="no account named 'ghost'"):
        await store.set_state("ghost", "ACTIVE")
    with pytest.raises(StoreError, match="'active' is not an account state"):
        await store.set_state("acc", "active")


async def test_delete(store: Store) -> None:
    await store.upsert_account("gone")
    await store.upsert_account("stays")
    assert await store.delete_account("gone") is True
    assert await store.delete_account("gone") is False
    assert [a.name for a in await store.list_accounts()] == ["stays"]


async def test_values_round_trip_exactly(store: Store) -> None:
    """Unicode everywhere, nested JSON, bytes, microseconds, and values past MySQL's 64 KiB TEXT."""
    properties = {
        "namespaces": ["web", "données"],
        "labels": {"équipe": "платформа", "emoji": "🚀"},
        "limits": {"n": 3, "ratio": 0.5, "on": True, "none": None},
    }
    blob = bytes(range(256)) * 400  # 100 KiB, every byte value
    message = "échec: " + "x" * 70_000
    row = await store.upsert_account(
        "ñame-ü",
        properties=properties,
        kubeconfig_encrypted=blob,
        error_message=message,
        kube_host="https://kube.example.com:6443",
        cert_fingerprint="ab:cd" * 25,
    )
    again = await store.get_account("ñame-ü")
    assert again == row
    assert again.properties == properties and again.kubeconfig_encrypted == blob and again.error_message == message
    assert "kubeconfig_encrypted" not in repr(again)  # encrypted or not, it does not go to logs


async def test_names_are_unique_and_exact(store: Store, db_url: str) -> None:
    await store.upsert_account("dup")
    now = datetime.now(UTC)
    row = {"name": "dup", "state": "ACTIVE", "properties": {}, "created_at": now, "updated_at": now}
    with pytest.raises(IntegrityError):
        await with_engine(db_url, lambda c: c.execute(insert(Account).values(**row)))
    # Names differing in case or by a trailing space are different accounts on every database.
    for name in ["Dup", "dup "]:
        await store.upsert_account(name)
    assert sorted(a.name for a in await store.list_accounts()) == ["Dup", "dup", "dup "]


async def test_concurrent_upserts_of_a_new_name_all_succeed(store: Store) -> None:
    rows = await asyncio.gather(*(store.upsert_account("race", zone_id=f"z{i}") for i in range(8)))
    assert len({r.id for r in rows}) == 1
    [stored] = await store.list_accounts()
    assert stored.zone_id in {f"z{i}" for i in range(8)}


async def test_bad_fields_are_refused_by_name(store: Store) -> None:
    with pytest.raises(StoreError, match=r"unknown account field\(s\) 'zoneId'; the fields are state, zone_id"):
        await store.upsert_account("a", zoneId="x")
    with pytest.raises(StoreError, match="zone_id is 254 characters long; the most is 253"):
        await store.upsert_account("a", zone_id="z" * 254)
    with pytest.raises(StoreError, match="properties must be JSON"):
        await store.upsert_account("a", properties={"when": datetime.now(UTC)})
    with pytest.raises(StoreError, match="failed_count must be an integer >= 0"):
        await store.upsert_account("a", failed_count=-1)
    with pytest.raises(StoreError, match="account name must be a non-empty string"):
        await store.upsert_account("")
    assert await store.list_accounts() == []
    assert set(STATES) == {
        "INACTIVE",
        "ACTIVE",
        "FAILED",
        "ORPHANED",
        "TO_MIGRATE",
        "ACTIVATING",
        "TO_DEACTIVATE",
        "DEACTIVATING",
        "DELETING",
        "DELETE_FAILED",
    }


# --- URLs and errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://hub:s3cret-pw@127.0.0.1:1/hub",
        "postgresql+asyncpg://hub:s3cret-pw@127.0.0.1:1/hub",
        "mysql://hub:s3cret-pw@127.0.0.1:1/hub",
        "mariadb://hub:s3cret-pw@127.0.0.1:1/hub",
    ],
)
async def test_unreachable_server_names_the_host_not_the_password(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        await Store.open(url)
    message = str(caught.value)
    assert message.startswith("cannot open the database at 127.0.0.1:1 (")
    assert "hub:***@127.0.0.1:1" in message and "s3cret" not in message


async def test_wrong_password_is_reported_without_it(mariadb_db: str) -> None:
    with pytest.raises(StoreError, match=r"Access denied for user 'root'.*\(error 1045\)") as caught:
        await Store.open(mariadb_db.replace("root@", "root:s3cret-pw@"))
    assert "s3cret" not in str(caught.value)


async def test_the_password_stays_out_of_logs(postgres_db: str, caplog: pytest.LogCaptureFixture) -> None:
    url = postgres_db.replace("postgres@", "postgres:s3cret-pw@")  # trust auth: any password is accepted
    caplog.set_level(logging.DEBUG)
    async with await Store.open(url) as store:
        assert store.url_for_display == url.replace("s3cret-pw", "***")
        assert "s3cret" not in repr(store)
        await store.upsert_account("logged", kube_host="h")
    assert "s3cret" not in caplog.text and f"opened (schema revision {HEAD})" in caplog.text


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("oracle://u:pw@db/x", "'oracle' is not a supported database"),
        ("postgres://u:pw@db/x", "SQLAlchemy calls it 'postgresql'"),
        (
            "postgresql+psycopg2://u:pw@db/x",
            "the driver 'psycopg2' is not supported for postgresql;.*'postgresql\\+asyncpg://",
        ),
        ("mysql+pymysql://u:pw@db/x", "the driver 'pymysql' is not supported for mysql"),
        ("sqlite://", "in-memory SQLite database"),
        ("sqlite:///:memory:", "in-memory SQLite database"),
        ("db.example.com:5432", "not a database URL"),
    ],
)
async def test_unsupported_urls_are_refused(url: str, expected: str) -> None:
    with pytest.raises(StoreError, match=expected) as caught:
        await Store.open(url)
    assert ":pw@" not in str(caught.value)


def test_urls_get_the_async_drivers() -> None:
    assert str(async_url("sqlite:///a/hub.db")) == "sqlite+aiosqlite:///a/hub.db"
    assert str(async_url("postgresql://h/db")) == "postgresql+asyncpg://h/db"
    assert str(async_url("postgresql+asyncpg://h/db")) == "postgresql+asyncpg://h/db"
    assert str(async_url("mysql://h/db")) == "mysql+aiomysql://h/db?charset=utf8mb4"
    assert str(async_url("mariadb+aiomysql://h/db?charset=utf8")) == "mysql+aiomysql://h/db?charset=utf8"


async def test_sqlite_directory_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create the directory .*file/sub"):
        await Store.open(f"sqlite:///{blocker}/sub/hub.db")


def test_account_row_is_frozen() -> None:
    now = datetime.now(UTC)
    row = AccountRow(1, "a", "ACTIVE", None, None, None, {}, None, None, None, None, 0, now, now)
    with pytest.raises(AttributeError):
        row.state = "FAILED"  # type: ignore[misc]


# --- batches and conditional updates (dynamic accounts) --------------------------------------------


async def test_create_accounts_is_all_or_nothing(store: Store) -> None:
    await store.upsert_account("taken")
    with pytest.raises(AccountExists, match=r"account 'taken' already exists") as caught:
        await store.create_accounts({"new-1": {}, "taken": {"zone_id": "z"}, "new-2": {}})
    assert caught.value.names == ["taken"]
    assert [a.name for a in await store.list_accounts()] == ["taken"]

    created = await store.create_accounts(
        {"b": {"source": "api", "desired_state": "INACTIVE", "zone_id": "z"}, "a": {"source": "api"}}
    )
    assert [(r.name, r.state, r.source, r.desired_state, r.zone_id) for r in created] == [
        ("b", "INACTIVE", "api", "INACTIVE", "z"),
        ("a", "INACTIVE", "api", None, None),
    ]
    assert (await store.get_account("taken")).source == "agent"  # the registry's rows keep the default
    assert [a.name for a in await store.list_accounts(source="api")] == ["a", "b"]
    assert [a.name for a in await store.list_accounts(names=["b", "taken", "nope"])] == ["b", "taken"]


async def test_update_accounts_is_conditional_and_all_or_nothing(store: Store) -> None:
    await store.create_accounts({"x": {"source": "api"}, "y": {"source": "api", "state": "ACTIVE"}})
    with pytest.raises(StateConflict, match=r"account 'y' is ACTIVE, not INACTIVE") as caught:
        await store.update_accounts(
            {"x": {"state": "TO_MIGRATE"}, "y": {"state": "TO_MIGRATE"}},
            expect_states={"x": ["INACTIVE"], "y": ["INACTIVE"]},
        )
    assert (caught.value.expected, caught.value.actual) == (["INACTIVE"], "ACTIVE")
    assert [(a.name, a.state) for a in await store.list_accounts()] == [("x", "INACTIVE"), ("y", "ACTIVE")]

    rows = await store.update_accounts(
        {"y": {"state": "TO_DEACTIVATE"}, "x": {"state": "TO_MIGRATE", "failed_count": 2}},
        expect_states={"x": ["INACTIVE", "FAILED"], "y": ["ACTIVE"]},
    )
    assert [(r.name, r.state, r.failed_count) for r in rows] == [("y", "TO_DEACTIVATE", 0), ("x", "TO_MIGRATE", 2)]
    assert (await store.update_account("x", kube_host="h")).kube_host == "h"


async def test_update_never_creates_a_row(store: Store) -> None:
    """A late write about an account deleted meanwhile must not bring it back."""
    with pytest.raises(AccountNotFound):
        await store.update_account("gone", agent_id="agent-1")
    assert await store.list_accounts() == []


async def test_update_accounts_skipping_conflicts_writes_the_others(store: Store) -> None:
    """A batch of moves where one account moved on and one was deleted meanwhile: the rest move,
    and only they are returned."""
    await store.create_accounts(
        {"a": {"source": "api", "state": "TO_MIGRATE"}, "b": {"source": "api", "state": "ACTIVE"}, "c": {}}
    )
    await store.update_account("c", state="TO_MIGRATE")
    rows = await store.update_accounts(
        {name: {"state": "ACTIVATING"} for name in ("c", "b", "gone", "a")},
        expect_states={name: ["TO_MIGRATE"] for name in ("c", "b", "gone", "a")},
        skip_conflicts=True,
    )
    assert [(r.name, r.state) for r in rows] == [("c", "ACTIVATING"), ("a", "ACTIVATING")]
    assert [(a.name, a.state) for a in await store.list_accounts()] == [
        ("a", "ACTIVATING"),
        ("b", "ACTIVE"),
        ("c", "ACTIVATING"),
    ]


async def test_concurrent_conditional_moves_only_one_wins(store: Store) -> None:
    """Two replicas moving the same account out of FAILED: exactly one succeeds."""
    await store.create_accounts({"f": {"source": "api", "state": "FAILED"}})

    async def move() -> bool:
        try:
            await store.update_account("f", expect_states=["FAILED"], state="TO_MIGRATE")
            return True
        except StateConflict:
            return False

    assert sorted(await asyncio.gather(move(), move(), move())) == [False, False, True]


async def test_delete_accounts_returns_those_that_existed(store: Store) -> None:
    await store.create_accounts({"d1": {}, "d2": {}})
    assert await store.delete_accounts(["d2", "d1", "never"]) == ["d1", "d2"]
    assert await store.list_accounts() == []


async def test_bad_source_and_desired_state_are_refused(store: Store) -> None:
    with pytest.raises(StoreError, match=r"'file' is not an account source; use one of agent, api"):
        await store.upsert_account("a", source="file")
    with pytest.raises(StoreError, match=r"'RUNNING' is not an account state"):
        await store.create_accounts({"a": {"desired_state": "RUNNING"}})
    with pytest.raises(StoreError, match=r"expected states given for 'b', which is not updated"):
        await store.update_accounts({"a": {}}, expect_states={"b": ["ACTIVE"]})


# --- what is worth trying again ---------------------------------------------------------------


async def test_a_write_while_another_connection_holds_sqlite_is_worth_trying_again(tmp_path: Path, monkeypatch) -> None:
    """ "database is locked" says only that another connection wrote for longer than the wait: the
    same write later lands (the registry's account writes run again on StoreTransient)."""
    import sqlite3

    from scaleagent.hub.store import store as store_module

    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 50)  # fail fast instead of after 5 s
    path = tmp_path / "hub.db"
    async with await Store.open(f"sqlite:///{path}") as store:
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process writing, as a second hub or a backup would
            with pytest.raises(StoreUnavailable, match=r"upsert_account 'a' on sqlite:///.*: database is locked"):
                await store.upsert_account("a", state="ACTIVE")
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert (await store.upsert_account("a", state="ACTIVE")).state == "ACTIVE"


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
async def test_a_server_that_went_away_is_worth_trying_again_and_a_refused_value_is_not(backend: str) -> None:
    """A hub whose database server stopped after it opened it: each call fails as StoreUnavailable
    (the connection cannot be made), not as an answer of the database; a value the store refuses
    fails the same way every time, as a plain StoreError."""
    from scaleagent.hub.store.store import _create_engine
    from scaleagent.hub.store.urls import redact_url

    with socket.socket() as probe:  # a port nothing listens on: the server is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"{backend}://root@127.0.0.1:{port}/hub"
    store = Store(_create_engine(async_url(url)), redact_url(url), None)
    try:
        with pytest.raises(StoreUnavailable, match=rf"get_account 'a' on {backend}://root@127.0.0.1:{port}/hub: "):
            await store.get_account("a")
        with pytest.raises(StoreError) as refused:
            await store.upsert_account("a", kube_host="h" * 100_000)
        assert not isinstance(refused.value, StoreTransient)
        assert "kube_host is 100000 characters long" in str(refused.value)
    finally:
        await store.close()
