"""The tables of the hub's database, as SQLAlchemy 2 declarative models.

The schema itself is created by the Alembic migrations in `migrations/`, never by
`metadata.create_all()`: the models describe it for queries and must agree with the latest
migration (a test checks that they do). Everything here behaves the same on SQLite, PostgreSQL
and MySQL/MariaDB; where the three differ by default, the column types say so explicitly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Dialect, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from ..states import AccountState

__all__ = [
    "ACCOUNTS_TABLE",
    "CREDENTIALS_TABLE",
    "Account",
    "Assignment",
    "Replica",
    "TaskRow",
    "OperationResultRow",
    "Base",
    "Credentials",
    "LENGTHS",
    "SOURCES",
    "STATES",
    "UtcDateTime",
    "VERSION_TABLE",
]

ACCOUNTS_TABLE = "kubesvc_accounts"
"""The table name of the seeds (`clouddriver.kubesvc_accounts`)."""

CREDENTIALS_TABLE = "clouddriver_credentials"
"""Account definitions received through Clouddriver's Account Management API (`/credentials`).
Not Clouddriver's own name (`accounts`): the hub may share Clouddriver's database, and its table
must stay Clouddriver's."""

VERSION_TABLE = "scaleagent_alembic_version"
"""Alembic's bookkeeping table. Not Alembic's default `alembic_version`: the hub may share a
database (Clouddriver's, say) with another Alembic user, whose revisions must not mix with ours."""

STATES = tuple(state.value for state in AccountState)
"""An account's lifecycle states, as the seeds name them. The first four last; the others are
transient steps of a migration or deactivation. The store checks states on write only, so a
replica reading a state added by a newer version still works."""


class UtcDateTime(TypeDecorator[datetime]):
    """A point in time, stored in UTC and always read back as an aware UTC `datetime`.

    Why not plain `DateTime(timezone=True)`: only PostgreSQL keeps the zone. SQLite stores text
    and MySQL/MariaDB a DATETIME, both read back naive, and MySQL's DATETIME drops microseconds
    unless asked for `fsp=6`. So values are converted to UTC on the way in (naive ones are
    refused: their zone is a guess), stored naive where the database has no zone, and given
    their UTC zone back on the way out, so that all three databases return equal values.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: give it a time zone (the store keeps UTC)")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


SOURCES = ("agent", "api")
"""Who created an account's row: `agent` (the registry, for an account in an agent's own
configuration) or `api` (the Dynamic Accounts service: REST API, CLI, interception). The
service manages only `api` rows."""


LENGTHS = {
    "name": 253,
    "state": 32,
    "desired_state": 32,
    "source": 16,
    "zone_id": 253,
    "kube_host": 2048,
    "cert_fingerprint": 128,
    "agent_id": 253,
    "type": 64,
}
"""Maximum lengths (characters) of the bounded string columns. The store checks them itself:
PostgreSQL refuses a longer value, MySQL may cut it, SQLite keeps it; checking first makes the
three behave alike and the error name the field. 253 is the longest DNS name, which Kubernetes
uses for object names."""


LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
"""Unbounded text. MySQL's TEXT stops at 64 KiB where PostgreSQL and SQLite have no limit."""

LongBinary = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
"""Unbounded bytes. MySQL's BLOB stops at 64 KiB; an encrypted kubeconfig can be larger."""


class Base(DeclarativeBase):
    """The declarative base of the hub's tables."""

    type_annotation_map = {dict[str, Any]: JSON}


