"""Create clouddriver_credentials: account definitions received through Clouddriver's Account
Management API (`POST /credentials`).

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03

The hub answers Spinnaker's Account Management requests (see hub/credentials.py). With the
interceptor off it keeps the definitions here, as Clouddriver would keep them in its own
`accounts` table; with the interceptor on it also makes them dynamic accounts. The
`dynamicAccounts.namePatterns` scan reads this table to migrate matching definitions, and
`migrated_at` records that it did, so that each definition is migrated automatically once.

Column types are spelled out here, as in 0001, so that this revision keeps creating the same
table after the models move on; MySQL/MariaDB get the same table options as kubesvc_accounts
(utf8mb4, a binary no-pad collation so that names compare exactly, DATETIME(6)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MY = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *_MY)


def _mysql_options(bind: sa.engine.Connection) -> dict[str, Any]:
    """Table options for MySQL/MariaDB (none elsewhere); the same choice as 0001 makes, repeated
    so that each revision stands alone."""
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
    op.create_table(
        "clouddriver_credentials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("migrated_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_clouddriver_credentials"),
        sa.UniqueConstraint("name", name="uq_clouddriver_credentials_name"),
        **_mysql_options(bind),
    )
    op.create_index("ix_clouddriver_credentials_type", "clouddriver_credentials", ["type"])


def downgrade() -> None:
    op.drop_index("ix_clouddriver_credentials_type", table_name="clouddriver_credentials")
    op.drop_table("clouddriver_credentials")
