"""Create kubesvc_accounts, the Dynamic Accounts table.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Column types are spelled out here rather than imported from models.py, so that this revision
keeps creating the same table after the models move on. MySQL/MariaDB get explicit choices
where their defaults differ from PostgreSQL and SQLite: utf8mb4 (all of Unicode), a binary
no-pad collation (names compare case- and trailing-space-sensitively, as elsewhere), DATETIME(6)
(microseconds) and LONGTEXT/LONGBLOB (no 64 KiB cap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MY = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *_MY)


def _mysql_options(bind: sa.engine.Connection) -> dict[str, Any]:
    """Table options for MySQL/MariaDB (none elsewhere). The collation must not pad: MySQL's
    `utf8mb4_bin` treats 'a' and 'a ' as equal, which would make two names collide."""
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
        "kubesvc_accounts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("zone_id", sa.String(253), nullable=True),
        sa.Column("kubeconfig_file", long_text, nullable=True),
        sa.Column("kubeconfig_encrypted", sa.LargeBinary().with_variant(mysql.LONGBLOB(), *_MY), nullable=True),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("kube_host", sa.String(2048), nullable=True),
        sa.Column("cert_fingerprint", sa.String(128), nullable=True),
        sa.Column("agent_id", sa.String(253), nullable=True),
        sa.Column("error_message", long_text, nullable=True),
        sa.Column("failed_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kubesvc_accounts"),
        sa.UniqueConstraint("name", name="uq_kubesvc_accounts_name"),
        **_mysql_options(bind),
    )
    op.create_index("ix_kubesvc_accounts_state", "kubesvc_accounts", ["state"])


def downgrade() -> None:
    op.drop_index("ix_kubesvc_accounts_state", table_name="kubesvc_accounts")
    op.drop_table("kubesvc_accounts")
