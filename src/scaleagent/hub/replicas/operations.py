"""Operations for any account, from any replica: run here when this replica's agent streams the
account, else forwarded to the replica that does (`POST /armory/agent/operations`), whose answer
carries the result back to the replica holding the caller's request.

When the holder dies with the operation in flight, the operation waits (until its own deadline)
for the account's agent to reconnect to another replica, and is sent there again with the same
id: the agent remembers the ids it ran and answers a repeat from memory, so nothing is applied
twice. If no replica takes the account in time, the operation fails saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from ...protocol.states import AgentAccountState as A
from ..agents.registry import ACTIVE, AccountRecord, Registry
from ..agents.routing import ANSWER_GRACE_SECONDS, OperationReply, OperationRouter
from ..store import StoreError
from .assignments import Assignments
from .forwarding import Forwarder, PeerUnreachable

log = logging.getLogger("scaleagent.hub.replicas.operations")

OPERATIONS_PATH = "/armory/agent/operations"
"""The seeds' endpoint for an operation forwarded by another replica."""


@dataclass(frozen=True, slots=True)
class TaskPosition:
    """Where an operation stands in its task: forwarded with it, so that the replica running it
    can record its result for the task should the task's own replica die (hub/tasks.py)."""

    task: str
    position: int
    count: int

    def document(self) -> dict[str, Any]:
        return {"id": self.task, "position": self.position, "count": self.count}


