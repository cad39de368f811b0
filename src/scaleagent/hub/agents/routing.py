"""Operations on the link: the hub sends one to the agent serving an account and awaits its result.

`OperationRouter.run` picks a session of this replica that serves the account and has its
Operations stream attached, sends the operation with its deadline, and returns the agent's
`OperationReply`. It never raises for what the agent or the network did: an unknown account, an
agent that is gone, a session that ends before answering, or an answer that does not come by
the deadline all become a failed reply whose message says which, so that the task reporting the
operation can always say why it failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...protocol import pb
from ..metrics import HubMetrics
from .registry import DISCONNECTED, ORPHANED, AccountRecord, Registry, Session

log = logging.getLogger("scaleagent.hub.agents.routing")

# An agent answers a timed-out operation itself, at its deadline; the hub waits this much longer
# for that answer before it gives up on the agent.
ANSWER_GRACE_SECONDS = 2.0


@dataclass
class OperationReply:
    ok: bool
    objects: list[dict[str, Any]] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None  # a Kubernetes Status: code, reason, message (details)
    expect: list[Any] = field(default_factory=list)  # pb.CacheExpectation
    agent_id: str = ""
    # What the holder's cache did not show in time, when another replica ran the operation and
    # waited for its own cache (None: not checked there; `expect` is for this replica's cache).
    cache_missed: list[str] | None = None
    replica: str = ""  # the replica whose agent ran it, when not this one
    resent_after: str = ""  # why it was sent a second time (with the same id), if it was

    def document(self) -> dict[str, Any]:
        """The reply as a forwarded operation's answer carries it between replicas."""
        doc: dict[str, Any] = {"ok": self.ok, "objects": self.objects, "output": self.output, "agentId": self.agent_id}
        if self.error is not None:
            doc["error"] = self.error
        if self.cache_missed is not None:
            doc["cacheMissed"] = self.cache_missed
        return doc

    @classmethod
    def from_document(cls, doc: Any, replica: str) -> OperationReply:
        """A peer's answer to a forwarded operation; a malformed one is a failure naming the peer."""
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("ok"), bool)
            or not isinstance(doc.get("objects", []), list)
            or not isinstance(doc.get("output", {}), dict)
            or not isinstance(doc.get("error") or {}, dict)
        ):
            return cls.failure(502, "BadGateway", f"hub replica {replica} answered a forwarded operation malformed")
        missed = doc.get("cacheMissed")
        return cls(
            doc["ok"],
            doc.get("objects") or [],
            doc.get("output") or {},
            doc.get("error"),
            [],
            str(doc.get("agentId") or ""),
            [str(m) for m in missed] if isinstance(missed, list) else None,
            replica,
        )

    @classmethod
    def failure(cls, code: int, reason: str, message: str) -> OperationReply:
        return cls(False, error={"code": code, "reason": reason, "message": message})


@dataclass
class _Pending:
    session_id: str
    agent_id: str
    future: asyncio.Future[OperationReply]


HISTORY_LIMIT = 1000
"""Operations whose hops this replica remembers (the newest; older ones are forgotten)."""


def _iso_ms(t: float) -> str:
    """RFC 3339 UTC with milliseconds: the hops of one operation are often within a second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


@dataclass
class OperationHops:
    """When each hop of one operation happened on this replica (wall-clock seconds), for Armory's
    operation history (`OperationHistoryRecord`, GET /armory/agent/operations): the hub received
    it, sent it to an agent, received the agent's result, and answered its caller."""

    id: str
    account: str
    type: str
    received: float
    replica: str
    agent_id: str = ""
    sent: float | None = None
    result: float | None = None
    result_status: int | None = None
    answered: float | None = None
    outcome: str = ""

    def document(self) -> dict[str, Any]:
        """The record in the shape of Armory's swagger (absent hops are left out, never null)."""
        here = self.replica
        doc: dict[str, Any] = {
            "operationId": self.id,
            "account": self.account,
            "operationType": self.type,
            "startTime": _iso_ms(self.received),
            "opReceivedByClouddriver": {"clouddriverId": here, "time": _iso_ms(self.received)},
        }
        if self.sent is not None:
            doc["opSentToAgent"] = {"agentId": self.agent_id, "time": _iso_ms(self.sent)}
        if self.result is not None:
            result: dict[str, Any] = {}
            if self.result_status is not None:
                result["status"] = self.result_status
            if self.sent is not None:
                result["durationMs"] = int((self.result - self.sent) * 1000)
            doc["resultReceivedFromAgent"] = {
                "agentId": self.agent_id,
                "clouddriverId": here,
                "time": _iso_ms(self.result),
                "result": result,
            }
            doc["resultReceivedByClouddriver"] = {"clouddriverId": here, "time": _iso_ms(self.result)}
        if self.answered is not None:
            doc["opProcessedByClouddriver"] = {"clouddriverId": here, "time": _iso_ms(self.answered)}
            doc["endTime"] = _iso_ms(self.answered)
            doc["totalDurationMs"] = int((self.answered - self.received) * 1000)
            doc["finalOutcome"] = self.outcome
        return doc