class Account(Base):
    """One row of `kubesvc_accounts`: an account the hub manages (Dynamic Accounts).

    `kubeconfig_file` is the reference as the user gave it (a path or an `encryptedFile:`
    secret reference), `kubeconfig_encrypted` an encrypted kubeconfig the hub holds itself.
    `properties` keeps the rest of the account's settings (namespaces, kinds, ...) as JSON.
    `source` says who created the row (see SOURCES); `desired_state` is what the user last asked
    for (ACTIVE or INACTIVE), which a FAILED account keeps so that a retry knows what to retry.
    """

    __tablename__ = ACCOUNTS_TABLE
    __table_args__ = (
        UniqueConstraint("name", name="uq_kubesvc_accounts_name"),
        Index("ix_kubesvc_accounts_state", "state"),
        Index("ix_kubesvc_accounts_source", "source"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(LENGTHS["name"]), nullable=False)
    state: Mapped[str] = mapped_column(String(LENGTHS["state"]), nullable=False)
    zone_id: Mapped[str | None] = mapped_column(String(LENGTHS["zone_id"]))
    kubeconfig_file: Mapped[str | None] = mapped_column(LongText)
    kubeconfig_encrypted: Mapped[bytes | None] = mapped_column(LongBinary)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    kube_host: Mapped[str | None] = mapped_column(String(LENGTHS["kube_host"]))
    cert_fingerprint: Mapped[str | None] = mapped_column(String(LENGTHS["cert_fingerprint"]))
    agent_id: Mapped[str | None] = mapped_column(String(LENGTHS["agent_id"]))
    error_message: Mapped[str | None] = mapped_column(LongText)
    failed_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    source: Mapped[str] = mapped_column(
        String(LENGTHS["source"]), nullable=False, default="agent", server_default="agent"
    )
    desired_state: Mapped[str | None] = mapped_column(String(LENGTHS["desired_state"]))


class Credentials(Base):
    """One row of `clouddriver_credentials`: an account definition as Clouddriver's Account
    Management API received it (`POST /credentials`), kept so that `GET /credentials` shows it and
    the `namePatterns` scan can migrate it.

    `body` is the definition (JSON, `type` and `name` included), never holding a kubeconfig: the
    API refuses inline ones. `migrated_at` is when it was made a dynamic account (by interception
    or the scan); a definition is migrated automatically at most once, so that deleting the
    dynamic account is not undone by the next scan.
    """

    __tablename__ = CREDENTIALS_TABLE
    __table_args__ = (
        UniqueConstraint("name", name="uq_clouddriver_credentials_name"),
        Index("ix_clouddriver_credentials_type", "type"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(LENGTHS["name"]), nullable=False)
    type: Mapped[str] = mapped_column(String(LENGTHS["type"]), nullable=False)
    body: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    migrated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Replica(Base):
    """One row of `kubesvc_replicas`: a hub replica, where its HTTP API is, and when it last said
    it was alive. Every replica refreshes its own row each heartbeat period."""

    __tablename__ = "kubesvc_replicas"

    id: Mapped[str] = mapped_column(String(253), primary_key=True)
    base_url: Mapped[str] = mapped_column(String(2048), nullable=False)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)


class Assignment(Base):
    """One row of `kubesvc_assignments`: the replica whose agent streams `account` (the seeds'
    table). `connections` counts that replica's sessions serving it; 0 means the account is
    served from cache during its grace period, and another replica may take it."""

    __tablename__ = "kubesvc_assignments"
    __table_args__ = (Index("ix_kubesvc_assignments_replica", "replica"),)

    account: Mapped[str] = mapped_column(String(253), primary_key=True)
    replica: Mapped[str] = mapped_column(String(253), nullable=False)
    agent: Mapped[str] = mapped_column(String(253), nullable=False)
    session: Mapped[str] = mapped_column(String(64), nullable=False)
    connections: Mapped[int] = mapped_column(Integer, nullable=False)
    caching: Mapped[bool] = mapped_column(Boolean, nullable=False)
    last_updated: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)


class TaskRow(Base):
    """One row of `kubesvc_tasks`: an operation task as `GET /task/{id}` shows it (`document`, JSON
    text in Clouddriver's shape), the replica running it and its plain state."""

    __tablename__ = "kubesvc_tasks"
    __table_args__ = (
        Index("ix_kubesvc_tasks_state_replica", "state", "replica"),
        Index("ix_kubesvc_tasks_created_at", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    replica: Mapped[str] = mapped_column(String(253), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    document: Mapped[str] = mapped_column(LongText, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)


class OperationResultRow(Base):
    """One row of `kubesvc_operation_results`: an operation another replica forwarded here, while
    it runs and once it has its result (`document`, the reply as replicas exchange it), kept until
    the replica running its task has saved the task with it. Should that replica die meanwhile,
    whichever replica ends the task ends it with this result instead of "may have been carried
    out" (hub/tasks.py)."""

    __tablename__ = "kubesvc_operation_results"
    __table_args__ = (Index("ix_kubesvc_operation_results_task", "task_id"),)

    operation_id: Mapped[str] = mapped_column(String(253), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(64), nullable=False)
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    type: Mapped[str] = mapped_column(String(64), nullable=False)
    account: Mapped[str] = mapped_column(String(253), nullable=False)
    replica: Mapped[str] = mapped_column(String(253), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    document: Mapped[str | None] = mapped_column(LongText, nullable=True)
    # Past it, a row still `running` is not believed: its replica lost it (a crash between the
    # agent's answer and the write, say), and the task is ended without it.
    deadline_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)


class AgentBinding(Base):
    """One row of `kubesvc_agent_bindings`: the agent identity that first streamed `account`
    (and from which zone). Another identity's claim of the account is refused until an admin
    releases the binding (docs/security.md)."""

    __tablename__ = "kubesvc_agent_bindings"

    account: Mapped[str] = mapped_column(String(253), primary_key=True)
    identity: Mapped[str] = mapped_column(String(253), nullable=False)
    zone: Mapped[str] = mapped_column(String(253), nullable=False)
    bound_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
