"""The store's Account Management definitions (`clouddriver_credentials`, schema revision 0003),
on an SQLite file, the local PostgreSQL and MariaDB for real (the `db_url` fixture)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic import command
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from scaleagent.hub.store import CredentialsExist, CredentialsNotFound, Store, StoreError, async_url
from scaleagent.hub.store.migrate import HEAD, alembic_config
from scaleagent.hub.store.models import CREDENTIALS_TABLE, Credentials

T = TypeVar("T")

DEFINITION = {
    "type": "kubernetes",
    "name": "prod-east",
    "kubeconfigFile": "encryptedFile:k8s!n:kc!k:config!ns:spin",
    "namespaces": ["web"],
    "onlySpinnakerManaged": True,
    "permissions": {"READ": ["ops"]},
}


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    async with await Store.open(db_url) as opened:
        yield opened


async def with_engine(url: str, fn: Callable[[Connection], T]) -> T:
    engine: AsyncEngine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


async def test_the_table_is_created_with_the_models_columns(store: Store, db_url: str) -> None:
    columns = await with_engine(db_url, lambda c: {col["name"] for col in inspect(c).get_columns(CREDENTIALS_TABLE)})
    assert columns == {column.name for column in Credentials.__table__.columns}


async def test_a_database_at_0002_is_upgraded_keeping_its_accounts(db_url: str) -> None:
    """A hub of the previous version left accounts; this one adds the table and loses nothing."""

    def to_0002(conn: Connection) -> None:
        command.upgrade(alembic_config(conn), "0002")
        conn.exec_driver_sql(
            "INSERT INTO kubesvc_accounts (name, state, properties, failed_count, created_at, "
            "updated_at, source) VALUES ('old', 'ACTIVE', '{}', 0, '2025-01-01 00:00:00', "
            "'2025-01-01 00:00:00', 'api')"
        )

    if db_url.startswith("sqlite:///"):  # the store would make the directory; here we come first
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    await with_engine(db_url, to_0002)
    assert not await with_engine(db_url, lambda c: inspect(c).has_table(CREDENTIALS_TABLE))
    async with await Store.open(db_url) as store:
        assert [(a.name, a.state) for a in await store.list_accounts()] == [("old", "ACTIVE")]
        await store.create_credentials("new", "kubernetes", {"type": "kubernetes", "name": "new"})
        assert [c.name for c in await store.list_credentials()] == ["new"]
    assert HEAD == "0006"


async def test_create_get_update_delete(store: Store) -> None:
    created = await store.create_credentials("prod-east", "kubernetes", DEFINITION)
    assert (created.name, created.type, created.body, created.migrated_at) == (
        "prod-east",
        "kubernetes",
        DEFINITION,
        None,
    )
    assert created.created_at == created.updated_at and created.created_at.tzinfo is not None
    assert await store.get_credentials("prod-east") == created
    assert await store.get_credentials("nope") is None

    with pytest.raises(CredentialsExist, match=r"account 'prod-east' already exists"):
        await store.create_credentials("prod-east", "kubernetes", {"type": "kubernetes", "name": "prod-east"})
    assert (await store.get_credentials("prod-east")).body == DEFINITION  # untouched

    changed = {**DEFINITION, "namespaces": ["api"]}
    updated = await store.update_credentials("prod-east", type="kubernetes", body=changed)
    assert (
        updated.body == changed
        and updated.updated_at >= created.updated_at
        and updated.created_at == created.created_at
    )
    with pytest.raises(CredentialsNotFound, match=r"no account definition named 'gone'"):
        await store.update_credentials("gone", body={"type": "kubernetes", "name": "gone"})
    assert await store.get_credentials("gone") is None  # an update never creates

    assert await store.delete_credentials("prod-east") is True
    assert await store.delete_credentials("prod-east") is False
    assert await store.list_credentials() == []


async def test_values_round_trip_exactly_and_are_detached(store: Store) -> None:
    body = {
        "type": "kubernetes",
        "name": "u",
        "environment": "prod ü €",
        "cacheThreads": 4,
        "customResources": [{"kubernetesKind": "Widget.example.com", "versioned": False}],
        "nothing": None,
        "big": "x" * 100_000,
    }
    row = await store.create_credentials("u", "kubernetes", body)
    body["environment"] = "changed by the caller"
    row.body["name"] = "changed in the row"
    again = await store.get_credentials("u")
    assert again.body["environment"] == "prod ü €" and again.body["name"] == "u"
    assert again.body["customResources"] == [{"kubernetesKind": "Widget.example.com", "versioned": False}]
    assert again.body["nothing"] is None and len(again.body["big"]) == 100_000


async def test_list_by_type_from_a_name_with_a_limit(store: Store) -> None:
    for name in ("c", "a", "d", "b"):
        await store.create_credentials(name, "kubernetes", {"type": "kubernetes", "name": name})
    await store.create_credentials("aws-1", "aws", {"type": "aws", "name": "aws-1"})
    assert [c.name for c in await store.list_credentials()] == ["a", "aws-1", "b", "c", "d"]
    assert [c.name for c in await store.list_credentials(type="kubernetes")] == ["a", "b", "c", "d"]
    assert [c.name for c in await store.list_credentials(type="kubernetes", start="b", limit=2)] == ["b", "c"]
    assert [c.name for c in await store.list_credentials(type="aws")] == ["aws-1"]


async def test_upsert_creates_then_replaces_and_records_migration_once(store: Store) -> None:
    first = await store.upsert_credentials("m", "kubernetes", {"type": "kubernetes", "name": "m"})
    assert first.migrated_at is None
    marked = await store.upsert_credentials(
        "m", "kubernetes", {"type": "kubernetes", "name": "m", "debug": True}, migrated=True
    )
    assert marked.migrated_at is not None and marked.body["debug"] is True and marked.created_at == first.created_at
    kept = await store.upsert_credentials("m", "kubernetes", {"type": "kubernetes", "name": "m"}, migrated=True)
    assert kept.migrated_at == marked.migrated_at  # the first migration's time stays
    cleared = await store.update_credentials("m", migrated_at=None)
    assert cleared.migrated_at is None and cleared.body == {"type": "kubernetes", "name": "m"}


async def test_claiming_for_migration_is_won_once_across_concurrent_callers(store: Store, db_url: str) -> None:
    """Two replicas' scans meeting on one definition: exactly one claims it."""
    await store.create_credentials("c", "kubernetes", {"type": "kubernetes", "name": "c"})
    other = await Store.open(db_url)
    try:
        won = await asyncio.gather(*(s.claim_credentials("c") for s in (store, other, store, other)))
    finally:
        await other.close()
    assert sorted(won) == [False, False, False, True]
    assert (await store.get_credentials("c")).migrated_at is not None
    assert await store.claim_credentials("c") is False
    assert await store.claim_credentials("never") is False