class OperationHistory:
    """The hops of the newest `limit` operations this replica routed, in memory: what Armory's
    plugin shows at GET /armory/agent/operations. Kept per replica (an operation forwarded to the
    replica holding its agent is recorded there), and lost with the process: the task of the
    operation, in the database, is the lasting record."""

    def __init__(self, replica: str, limit: int = HISTORY_LIMIT) -> None:
        self.replica = replica
        self.limit = limit
        self._records: dict[str, OperationHops] = {}  # insertion order: oldest first

    def start(self, op_id: str, account: str, type_: str) -> OperationHops:
        hops = OperationHops(op_id, account, type_, time.time(), self.replica)
        self._records.pop(op_id, None)  # the same id sent again (a replica failed): the newest counts
        self._records[op_id] = hops
        while len(self._records) > self.limit:
            del self._records[next(iter(self._records))]
        return hops

    def get(self, op_id: str) -> OperationHops | None:
        return self._records.get(op_id)

    def page(self, items: int, page: int) -> list[OperationHops]:
        """Newest first: page 1 is the newest `items` operations."""
        newest = list(reversed(self._records.values()))
        return newest[(page - 1) * items : page * items]

    def __len__(self) -> int:
        return len(self._records)


class OperationRouter:
    """Sends operations down agents' Operations streams and matches their results."""

    def __init__(self, registry: Registry, metrics: HubMetrics | None = None) -> None:
        self.registry = registry
        self.metrics = metrics if metrics is not None else HubMetrics()
        self._pending: dict[str, _Pending] = {}
        self.sent = 0
        self.history = OperationHistory(registry.replica)
        registry.listeners.append(self._on_registry)

    def _session_for(self, account: str) -> Session | OperationReply:
        record: AccountRecord | None = self.registry.accounts.get(account)
        if record is None or record.state == ORPHANED:
            known = "" if record is None else " (its agent left and it was orphaned)"
            return OperationReply.failure(
                404,
                "NotFound",
                f"no agent serves account {account!r}{known}; GET /api/v1/accounts lists the accounts agents serve",
            )
        sessions = [self.registry.sessions[s] for s in record.sessions if s in self.registry.sessions]
        ready = [s for s in sessions if s.operate is not None]
        if not ready:
            if record.state == DISCONNECTED or not sessions:
                return OperationReply.failure(
                    503,
                    "ServiceUnavailable",
                    f"the agent of account {account!r} ({record.agent_id or 'unknown'}) is "
                    "disconnected; operations need a connected agent",
                )
            return OperationReply.failure(
                503, "ServiceUnavailable", f"the agent of account {account!r} has no Operations stream open"
            )
        # The least busy agent serving it (several agents may serve one account).
        busy = {s.id: 0 for s in ready}
        for p in self._pending.values():
            if p.session_id in busy:
                busy[p.session_id] += 1
        return min(ready, key=lambda s: (busy[s.id], s.connected_at))

    def local(self, account: str) -> bool:
        """This router runs every operation on this replica's agents."""
        return True

    async def run(
        self,
        account: str,
        type_: str,
        request: dict[str, Any],
        timeout: float,
        op_id: str = "",
        task: object | None = None,
    ) -> OperationReply:
        """Run one operation on the agent serving `account`, giving it `timeout` seconds. The same
        `op_id` sent again (after a replica failed) is not applied twice (the agent's memory, and
        the id the operation leaves in the cluster). `task`, where the operation stands in its
        task, matters only to an operation forwarded to another replica (hub/replicas)."""
        op_id = op_id or uuid.uuid4().hex
        if op_id in self._pending:
            return OperationReply.failure(409, "Conflict", f"operation {op_id} is already running on this replica")
        hops = self.history.start(op_id, account, type_)
        reply = await self._run(hops, account, type_, request, timeout, op_id)
        hops.answered = time.time()
        hops.outcome = _outcome(reply)
        return reply

    async def _run(
        self, hops: OperationHops, account: str, type_: str, request: dict[str, Any], timeout: float, op_id: str
    ) -> OperationReply:
        target = self._session_for(account)
        if isinstance(target, OperationReply):
            return target
        session = target
        deadline_ms = int((time.time() + timeout) * 1000)
        message = pb.Operation(
            id=op_id,
            account=account,
            type=type_,
            request=orjson.dumps(request),
            deadline_unix_ms=deadline_ms,
            timeout_ms=int(timeout * 1000),
        )
        future: asyncio.Future[OperationReply] = asyncio.get_running_loop().create_future()
        self._pending[op_id] = _Pending(session.id, session.agent_id, future)
        assert session.operate is not None
        session.operate(message)  # nothing awaited since the check: the stream is still there
        hops.sent, hops.agent_id = time.time(), session.agent_id
        self.sent += 1
        sent_at = time.monotonic()
        log.info("operation %s: %s on account %s sent to agent %s", op_id, type_, account, session.agent_id)
        try:
            reply = await asyncio.wait_for(future, timeout + ANSWER_GRACE_SECONDS)
        except TimeoutError:
            log.warning("operation %s: agent %s did not answer within %gs", op_id, session.agent_id, timeout)
            reply = OperationReply.failure(
                504, "Timeout", f"agent {session.agent_id} did not answer within {timeout + ANSWER_GRACE_SECONDS:g}s"
            )
        finally:
            self._pending.pop(op_id, None)
        self.metrics.operations.child(type_, _outcome(reply)).observe(time.monotonic() - sent_at)
        return reply

    def result(self, session: Session, result: pb.OperationResult) -> None:
        """An OperationResult arrived on `session`'s stream (called by the gRPC service)."""
        pending = self._pending.get(result.id)
        if pending is None or pending.session_id != session.id:
            log.info(
                "agent %s answered operation %s, which is not awaited (timed out?)",
                session.agent_id,
                result.id or "(no id)",
            )
            return
        try:
            objects = orjson.loads(result.objects) if result.objects else []
            output = orjson.loads(result.output) if result.output else {}
            if not isinstance(objects, list) or not isinstance(output, dict):
                raise ValueError("objects must be a JSON array and output a JSON object")
        except ValueError as e:
            reply = OperationReply.failure(
                502, "BadGateway", f"agent {session.agent_id} answered with a malformed result: {e}"
            )
        else:
            error = None
            if not result.ok:
                error = {"code": result.error.code, "reason": result.error.reason, "message": result.error.message}
                if result.error.details:
                    try:
                        error["details"] = orjson.loads(result.error.details)
                    except ValueError:
                        pass
            reply = OperationReply(result.ok, objects, output, error, list(result.expect), session.agent_id)
        hops = self.history.get(result.id)
        if hops is not None and hops.result is None:
            hops.result = time.time()
            hops.result_status = 200 if reply.ok else int((reply.error or {}).get("code") or 500)
        if not pending.future.done():
            pending.future.set_result(reply)

    def detached(self, session: Session) -> None:
        """The session's Operations stream (or the session) ended: its operations fail now."""
        for pending in list(self._pending.values()):
            if pending.session_id == session.id and not pending.future.done():
                pending.future.set_result(
                    OperationReply.failure(
                        503,
                        "ServiceUnavailable",
                        f"agent {session.agent_id} disconnected before answering; the "
                        "operation may have been partly carried out",
                    )
                )

    def _on_registry(self, what: str, session: Session | None, record: AccountRecord | None) -> None:
        if what == "closed" and session is not None:
            self.detached(session)


def _outcome(reply: OperationReply) -> str:
    """The operation metrics' outcome label: a few values, whatever the agent said."""
    if reply.ok:
        return "succeeded"
    reason = (reply.error or {}).get("reason")
    return {"Timeout": "timeout", "ServiceUnavailable": "disconnected"}.get(str(reason), "failed")
