"""Which agent identity each account is bound to (`kubesvc_agent_bindings`).

The first identity to stream an account binds it; another identity's claim is refused until an
admin releases the binding. Binding is one INSERT: two replicas (or two sessions) binding the same
account at once both read the one row that won, so the database is the only referee.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from .errors import StoreError
from .models import AgentBinding
from .store import Store, _now, _rowcount, _utc

__all__ = ["BindingRow", "BindingStore"]


@dataclass(frozen=True, slots=True)
class BindingRow:
    account: str
    identity: str
    zone: str
    bound_at: datetime

    @classmethod
    def _from_model(cls, row: AgentBinding) -> BindingRow:
        return cls(row.account, row.identity, row.zone, _utc(row.bound_at))

    def document(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "identity": self.identity,
            "zone": self.zone,
            "boundAt": self.bound_at.isoformat().replace("+00:00", "Z"),
        }


class BindingStore:
    """The bindings table, on the hub's `Store` (its engine, transactions and error messages)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def bind(self, account: str, identity: str, zone: str) -> BindingRow:
        """Bind `account` to `identity` unless it is bound already; returns the binding as it
        stands (the caller compares its identity with its own)."""
        for _ in range(2):  # a concurrent first insert loses the race once, then reads the winner
            try:
                async with self.store.transaction("bind account", account) as session:
                    row = await session.get(AgentBinding, account)
                    if row is None:
                        row = AgentBinding(account=account, identity=identity, zone=zone, bound_at=_now())
                        session.add(row)
                        await session.flush()
                    return BindingRow._from_model(row)
            except IntegrityError:
                continue
        raise StoreError(f"bind account {account!r}: another session kept inserting the same row")

    async def get(self, account: str) -> BindingRow | None:
        async with self.store.transaction("read binding", account) as session:
            row = await session.get(AgentBinding, account)
            return None if row is None else BindingRow._from_model(row)

    async def list(self) -> list[BindingRow]:
        async with self.store.transaction("list bindings") as session:
            rows = (await session.execute(select(AgentBinding).order_by(AgentBinding.account))).scalars().all()
            return [BindingRow._from_model(r) for r in rows]

    async def release(self, account: str) -> bool:
        """Forget the account's binding; True if there was one. The next identity to stream the
        account binds it."""
        async with self.store.transaction("release binding", account) as session:
            result = await session.execute(
                delete(AgentBinding).where(AgentBinding.account == account).execution_options(synchronize_session=False)
            )
            return _rowcount(result) == 1
