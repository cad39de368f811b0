"""Alembic's environment for the hub's database.

It only runs on a connection the store passes in through `config.attributes["connection"]`:
the store has already opened it (with the async driver, run through `run_sync`) and taken a
lock so that replicas starting together migrate one at a time. It commits nothing itself: the
caller owns the transaction. There is no offline (SQL script) mode.
"""

from __future__ import annotations

from alembic import context

from scaleagent.hub.store.models import VERSION_TABLE, Base

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError(
        "the hub's migrations run from scaleagent.hub.store.Store.open(), which passes an open "
        "connection in config.attributes['connection']; there is no alembic.ini or offline mode"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    # SQLite can't ALTER most things: later migrations rewrite tables in batch mode there.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
