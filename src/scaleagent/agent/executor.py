"""The agent's end of the Operations stream: runs the hub's operations and answers each.

Every operation runs in its own task, at most `operations.maxConcurrent` at once, so a slow one
(a delete waiting for finalizers, a long job) never holds up the others; the stream is read and
written by their own tasks, and the watch engine's events travel on the other stream, so
operations never delay events either.

An operation carries a deadline (the hub's `operationWaitMs`): one still waiting for a slot when
it passes is not started, and one running is cancelled at it, answering with what it did until
then. Whatever happens, the hub receives exactly one result per operation while the stream
lives.

An operation is applied at most once per id (`OperationMemory`): hub replicas run active/active,
and when the agent's replica dies the hub sends the operation again, with the same id, on the
agent's next session, maybe to a replica that cannot know how far the first attempt went. One
that arrives while the same id runs waits for it and answers with its result; one that arrives
after it finished is answered with the remembered result at once. So when a stream ends, its
operations go on until they finish or reach their deadline (their results are remembered for a
repeat), instead of being cancelled half-way. Reads (`getManifest`, `podLogs`) are not
remembered: running one again changes nothing and answers with fresher data, and log results are
the largest there are.

The memory is this agent's alone. A resend may reach another agent of the same accounts (a
standby that took them over when this one's replica died); the operations themselves then keep
it from changing the cluster twice, by the id each leaves in the cluster (kube/operations.py).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
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

# How long, and how many, finished operation ids the agent remembers, with their results
# (whichever limit is reached first evicts the oldest; a running operation is remembered while it
# runs, however long its deadline). The hub sends an operation again once it notices its replica
# died and the agent has reconnected: seconds to a minute (heartbeat timeouts) after the failure,
# so 15 minutes after an operation finished covers a slow failover with room. 10,000 ids bounds
# the bookkeeping under a burst of small operations, and the byte cap bounds the memory whatever
# the results hold (each is at most MAX_RESULT_BYTES).
REMEMBER_IDS = 10_000
REMEMBER_SECONDS = 15 * 60
REMEMBER_BYTES = 64 * 1024 * 1024
# Types that only read: never remembered (see the module's docstring).
READ_ONLY_TYPES = frozenset({"getManifest", "podLogs"})


@dataclass
class _Remembered:
    result: asyncio.Future[pb.OperationResult]
    size: int = 0
    done_at: float = 0.0  # monotonic; 0 while it runs


@dataclass
class OperationMemory:
    """Recent operation ids: those running, and those finished with their results, bounded by
    count, age and bytes (the finished ones; running ones are bounded by their deadlines)."""

    max_ids: int = REMEMBER_IDS
    max_seconds: float = REMEMBER_SECONDS
    max_bytes: int = REMEMBER_BYTES
    bytes: int = 0
    _entries: dict[str, _Remembered] = field(default_factory=dict)
    _done: collections.OrderedDict[str, None] = field(default_factory=collections.OrderedDict)  # oldest first
    _timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, op_id: str) -> _Remembered | None:
        self.prune()
        return self._entries.get(op_id)

    def start(self, op_id: str) -> _Remembered:
        entry = _Remembered(asyncio.get_running_loop().create_future())
        self._entries[op_id] = entry
        return entry

    def finish(self, op_id: str, entry: _Remembered, result: pb.OperationResult) -> None:
        """Remember a finished operation's result."""
        entry.result.set_result(result)
        if self._entries.get(op_id) is not entry:
            return
        entry.size, entry.done_at = result.ByteSize(), time.monotonic()
        self.bytes += entry.size
        self._done[op_id] = None
        self.prune()
        if self._timer is None:
            self._schedule()

    def forget(self, op_id: str, entry: _Remembered) -> None:
        """An operation that applied nothing (not started) or was cut short: a repeat runs again."""
        if self._entries.get(op_id) is entry:
            del self._entries[op_id]
            if op_id in self._done:
                del self._done[op_id]
                self.bytes -= entry.size

    def prune(self) -> None:
        horizon = time.monotonic() - self.max_seconds
        while self._done:
            op_id = next(iter(self._done))
            entry = self._entries[op_id]
            if len(self._done) <= self.max_ids and self.bytes <= self.max_bytes and entry.done_at > horizon:
                break
            self.forget(op_id, entry)

    def _schedule(self) -> None:
        """Forget results when they reach their age even if no operation comes to prune them."""
        self._timer = None
        self.prune()
        if self._done:
            oldest = self._entries[next(iter(self._done))]
            delay = max(0.0, oldest.done_at + self.max_seconds - time.monotonic()) + 0.01
            self._timer = asyncio.get_running_loop().call_later(delay, self._schedule)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