async def test_concurrent_creates_of_one_name_store_one(store: Store) -> None:
    async def create(i: int) -> Any:
        try:
            return await store.create_credentials("race", "kubernetes", {"type": "kubernetes", "name": "race", "i": i})
        except CredentialsExist:
            return None

    results = await asyncio.gather(*(create(i) for i in range(4)))
    assert sum(r is not None for r in results) == 1
    assert len(await store.list_credentials()) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.create_credentials("x", "", {}), "a definition's type must be a non-empty string, got ''"),
        (lambda s: s.create_credentials("x", "k" * 65, {}), "type is 65 characters long; the most is 64"),
        (
            lambda s: s.create_credentials("x", "kubernetes", ["not", "a", "mapping"]),
            "a definition's body must be a mapping, got list",
        ),
        (lambda s: s.create_credentials("x", "kubernetes", {"n": float("nan")}), "a definition's body must be JSON"),
        (lambda s: s.create_credentials("", "kubernetes", {}), "an account name must be a non-empty string"),
        (lambda s: s.list_credentials(limit=-1), "list_credentials: limit must be an integer >= 0, got -1"),
    ],
)
async def test_bad_values_are_refused_by_name_before_any_sql(store: Store, call: Any, message: str) -> None:
    with pytest.raises(StoreError) as caught:
        await call(store)
    assert str(caught.value).startswith(message)
    assert await store.list_credentials() == []
