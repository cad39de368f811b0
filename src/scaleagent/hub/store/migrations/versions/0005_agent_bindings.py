"""Create kubesvc_agent_bindings: which agent identity an account is bound to.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

- `kubesvc_agent_bindings`: one row per account streamed by an agent with an identity
  (`auth.agents`): the identity that first streamed it, from which zone, and when. Another
  identity's claim of the account is refused until an admin releases the binding.

Column types are spelled out here, as in 0001, so that this revision keeps creating the same
table after the models move on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0005"
down_revision: str | None = "0004"
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
        "kubesvc_agent_bindings",
        sa.Column("account", sa.String(253), nullable=False),
        sa.Column("identity", sa.String(253), nullable=False),
        sa.Column("zone", sa.String(253), nullable=False),
        sa.Column("bound_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("account", name="pk_kubesvc_agent_bindings"),
        **_mysql_options(op.get_bind()),
    )


def downgrade() -> None:
    op.drop_table("kubesvc_agent_bindings")
