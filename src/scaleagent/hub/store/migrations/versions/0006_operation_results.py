"""Create kubesvc_operation_results: the results of operations forwarded to another replica.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

- `kubesvc_operation_results`: one row per operation a replica runs for a task another replica
  runs (`task_id`, the operation's `position` among the task's `count`, its `type` and
  `account`), `running` until the agent answers (believed until `deadline_at`), then `done` with
  the answer (`document`). The
  task's replica drops the rows once the task is saved with their results; should it die before,
  the replica that ends the task ends it with them.

Column types are spelled out here, as in 0001, so that this revision keeps creating the same
table after the models move on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0006"
down_revision: str | None = "0005"
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
    op.create_table(
        "kubesvc_operation_results",
        sa.Column("operation_id", sa.String(253), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("account", sa.String(253), nullable=False),
        sa.Column("replica", sa.String(253), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("document", sa.Text().with_variant(mysql.LONGTEXT(), *_MY), nullable=True),
        sa.Column("deadline_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_kubesvc_operation_results"),
        **_mysql_options(op.get_bind()),
    )
    op.create_index("ix_kubesvc_operation_results_task", "kubesvc_operation_results", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_kubesvc_operation_results_task", table_name="kubesvc_operation_results")
    op.drop_table("kubesvc_operation_results")