class ReplicaOperations:
    """What tasks call to run an operation; the same `run` as `OperationRouter`'s."""

    def __init__(
        self,
        router: OperationRouter,
        registry: Registry,
        assignments: Assignments | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self.router, self.registry = router, registry
        self.assignments, self.forwarder = assignments, forwarder
        self.forwarded = 0
        self.resent = 0

    @property
    def sent(self) -> int:
        return self.router.sent

    def local(self, account: str) -> bool:
        """Whether an agent on this replica streams the account now."""
        record = self.registry.accounts.get(account)
        return record is not None and record.state == ACTIVE and bool(record.sessions)

    async def run(
        self,
        account: str,
        type_: str,
        request: dict[str, Any],
        timeout: float,
        op_id: str = "",
        task: TaskPosition | None = None,
    ) -> OperationReply:
        op_id = op_id or uuid.uuid4().hex
        lost: list[PeerUnreachable] = []
        reply = await self._run(account, type_, request, timeout, op_id, lost, task)
        if lost and reply.ok:
            self.resent += 1
            reply.resent_after = f"hub replica {lost[0].replica} went away with it ({lost[0].reason})"
        return reply

    async def _run(
        self,
        account: str,
        type_: str,
        request: dict[str, Any],
        timeout: float,
        op_id: str,
        gone: list[PeerUnreachable],
        task: TaskPosition | None,
    ) -> OperationReply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.assignments is None or self.forwarder is None:
            await self._until_watching(account, deadline)
            return await self.router.run(account, type_, request, max(deadline - loop.time(), 0.1), op_id)
        lost: PeerUnreachable | None = None
        waited = 0.1
        while True:
            if self.local(account):
                await self._until_watching(account, deadline)
                return await self.router.run(account, type_, request, max(deadline - loop.time(), 0.1), op_id)
            remaining = deadline - loop.time()
            if lost is not None:
                self.assignments.forget_location(account)  # waiting for it to move: ask the database
            try:
                peer = await self.assignments.locate(account)
            except StoreError as e:
                return OperationReply.failure(503, "ServiceUnavailable", f"cannot tell which replica serves it: {e}")
            if peer is not None and (lost is None or peer.id != lost.replica):
                try:
                    return await self._forward(peer.id, peer.base_url, account, type_, request, remaining, op_id, task)
                except PeerUnreachable as e:
                    log.warning(
                        "operation %s on account %s: %s; waiting for another replica to take it", op_id, account, e
                    )
                    lost = e
                    gone.append(e)
            elif peer is None and lost is None and not await self._coming_back(account):
                log.info("operation %s on account %s: no replica streams it, nor is it expected back", op_id, account)
                return await self.router.run(account, type_, request, max(remaining, 0.1), op_id)
            if loop.time() + waited >= deadline:
                if lost is None:
                    return OperationReply.failure(
                        503,
                        "ServiceUnavailable",
                        f"no hub replica streams account {account!r} now (its replica stopped and its agent has "
                        "not reconnected within the operation's time); operations need a connected agent",
                    )
                return OperationReply.failure(
                    503,
                    "ServiceUnavailable",
                    f"hub replica {lost.replica} streaming account {account!r} went away with the operation in "
                    f"flight ({lost.reason}), and no other replica took the account within the operation's "
                    "time; the operation may have been carried out",
                )
            # A retry with backoff while the account moves to another replica (its agent reconnects).
            await asyncio.sleep(waited)
            waited = min(waited * 2, 2.0)

    async def run_here(
        self, account: str, type_: str, request: dict[str, Any], timeout: float, op_id: str
    ) -> OperationReply:
        """An operation another replica forwarded here because the assignments table says this
        replica streams the account: run here, never forwarded again. The row is written when
        the claim is won, a moment before the agent's session is registered here: an operation
        arriving in between waits for it (within its time)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.local(account):
            await self._until(account, deadline, lambda: self.local(account))
        if self.registry.accounts.get(account) is None:
            # Claimed for this replica, but its agent never registered it here in time (it went
            # to another replica, or left): say so, rather than "no agent serves it".
            return OperationReply.failure(
                503,
                "ServiceUnavailable",
                f"hub replica {self.registry.replica} took account {account!r} for an agent that did not register "
                "it here within the operation's time (it moved again, or left); try again",
            )
        await self._until_watching(account, deadline)
        return await self.router.run(account, type_, request, max(deadline - loop.time(), 0.1), op_id)

    async def _until(self, account: str, deadline: float, done: Any) -> None:
        """Until `done()` holds, checked whenever the registry hears of `account`, or the deadline
        (less the time the agent needs to answer)."""
        if done():
            return
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def listener(what: str, session: object, record: AccountRecord | None) -> None:
            if record is not None and record.name == account and done() and not ready.done():
                ready.set_result(None)

        self.registry.listeners.append(listener)
        try:
            await asyncio.wait_for(ready, max(deadline - loop.time() - ANSWER_GRACE_SECONDS, 0.1))
        except TimeoutError:
            pass  # sent anyway: the agent answers within the operation's time, or the router says why not
        finally:
            self.registry.listeners.remove(listener)

    async def _until_watching(self, account: str, deadline: float) -> None:
        """An account just (re)connected is listed by its agent before it is watched: an operation
        run meanwhile would not know which kinds reach the cache, and its task would complete
        before the cache shows its change. Wait (within the operation's time) for `watching`."""

        def settled() -> bool:
            record = self.registry.accounts.get(account)
            return record is None or record.agent_state not in (A.CONNECTING, A.SYNCING)

        await self._until(account, deadline, settled)

    async def _coming_back(self, account: str) -> bool:
        """Whether an account no replica streams now is expected back: it is ACTIVE in the accounts
        table, so its replica stopped (and was cleaned up) while its agent reconnects elsewhere."""
        assert self.assignments is not None
        try:
            row = await self.assignments.shared.store.get_account(account)
        except StoreError:
            return True  # cannot tell: wait for it (within the operation's time) rather than fail at once
        return row is not None and row.state == "ACTIVE"

    async def _forward(
        self,
        replica: str,
        base_url: str,
        account: str,
        type_: str,
        request: dict[str, Any],
        timeout: float,
        op_id: str,
        task: TaskPosition | None = None,
    ) -> OperationReply:
        assert self.forwarder is not None
        self.forwarded += 1
        operation: dict[str, Any] = {
            "id": op_id,
            "account": account,
            "type": type_,
            "request": request,
            "timeoutMs": int(max(timeout, 0.1) * 1000),
            "deadlineUnixMs": int((time.time() + timeout) * 1000),
        }
        if task is not None:
            operation["task"] = task.document()
        body = orjson.dumps({"operation": operation})
        answer = await self.forwarder.request(
            replica,
            base_url,
            "POST",
            OPERATIONS_PATH,
            body=body,
            headers={"content-type": "application/json"},
            timeout=timeout + ANSWER_GRACE_SECONDS + 5.0,  # the holder also waits for its cache
        )
        try:
            doc = answer.json()
        except orjson.JSONDecodeError:
            doc = None
        if answer.status != 200:
            message = doc.get("error") if isinstance(doc, dict) else None
            return OperationReply.failure(
                answer.status if 400 <= answer.status <= 599 else 502,
                "BadGateway",
                f"hub replica {replica} refused the forwarded operation: {message or answer.body[:200]!r}",
            )
        return OperationReply.from_document(doc, replica)