RECENT_OPERATIONS = 100  # ended operations kept for GET /operations


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
        self.repeats = 0  # operations answered from the memory (or the same id's run) instead of run again
        self.max_result_bytes = MAX_RESULT_BYTES
        self.memory = OperationMemory()
        self._detached: set[asyncio.Task[pb.OperationResult]] = set()  # runs that outlive their stream
        # For GET /operations: what runs now, and the last RECENT_OPERATIONS that ended (no bodies).
        self.in_flight: dict[int, dict[str, Any]] = {}
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_OPERATIONS)

    def operations(self) -> dict[str, Any]:
        """`GET /operations`: the operations running now, and those that ended lately (newest
        first): id, type, account, start and end (epoch seconds), status. Never a body."""
        return {
            "inFlight": sorted(self.in_flight.values(), key=lambda o: o["startedAt"]),
            "recent": list(reversed(self.recent)),
        }

    def health(self) -> dict[str, Any]:
        return {
            "maxConcurrent": self.max_concurrent,
            "running": self.running,
            "waiting": self.waiting,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "expiredBeforeStart": self.expired,
            "repeatsAnswered": self.repeats,
            "rememberedIds": len(self.memory),
            "rememberedBytes": self.memory.bytes,
        }

    async def stop(self) -> None:
        """Cancel the operations still running (the agent is stopping)."""
        self.memory.close()
        for task in self._detached:
            task.cancel()
        if self._detached:
            await asyncio.wait(self._detached)

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
        outbox.put_nowait(await self.run(op))

    async def run(self, op: pb.Operation) -> pb.OperationResult:
        """One operation's result, running it only if its id is not remembered: a repeat of an
        id that runs waits for that run, one of an id that finished gets its result at once.
        Cancelling this does not cancel a remembered operation's run (see the module's docstring)."""
        if op.type in READ_ONLY_TYPES or not op.id:
            return await self._run_counted(op)
        entry = self.memory.get(op.id)
        if entry is not None:
            self.repeats += 1
            log.info(
                "operation %s: %s on %s was received before; answering with that run's result",
                op.id,
                op.type,
                op.account,
            )
            return await asyncio.shield(entry.result)
        entry = self.memory.start(op.id)
        task = asyncio.create_task(self._remembered_run(op, entry), name=f"operation {op.id}")
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)
        return await asyncio.shield(entry.result)

    async def _remembered_run(self, op: pb.Operation, entry: _Remembered) -> pb.OperationResult:
        try:
            result, started = await self._run_counted_started(op)
        except BaseException:
            # Cancelled (the agent stops): whoever waits learns it; a repeat would run again.
            self.memory.forget(op.id, entry)
            entry.result.set_result(
                _failure(op.id, 503, "ServiceUnavailable", "the agent stopped before the operation finished")
            )
            raise
        if started:
            self.memory.finish(op.id, entry, result)
        else:
            self.memory.forget(op.id, entry)
            entry.result.set_result(result)
        return result

    async def _run_counted(self, op: pb.Operation) -> pb.OperationResult:
        return (await self._run_counted_started(op))[0]

    async def _run_counted_started(self, op: pb.Operation) -> tuple[pb.OperationResult, bool]:
        record: dict[str, Any] = {"id": op.id, "type": op.type, "account": op.account, "startedAt": time.time()}
        key = id(record)
        self.in_flight[key] = record
        try:
            try:
                result, started = await self._execute(op)
            except Exception as e:
                log.exception("operation %s (%s on %s) failed unexpectedly", op.id, op.type, op.account)
                result = _failure(
                    op.id, 500, "InternalError", f"the agent failed unexpectedly: {type(e).__name__}: {e}"
                )
                started = True
        except BaseException:
            self.recent.append({**record, "endedAt": time.time(), "ok": False, "status": "cancelled"})
            raise
        finally:
            self.in_flight.pop(key, None)
        self.recent.append(
            {**record, "endedAt": time.time(), "ok": result.ok, "status": "succeeded" if result.ok else "failed"}
        )
        if result.ok:
            self.succeeded += 1
        else:
            self.failed += 1
        return result, started

    async def _execute(self, op: pb.Operation) -> tuple[pb.OperationResult, bool]:
        """One operation, from its deadline check to its result; and whether it started (a
        failure before that applied nothing)."""
        loop = asyncio.get_running_loop()
        if op.timeout_ms > 0:  # counted on this agent's clock: the hub's may differ
            deadline: float | None = loop.time() + op.timeout_ms / 1000
        elif op.deadline_unix_ms > 0:
            deadline = loop.time() + (op.deadline_unix_ms / 1000 - time.time())
        else:
            deadline = None
        if deadline is not None and loop.time() >= deadline:
            self.expired += 1
            return (
                _failure(op.id, 504, "Timeout", "the operation's deadline passed before the agent received it"),
                False,
            )
        try:
            request = orjson.loads(op.request) if op.request else {}
        except orjson.JSONDecodeError as e:
            return (_failure(op.id, 400, "BadRequest", f"the operation's request is not valid JSON: {e}"), False)
        try:
            runner = self.accounts.runner(op.account)
        except AccountUnavailable as e:
            return (_failure(op.id, 404, "NotFound", str(e)), False)
        out = Outcome(deadline=deadline, operation=op.id)
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
                        async with runner.operating() as operations:
                            await operations.run(op.type, request, out)
                    finally:
                        self.running -= 1
        except AccountUnavailable as e:
            return (_failure(op.id, 503, "ServiceUnavailable", str(e)), acquired)
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
                ), False
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
        return self._result(op, runner, out), True

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
