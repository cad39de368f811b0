"""The hub's SQL store: the Dynamic Accounts table (`kubesvc_accounts`) on SQLite, PostgreSQL,
MySQL or MariaDB, with its schema kept current by Alembic migrations that `Store.open()` applies.

    store = await Store.open(config.database.url)
    await store.upsert_account("prod-eu", zone_id="eu", properties={"namespaces": ["web"]})
    await store.set_state("prod-eu", "ACTIVE")
    await store.close()
"""

from __future__ import annotations

from .errors import (
    AccountExists,
    AccountNotFound,
    CredentialsExist,
    CredentialsNotFound,
    StateConflict,
    StoreBusy,
    StoreError,
    StoreTransient,
    StoreUnavailable,
)
from .models import SOURCES, STATES
from .store import AccountRow, CredentialsRow, Store, async_url

__all__ = [
    "SOURCES",
    "STATES",
    "AccountExists",
    "AccountNotFound",
    "AccountRow",
    "CredentialsExist",
    "CredentialsNotFound",
    "CredentialsRow",
    "StateConflict",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreTransient",
    "StoreUnavailable",
    "async_url",
]
