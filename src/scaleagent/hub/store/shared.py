"""What hub replicas share in the database besides accounts: who is alive (`kubesvc_replicas`),
which replica streams which account (`kubesvc_assignments`) and the operation tasks
(`kubesvc_tasks`).

Every decision between replicas is one conditional statement or one transaction holding the row
(`SELECT ... FOR UPDATE` on PostgreSQL and MySQL/MariaDB; SQLite takes the write lock at BEGIN), so
two replicas can never both win a claim: the database is the only referee.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from .errors import StoreBusy, StoreError
from .models import Assignment, OperationResultRow, Replica, TaskRow
from .store import Store, _now, _rowcount, _utc

__all__ = ["AssignmentRow", "ReplicaRow", "SharedStore", "StoredTask"]


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    id: str
    base_url: str
    started_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class AssignmentRow:
    account: str
    replica: str
    agent: str
    session: str
    connections: int
    caching: bool
    last_updated: datetime

    @classmethod
    def _from_model(cls, row: Assignment) -> AssignmentRow:
        return cls(
            row.account, row.replica, row.agent, row.session, row.connections, row.caching, _utc(row.last_updated)
        )

    def document(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "replica": self.replica,
            "agent": self.agent,
            "connections": self.connections,
            "caching": self.caching,
            "lastUpdated": self.last_updated.isoformat().replace("+00:00", "Z"),
        }


@dataclass(frozen=True, slots=True)
class StoredTask:
    id: str
    replica: str
    state: str
    document: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class StoredOperation:
    """An operation this or another replica ran for a task another replica runs (`running`, or
    `done` with the reply's document)."""

    operation_id: str
    task_id: str
    position: int
    count: int
    type: str
    account: str
    replica: str
    state: str
    document: str | None
    deadline_at: datetime

    def running_on(self, live: Collection[str]) -> bool:
        """Whether a live replica runs it now (and its deadline has not passed)."""
        return self.state == "running" and self.replica in live and self.deadline_at > _now()


class SharedStore:
    """The replicas' tables, on the hub's `Store` (its engine, transactions and error messages)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # --- replicas -------------------------------------------------------------------------------

    async def heartbeat(self, replica: str, base_url: str) -> None:
        """This replica is alive: refresh its row (creating it) and its assignments' `last_updated`."""
        now = _now()
        async with self.store.transaction("replica heartbeat", replica) as session:
            row = await session.get(Replica, replica, with_for_update=True)
            if row is None:
                session.add(Replica(id=replica, base_url=base_url, started_at=now, heartbeat_at=now))
            else:
                row.base_url, row.heartbeat_at = base_url, now
            await session.execute(
                update(Assignment)
                .where(Assignment.replica == replica)
                .values(last_updated=now)
                .execution_options(synchronize_session=False)
            )

    async def replicas(self) -> list[ReplicaRow]:
        async with self.store.transaction("list replicas") as session:
            rows = (await session.execute(select(Replica).order_by(Replica.id))).scalars().all()
            return [ReplicaRow(r.id, r.base_url, _utc(r.started_at), _utc(r.heartbeat_at)) for r in rows]

    async def forget_replicas(self, replicas: Collection[str]) -> list[str]:
        """Delete the rows of dead replicas and their assignments; returns the accounts released."""
        if not replicas:
            return []
        async with self.store.transaction("forget replicas") as session:
            accounts = (
                (await session.execute(select(Assignment.account).where(Assignment.replica.in_(list(replicas)))))
                .scalars()
                .all()
            )
            await session.execute(
                delete(Assignment)
                .where(Assignment.replica.in_(list(replicas)))
                .execution_options(synchronize_session=False)
            )
            await session.execute(
                delete(Replica).where(Replica.id.in_(list(replicas))).execution_options(synchronize_session=False)
            )
            return list(accounts)

    async def leave(self, replica: str) -> None:
        """A replica stopping cleanly: its assignments and its row go now, not after the timeout."""
        await self.forget_replicas([replica])

    # --- assignments ----------------------------------------------------------------------------

    async def claim(
        self,
        account: str,
        *,
        replica: str,
        agent: str,
        session_id: str,
        connections: int,
        dead: Collection[str] = (),
    ) -> tuple[bool, AssignmentRow]:
        """Make `replica` the one streaming `account`, unless another live replica's agent does.

        Won when there is no row, the row is already this replica's, its holder has no session
        serving it any more (connections 0), or its holder is among `dead` (replicas whose
        heartbeat stopped, or that cannot be reached). Returns (won, the row as it now stands)."""
        # The row is read without a lock first: a locking read of a missing row takes a lock on the
        # gap where it would go (InnoDB), and two first claims holding such locks deadlock on their
        # inserts. A concurrent first insert loses the race with a duplicate key, then reads the
        # winner; a transaction the database still rolls back to break a deadlock runs again.
        busy: StoreBusy | None = None
        for attempt in range(6):
            now = _now()
            try:
                async with self.store.transaction("claim account", account) as session:
                    exists = await session.scalar(select(Assignment.account).where(Assignment.account == account))
                    if exists is None:
                        row = Assignment(
                            account=account,
                            replica=replica,
                            agent=agent,
                            session=session_id,
                            connections=connections,
                            caching=True,
                            last_updated=now,
                        )
                        session.add(row)
                        await session.flush()
                        return True, AssignmentRow._from_model(row)
                    row = await session.get(Assignment, account, with_for_update=True, populate_existing=True)
                    if row is None:  # released between the two reads
                        continue
                    if row.replica == replica or row.connections == 0 or row.replica in dead:
                        row.replica, row.agent, row.session = replica, agent, session_id
                        row.connections, row.caching, row.last_updated = connections, True, now
                        await session.flush()
                        return True, AssignmentRow._from_model(row)
                    return False, AssignmentRow._from_model(row)
            except IntegrityError:
                continue
            except StoreBusy as e:
                busy = e
                # Spread the retries of the transactions that collided (a back-off, not a wait for anything).
                await asyncio.sleep(random.uniform(0, 0.02 * 2**attempt))
                continue
        if busy is not None:
            raise busy
        raise StoreError(f"claim account {account!r}: another replica kept inserting the same row")

    async def set_connections(self, account: str, replica: str, connections: int, agent: str = "") -> bool:
        """Record how many of `replica`'s sessions serve `account`; False if the row is not its."""
        values: dict[str, Any] = {"connections": connections, "last_updated": _now()}
        if agent:
            values["agent"] = agent
        async with self.store.transaction("update assignment", account) as session:
            result = await session.execute(
                update(Assignment)
                .where(Assignment.account == account, Assignment.replica == replica)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result) == 1

    async def reset_connections(self, replica: str) -> list[str]:
        """A replica starting again has no session yet: its rows say so (any replica may claim
        them now). Returns the accounts it held."""
        async with self.store.transaction("reset assignments", replica) as session:
            accounts = (
                (await session.execute(select(Assignment.account).where(Assignment.replica == replica))).scalars().all()
            )
            await session.execute(
                update(Assignment)
                .where(Assignment.replica == replica)
                .values(connections=0, last_updated=_now())
                .execution_options(synchronize_session=False)
            )
            return list(accounts)

    async def release(self, account: str, replica: str) -> bool:
        """Give the account up, if `replica` still holds it; True if this call deleted the row."""
        async with self.store.transaction("release account", account) as session:
            result = await session.execute(
                delete(Assignment)
                .where(Assignment.account == account, Assignment.replica == replica)
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result) == 1

    async def holder(self, account: str) -> AssignmentRow | None:
        async with self.store.transaction("read assignment", account) as session:
            row = await session.get(Assignment, account)
            return None if row is None else AssignmentRow._from_model(row)

    async def assignments(self, replica: str | None = None) -> list[AssignmentRow]:
        query = select(Assignment).order_by(Assignment.account)
        if replica is not None:
            query = query.where(Assignment.replica == replica)
        async with self.store.transaction("list assignments") as session:
            return [AssignmentRow._from_model(r) for r in (await session.execute(query)).scalars().all()]

    # --- tasks ----------------------------------------------------------------------------------

    async def put_task(
        self, task_id: str, replica: str, state: str, document: str, *, forget_operations: bool = False
    ) -> None:
        """Create or update a task this replica runs; with `forget_operations`, in the same
        transaction, drop the results other replicas kept for it (the document holds them now)."""
        now = _now()
        async with self.store.transaction("save task", task_id) as session:
            if forget_operations:
                await _forget_results(session, task_id)
            row = await session.get(TaskRow, task_id)
            if row is None:
                session.add(
                    TaskRow(id=task_id, replica=replica, state=state, document=document, created_at=now, updated_at=now)
                )
            else:
                row.replica, row.state, row.document, row.updated_at = replica, state, document, now

    async def get_task(self, task_id: str) -> StoredTask | None:
        async with self.store.transaction("read task", task_id) as session:
            row = await session.get(TaskRow, task_id)
            return None if row is None else _task(row)

    async def recent_tasks(self, limit: int) -> list[StoredTask]:
        """The newest `limit` tasks of every replica, newest first (`GET /task`, the dashboard)."""
        async with self.store.transaction("list recent tasks") as session:
            query = select(TaskRow).order_by(TaskRow.created_at.desc(), TaskRow.id).limit(limit)
            return [_task(r) for r in (await session.execute(query)).scalars().all()]

    async def running_tasks(self, replicas: Collection[str]) -> list[StoredTask]:
        """Tasks still marked running by these replicas, and those whose operation one of them was
        running for another replica."""
        if not replicas:
            return []
        held = select(OperationResultRow.task_id).where(
            OperationResultRow.state == "running", OperationResultRow.replica.in_(list(replicas))
        )
        async with self.store.transaction("list running tasks") as session:
            rows = (
                (
                    await session.execute(
                        select(TaskRow).where(
                            TaskRow.state == "running", or_(TaskRow.replica.in_(list(replicas)), TaskRow.id.in_(held))
                        )
                    )
                )
                .scalars()
                .all()
            )
            return [_task(r) for r in rows]

    # --- operations run for another replica's task ------------------------------------------------

    async def put_operation(self, operation: StoredOperation) -> None:
        """Record a forwarded operation as it starts (`running`) or ends (`done`, its document)."""
        async with self.store.transaction("save operation result", operation.operation_id) as session:
            row = await session.get(OperationResultRow, operation.operation_id)
            fields = {
                "task_id": operation.task_id,
                "position": operation.position,
                "count": operation.count,
                "type": operation.type,
                "account": operation.account,
                "replica": operation.replica,
                "state": operation.state,
                "document": operation.document,
                "deadline_at": operation.deadline_at,
                "updated_at": _now(),
            }
            if row is None:
                session.add(OperationResultRow(operation_id=operation.operation_id, **fields))
            else:
                for key, value in fields.items():
                    setattr(row, key, value)

    async def task_operations(self, task_id: str) -> list[StoredOperation]:
        """The operations other replicas ran for this task and its replica has not saved yet."""
        async with self.store.transaction("read operation results", task_id) as session:
            query = (
                select(OperationResultRow)
                .where(OperationResultRow.task_id == task_id)
                .order_by(OperationResultRow.position)
            )
            return [
                StoredOperation(
                    r.operation_id,
                    r.task_id,
                    r.position,
                    r.count,
                    r.type,
                    r.account,
                    r.replica,
                    r.state,
                    r.document,
                    _utc(r.deadline_at),
                )
                for r in (await session.execute(query)).scalars().all()
            ]

    async def forget_operation(self, operation_id: str) -> None:
        """A forwarded operation whose outcome this replica cannot tell (it was cut short)."""
        async with self.store.transaction("forget operation result", operation_id) as session:
            await session.execute(
                delete(OperationResultRow)
                .where(OperationResultRow.operation_id == operation_id)
                .execution_options(synchronize_session=False)
            )

    async def forget_running_operations(self, replica: str) -> int:
        """A replica starting again: the operations its former process was running are not running."""
        async with self.store.transaction("forget running operations", replica) as session:
            result = await session.execute(
                delete(OperationResultRow)
                .where(OperationResultRow.replica == replica, OperationResultRow.state == "running")
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result)

    async def hand_task(self, task_id: str, *, from_replica: str, to_replica: str) -> bool:
        """Make `to_replica` the runner of a running task of `from_replica` (gone, or stopping) while
        its operation still runs there, so that it ends the task when the agent answers; False if
        the task or the operation ended meanwhile (then its results are there to end it with)."""
        running_there = (
            select(OperationResultRow.operation_id)
            .where(
                OperationResultRow.task_id == task_id,
                OperationResultRow.replica == to_replica,
                OperationResultRow.state == "running",
            )
            .exists()
        )
        async with self.store.transaction("hand task over", task_id) as session:
            result = await session.execute(
                update(TaskRow)
                .where(
                    TaskRow.id == task_id, TaskRow.replica == from_replica, TaskRow.state == "running", running_there
                )
                .values(replica=to_replica, updated_at=_now())
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result) == 1

    async def end_task(self, task_id: str, *, expect_replica: str, state: str, document: str) -> bool:
        """End a running task of `expect_replica` (a dead one's), dropping the results other
        replicas kept for it (`document` holds them); False if it ended meanwhile."""
        async with self.store.transaction("end task", task_id) as session:
            result = await session.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id, TaskRow.replica == expect_replica, TaskRow.state == "running")
                .values(state=state, document=document, updated_at=_now())
                .execution_options(synchronize_session=False)
            )
            if _rowcount(result) != 1:
                return False
            await _forget_results(session, task_id)
            return True

    async def trim_tasks(self, keep: int) -> int:
        """Delete the oldest ended tasks beyond the newest `keep` tasks; returns how many went."""
        async with self.store.transaction("trim tasks") as session:
            cutoff = (
                await session.execute(select(TaskRow.created_at).order_by(TaskRow.created_at.desc()).offset(keep))
            ).first()
            if cutoff is None:
                return 0
            result = await session.execute(
                delete(TaskRow)
                .where(TaskRow.created_at <= cutoff[0], TaskRow.state != "running")
                .execution_options(synchronize_session=False)
            )
            # Results no running task will read (their task ended without them, or is gone).
            await session.execute(
                delete(OperationResultRow)
                .where(
                    OperationResultRow.updated_at <= cutoff[0],
                    OperationResultRow.task_id.not_in(select(TaskRow.id).where(TaskRow.state == "running")),
                )
                .execution_options(synchronize_session=False)
            )
            return _rowcount(result)


async def _forget_results(session: Any, task_id: str) -> None:
    """Drop the results other replicas kept for a task, in the caller's transaction (the task's
    document holds them now)."""
    await session.execute(
        delete(OperationResultRow)
        .where(OperationResultRow.task_id == task_id)
        .execution_options(synchronize_session=False)
    )


def _task(row: TaskRow) -> StoredTask:
    return StoredTask(row.id, row.replica, row.state, row.document, _utc(row.created_at), _utc(row.updated_at))
