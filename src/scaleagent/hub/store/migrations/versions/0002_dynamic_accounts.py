"""Dynamic accounts: who created a row (`source`) and what its user asked for (`desired_state`).

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02

The registry records every account agents register from their own configuration, and the
accounts service records those created through the REST API; both live in `kubesvc_accounts`.
`source` tells them apart ('agent' or 'api'), so the service manages only its own rows and a
restarted hub knows which ones to send back to agents. Existing rows were all written by the
registry: the server default 'agent' labels them correctly.

`desired_state` is what the user last asked for (ACTIVE or INACTIVE). A FAILED account keeps
it, so the retry loop knows whether to retry a migration or a deactivation.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("kubesvc_accounts") as batch:
        batch.add_column(sa.Column("source", sa.String(16), server_default="agent", nullable=False))
        batch.add_column(sa.Column("desired_state", sa.String(32), nullable=True))
    op.create_index("ix_kubesvc_accounts_source", "kubesvc_accounts", ["source"])


def downgrade() -> None:
    op.drop_index("ix_kubesvc_accounts_source", table_name="kubesvc_accounts")
    with op.batch_alter_table("kubesvc_accounts") as batch:
        batch.drop_column("desired_state")
        batch.drop_column("source")
