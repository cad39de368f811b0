"""Create the tables hub replicas share: kubesvc_replicas, kubesvc_assignments, kubesvc_tasks.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

- `kubesvc_replicas`: one row per hub replica, its HTTP base URL and a heartbeat; a replica
  whose heartbeat is older than a few periods is dead, and its rows are cleaned by the others.
- `kubesvc_assignments` (Armory's table of the same name): which replica, agent and session
  stream each account, how many of that replica's sessions serve it (`connections`; 0 while
  the account is served from cache in its grace period), and `last_updated`.
- `kubesvc_tasks`: operation tasks in Clouddriver's shape (`document`, JSON text), with the
  replica running them, so that `GET /task/{id}` answers from any replica and after a restart.

Column types are spelled out here, as in 0001, so that this revision keeps creating the same
tables after the models move on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MY = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *_MY)


def _mysql_options(bind: sa.engine.Connection) -> dict[str, Any]:
    """The same table options as 0001 (utf8mb4, a binary no-pad collation), repeated so that each
    revision stands alone."""
    dialect = bind.dialect
    if dialect.name not in _MY:
        return {}
    if getattr(dialect, "is_mariadb", False):
        collation = "utf8mb4_nopad_bin"
    elif (dialect.server_version_info or ()) >= (8, 0, 17):
        collation = "utf8mb4_0900_bin"
    else:
        collation = "utf8mb4_bin"
    return {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": collation}


def upgrade() -> None:
    bind = op.get_bind()
    long_text = sa.Text().with_variant(mysql.LONGTEXT(), *_MY)
    op.create_table(
        "kubesvc_replicas",
        sa.Column("id", sa.String(253), nullable=False),
        sa.Column("base_url", sa.String(2048), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=False),
        sa.Column("heartbeat_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kubesvc_replicas"),
        **_mysql_options(bind),
    )
    op.create_table(
        "kubesvc_assignments",
        sa.Column("account", sa.String(253), nullable=False),
        sa.Column("replica", sa.String(253), nullable=False),
        sa.Column("agent", sa.String(253), nullable=False),
        sa.Column("session", sa.String(64), nullable=False),
        sa.Column("connections", sa.Integer(), nullable=False),
        sa.Column("caching", sa.Boolean(), nullable=False),
        sa.Column("last_updated", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("account", name="pk_kubesvc_assignments"),
        **_mysql_options(bind),
    )
    op.create_index("ix_kubesvc_assignments_replica", "kubesvc_assignments", ["replica"])
    op.create_table(
        "kubesvc_tasks",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("replica", sa.String(253), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("document", long_text, nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kubesvc_tasks"),
        **_mysql_options(bind),
    )
    op.create_index("ix_kubesvc_tasks_state_replica", "kubesvc_tasks", ["state", "replica"])
    op.create_index("ix_kubesvc_tasks_created_at", "kubesvc_tasks", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_kubesvc_tasks_created_at", table_name="kubesvc_tasks")
    op.drop_index("ix_kubesvc_tasks_state_replica", table_name="kubesvc_tasks")
    op.drop_table("kubesvc_tasks")
    op.drop_index("ix_kubesvc_assignments_replica", table_name="kubesvc_assignments")
    op.drop_table("kubesvc_assignments")
    op.drop_table("kubesvc_replicas")
