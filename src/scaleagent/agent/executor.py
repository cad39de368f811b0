"""The agent's end of the Operations stream: runs the hub's operations and answers each.

Every operation runs in its own task, at most `operations.maxConcurrent` at once, so a slow one
(a delete waiting for finalizers, a long job) never holds up the others; the stream is read and
written by their own tasks, and the watch engine's events travel on the other stream, so
operations never delay events either.

An operation carries a deadline (the hub's `operationWaitMs`): one still waiting for a slot when
it passes is not started, and one running is cancelled at it, answering with what it did until
then. Whatever happens, the hub receives exactly one result per operation while the stream
lives; when the stream ends, the operations of that stream are cancelled (the hub has already
failed them: nobody could receive their results).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc
import orjson

from ..kube.errors import OperationFailed
from ..kube.operations import STATUS_REASONS, Outcome
from ..protocol import pb
from .accounts import AccountManager, AccountUnavailable
from .scrub import scrub_secret

log = logging.getLogger("scaleagent.agent.executor")

DEFAULT_MAX_CONCURRENT = 16
# Results stay below this and below the message limit the hub announces (its grpc.maxMessageBytes,
# 16 MiB by default): a job's logs or a deploy of many large objects are shortened beyond it.
MAX_RESULT_BYTES = 4 * 1024 * 1024
TRUNCATED_LOG_CHARS = 16 * 1024


class OperationExecutor:
    def __init__(self, accounts: AccountManager, max_concurrent: int = DEFAULT_MAX_CONCURRENT) -> None:
        self.accounts = accounts
        self.max_concurrent = max_concurrent
        self._slots = asyncio.Semaphore(max_concurrent)
        self.running = 0
        self.waiting = 0
        self.succeeded = 0
        self.failed = 0
        self.expired = 0  # not started: the deadline passed while waiting
        self.max_result_bytes = MAX_RESULT_BYTES

    def health(self) -> dict[str, Any]:
        return {
            "maxConcurrent": self.max_concurrent,
            "running": self.running,
            "waiting": self.waiting,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "expiredBeforeStart": self.expired,
        }

    async def serve(self, call: grpc.aio.StreamStreamCall, max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        """Read operations until the hub ends the stream; answer each as soon as it is done."""
        self.max_result_bytes = min(max_result_bytes, MAX_RESULT_BYTES)
        outbox: asyncio.Queue[pb.OperationResult] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        writer = asyncio.create_task(_write_all(call, outbox), name="operations writer")
        try:
            while True:
                op = await call.read()
                if op is grpc.aio.EOF:
                    return
                task = asyncio.create_task(self._answer(op, outbox), name=f"operation {op.id}")
                running.add(task)
                task.add_done_callback(running.discard)
                if writer.done():
                    writer.result()  # the stream broke: raise why
        finally:
            for task in (*running, writer):
                task.cancel()
            await asyncio.wait([*running, writer])

    async def _answer(self, op: pb.Operation, outbox: asyncio.Queue[pb.OperationResult]) -> None:
        try:
            result = await self.run(op)
        except Exception as e:
            log.exception("operation %s (%s on %s) failed unexpectedly", op.id, op.type, op.account)
            result = _failure(op.id, 500, "InternalError", f"the agent failed unexpectedly: {type(e).__name__}: {e}")
        if result.ok:
            self.succeeded += 1
        else:
            self.failed += 1
        outbox.put_nowait(result)

    async def run(self, op: pb.Operation) -> pb.OperationResult:
        """One operation, from its deadline check to its result."""
        loop = asyncio.get_running_loop()
        if op.timeout_ms > 0:  # counted on this agent's clock: the hub's may differ
            deadline: float | None = loop.time() + op.timeout_ms / 1000
        elif op.deadline_unix_ms > 0:
            deadline = loop.time() + (op.deadline_unix_ms / 1000 - time.time())
        else:
            deadline = None
        if deadline is not None and loop.time() >= deadline:
            self.expired += 1
            return _failure(op.id, 504, "Timeout", "the operation's deadline passed before the agent received it")
        try:
            request = orjson.loads(op.request) if op.request else {}
        except orjson.JSONDecodeError as e:
            return _failure(op.id, 400, "BadRequest", f"the operation's request is not valid JSON: {e}")
        try:
            runner = self.accounts.runner(op.account)
        except AccountUnavailable as e:
            return _failure(op.id, 404, "NotFound", str(e))
        out = Outcome(deadline=deadline)
        started = time.perf_counter()
        self.waiting += 1
        acquired = False
        try:
            async with asyncio.timeout_at(deadline):
                async with self._slots:
                    self.waiting -= 1
                    acquired = True
                    self.running += 1
                    try:
                        await runner.operations().run(op.type, request, out)
                    finally:
                        self.running -= 1
        except AccountUnavailable as e:
            return _failure(op.id, 503, "ServiceUnavailable", str(e))
        except TimeoutError:
            if not acquired:
                self.expired += 1
                return _failure(
                    op.id,
                    504,
                    "Timeout",
                    f"not started: its deadline passed while {self.running} "
                    f"operation(s) held every slot (operations.maxConcurrent "
                    f"{self.max_concurrent})",
                )
            done = _applied(out)
            out.error = OperationFailed(
                504,
                "Timeout",
                f"the operation did not finish before its deadline; it was {out.step or 'starting'}{done}",
            )
        finally:
            if not acquired:
                self.waiting -= 1
        elapsed = (time.perf_counter() - started) * 1000
        if out.error is None:
            log.info("operation %s: %s on %s done in %.0f ms", op.id, op.type, op.account, elapsed)
        else:
            log.warning(
                "operation %s: %s on %s failed in %.0f ms: %s %s",
                op.id,
                op.type,
                op.account,
                elapsed,
                out.error.code,
                out.error.message,
            )
        return self._result(op, runner, out)

    def _result(self, op: pb.Operation, runner: Any, out: Outcome) -> pb.OperationResult:
        objects = [
            scrub_secret(o) if o.get("kind") == "Secret" and o.get("apiVersion") == "v1" else o for o in out.objects
        ]
        expect = [
            pb.CacheExpectation(
                group=t.kind.group,
                kind=t.kind.kind,
                namespace=t.namespace,
                name=t.name,
                resource_version=t.resource_version,
                deleted=t.deleted,
                uid=t.uid,
            )
            for t in out.touched
            if runner.follows(t.kind.group, t.kind.kind, t.namespace)
        ]
        output = dict(out.output)
        encoded = orjson.dumps(objects)
        limit = self.max_result_bytes
        if len(encoded) + len(orjson.dumps(output)) > limit:
            # A result the hub cannot take would cost the whole link: logs are cut to their ends,
            # then objects to their identity, and the result says so.
            output["truncated"] = f"the result was over {limit} bytes: logs and objects were shortened"
            if isinstance(output.get("logs"), dict):
                output["logs"] = {
                    pod: {c: text[-TRUNCATED_LOG_CHARS:] for c, text in containers.items()}
                    for pod, containers in output["logs"].items()
                    if isinstance(containers, dict)
                }
            if len(encoded) + len(orjson.dumps(output)) > limit:
                encoded = orjson.dumps([_identity(o) for o in objects])
        result = pb.OperationResult(
            id=op.id, ok=out.error is None, objects=encoded, output=orjson.dumps(output), expect=expect
        )
        if out.error is not None:
            e = out.error
            # The last guard of "never a bare 500": whatever made this failure, it leaves with a
            # reason and a message that say what the agent was doing.
            code = e.code or 500
            reason = e.reason or STATUS_REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
            message = e.message or f"{op.type} failed with {code} {reason} while {out.step or 'starting'}"
            result.error.CopyFrom(
                pb.Status(
                    code=code,
                    reason=reason,
                    message=message,
                    details=orjson.dumps(e.details) if e.details is not None else b"",
                )
            )
        return result


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
    }


def _applied(out: Outcome) -> str:
    if not out.objects:
        return ""
    names = ", ".join(f"{o.get('kind', '?')} {(o.get('metadata') or {}).get('name', '?')}" for o in out.objects)
    return f" (done before that: {names})"


def _failure(op_id: str, code: int, reason: str, message: str) -> pb.OperationResult:
    return pb.OperationResult(
        id=op_id, ok=False, objects=b"[]", output=b"{}", error=pb.Status(code=code, reason=reason, message=message)
    )


async def _write_all(call: grpc.aio.StreamStreamCall, outbox: asyncio.Queue[pb.OperationResult]) -> None:
    """The stream's only writer: gRPC streams take one write at a time."""
    while True:
        result = await outbox.get()
        await call.write(pb.OperationsMessage(result=result))
