"""Tasks: a list of Clouddriver operations, run in order, reported by `GET /task/{id}`.

`POST /kubernetes/ops` creates a task and returns at once; the task then sends each operation to
the agent of its account (operations.py), and records phases, outputs and the outcome in
Clouddriver's shape (`status`, `history`, `resultObjects`), plus a plain `state`
(`running`, `completed`, `failed`).

Read-your-writes: an operation counts as done only once the hub's cache shows what it produced
(every object at the resourceVersion the agent reported, deleted objects gone), so whoever reads
the cache after the task completed sees the change. Objects of kinds the agent does not follow
never reach the cache and are not waited for. Should the cache not catch up before the
operation's deadline, the task still completes (the cluster did change) and its history says so.

Tasks are kept in the database (`kubesvc_tasks`) as well as in the memory of the replica running
them, so `GET /task/{id}` answers from any replica and after a restart; the oldest finished ones go
beyond `operations.maxTasks`. A task whose replica stopped while it ran (a restart, or a replica
found dead by the others) is ended by another replica. An operation forwarded to the replica whose
agent streams its account is recorded there, running and then with its result
(`kubesvc_operation_results`), until the task's replica has saved the task with it: so the task
ends with what really happened to that operation (COMPLETED when it was the last and succeeded;
FAILED with its own error, or saying which operations were not run). Only an operation whose
result no replica recorded (one this replica ran itself, or whose replica died too) leaves the
task FAILED saying it may have been carried out: each operation carries an id that keeps it from
being applied twice, but whether it was applied cannot be known then.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import orjson

from .agents.routing import OperationReply
from .cache.cache import APPLICATION, CLUSTER, Cache
from .numbers import INT32_MAX, INT64_MAX, whole_number
from .replicas.operations import TaskPosition
from .store import StoreError
from .store.shared import SharedStore, StoredOperation

log = logging.getLogger("scaleagent.hub.tasks")

RUNNING, COMPLETED, FAILED = "running", "completed", "failed"

PHASES = {
    "deployManifest": "DEPLOY_KUBERNETES_MANIFEST",
    "deleteManifest": "DELETE_KUBERNETES_MANIFEST",
    "patchManifest": "PATCH_KUBERNETES_MANIFEST",
    "scaleManifest": "SCALE_KUBERNETES_MANIFEST",
    "undoRolloutManifest": "UNDO_ROLLOUT_KUBERNETES_MANIFEST",
    "pauseRolloutManifest": "PAUSE_ROLLOUT_KUBERNETES_MANIFEST",
    "resumeRolloutManifest": "RESUME_ROLLOUT_KUBERNETES_MANIFEST",
    "rollingRestartManifest": "ROLLING_RESTART_KUBERNETES_MANIFEST",
    "runJob": "RUN_KUBERNETES_JOB",
}
"""The operations `POST /kubernetes/ops` accepts, with the phase name their history uses."""

NUMBERS: dict[str, tuple[tuple[tuple[str, ...], int, int], ...]] = {
    "scaleManifest": ((("replicas",), 0, INT32_MAX),),
    "deleteManifest": ((("options", "gracePeriodSeconds"), 0, INT64_MAX),),
    "undoRolloutManifest": ((("revision",), 0, INT64_MAX), (("numRevisionsBack",), 1, INT64_MAX)),
}
"""The numbers of each operation's description (path, least, most), checked when the task is
submitted: Kubernetes holds replicas as an int32, grace periods and revisions as int64s. Beyond
them the agent would fail to encode the request (a 64-bit JSON integer) or the API server would
refuse it, and the task would fail later, or as an agent's internal error; refused here, the
request is a 400 naming the field and its range. Other numbers (in manifests, patch bodies) are
the API server's to judge."""

ORCHESTRATION = "ORCHESTRATION"
# A write about a forwarded operation holds it up this long at most (the database failing).
RECORD_SECONDS = 5.0
# How long past its deadline a forwarded operation recorded `running` is still believed to run.
RUNNING_GRACE_SECONDS = 30.0
# The least time given to the cache to show an operation's changes, even when the operation
# itself used up operationWaitMs (capped by operationWaitMs).
CACHE_WAIT_SECONDS = 10.0


class Operations(Protocol):
    """What runs one operation on an account's agent, here or on another replica."""

    async def run(
        self,
        account: str,
        type_: str,
        request: dict[str, Any],
        timeout: float,
        op_id: str = "",
        task: TaskPosition | None = None,
    ) -> OperationReply: ...

    def local(self, account: str) -> bool:
        """Whether an agent of this replica streams the account (else the operation is forwarded)."""
        ...


class BadOperations(ValueError):
    """The request body is not a list of operations this hub runs; says what is wrong."""


@dataclass
class Operation:
    type: str
    account: str
    description: dict[str, Any]


@dataclass
class Task:
    id: str
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    state: str = RUNNING
    history: list[dict[str, Any]] = field(default_factory=list)
    result_objects: list[dict[str, Any]] = field(default_factory=list)
    exception: dict[str, Any] | None = None
    ended_ms: int | None = None
    # The accounts its operations change, and who asked: a caller may read the task when it may
    # read all of them (docs/security.md).
    accounts: list[str] = field(default_factory=list)
    user: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    # Whether another replica ran one of its operations (and may have kept its result for it);
    # whether the operation under way was sent to another replica; whether, as this replica
    # stopped, the task went to that replica to end.
    forwarded: bool = field(default=False, repr=False)
    forwarded_now: bool = field(default=False, repr=False)
    handed_over: bool = field(default=False, repr=False)

    def log(self, phase: str, status: str) -> None:
        self.history.append({"phase": phase, "status": status, "timestamp": int(time.time() * 1000)})

    def finish(self, state: str, message: str) -> None:
        self.log(ORCHESTRATION, message)
        self.state, self.ended_ms = state, int(time.time() * 1000)
        self.done.set()

    def document(self) -> dict[str, Any]:
        last = (
            self.history[-1] if self.history else {"phase": ORCHESTRATION, "status": "Initializing Orchestration Task"}
        )
        doc: dict[str, Any] = {
            "id": self.id,
            "state": self.state,
            "status": {
                "phase": last["phase"],
                "status": last["status"],
                "completed": self.state != RUNNING,
                "failed": self.state == FAILED,
                "retryable": False,
            },
            "history": self.history,
            "resultObjects": self.result_objects,
            "startTimeMs": self.started_ms,
        }
        if self.ended_ms is not None:
            doc["endTimeMs"] = self.ended_ms
        if self.exception is not None:
            doc["exception"] = self.exception
        if self.accounts:
            doc["accounts"] = self.accounts
        if self.user:
            doc["user"] = self.user
        return doc


def parse_operations(body: Any) -> list[Operation]:
    """Clouddriver's `[{"deployManifest": {...}}, ...]`, checked whole: every problem is named."""
    if not isinstance(body, list) or not body:
        raise BadOperations('the body must be a non-empty JSON list of operations, e.g. [{"deployManifest": {...}}]')
    problems, out = [], []
    for i, item in enumerate(body):
        where = f"operation {i + 1}"
        if not isinstance(item, dict) or len(item) != 1:
            problems.append(f"{where} must be an object with exactly one key, the operation type")
            continue
        ((type_, description),) = item.items()
        if type_ not in PHASES:
            problems.append(f"{where}: unknown operation type {type_!r}; this hub runs {', '.join(PHASES)}")
            continue
        if not isinstance(description, dict):
            problems.append(f"{where} ({type_}) must be a JSON object")
            continue
        account = description.get("account") or description.get("credentials")
        if not isinstance(account, str) or not account:
            problems.append(f"{where} ({type_}): account is required (a string)")
            continue
        bad = _bad_numbers(type_, description) + _bad_flags(type_, description)
        if bad:
            problems.extend(f"{where} ({type_}): {b}" for b in bad)
            continue
        out.append(Operation(type_, account, description))
    if problems:
        raise BadOperations("; ".join(problems))
    return out


FLAGS: dict[str, tuple[str, ...]] = {"deployManifest": ("dryRun",)}
"""The true/false fields of each operation's description. `dryRun` above all is checked when the
task is submitted: a dry run the agent took for a real one (`"dryRun": "yes"`) would change the
cluster."""


def _bad_flags(type_: str, description: dict[str, Any]) -> list[str]:
    return [
        f"{key}: expected true or false, got {description[key]!r}"
        for key in FLAGS.get(type_, ())
        if description.get(key) is not None and not isinstance(description[key], bool)
    ]


def _bad_numbers(type_: str, description: dict[str, Any]) -> list[str]:
    """What is wrong with the numbers of one operation's description (NUMBERS); absent ones and
    those in a part of the wrong type are left to the agent, which says what it expects."""
    problems = []
    for path, low, high in NUMBERS.get(type_, ()):
        parent: Any = description
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        value = parent.get(path[-1]) if isinstance(parent, dict) else None
        if value is None or value == "":
            continue
        try:
            number = whole_number(value, low, high)
        except ValueError as e:
            problems.append(f"{'.'.join(path)}: {e}")
            continue
        if isinstance(value, float):
            parent[path[-1]] = number  # the agent is sent 3, not 3.0
    return problems


class TaskRunner:
    """Creates tasks, runs their operations through the router, and keeps them for reading: in
    memory while this replica runs them, and in the database (`shared`) for every replica."""

    def __init__(
        self,
        router: Operations,
        cache: Cache,
        *,
        operation_wait_ms: int,
        max_tasks: int,
        shared: SharedStore | None = None,
        replica: str = "",
    ) -> None:
        self.router = router
        self.cache = cache
        self.operation_wait = operation_wait_ms / 1000
        self.max_tasks = max_tasks
        self.shared, self.replica = shared, replica
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._running: set[asyncio.Task[None]] = set()
        self.ended = {COMPLETED: 0, FAILED: 0}  # tasks ended since the start, for /metrics
        self._saves = 0

    @property
    def running(self) -> int:
        return len(self._running)

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    async def stored(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        """A task from the database: (the replica running it, its document), or None."""
        if self.shared is None:
            return None
        row = await self.shared.get_task(task_id)
        if row is None:
            return None
        return row.replica, orjson.loads(row.document)

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` task documents, newest first: every replica's from the database, with
        this replica's own in-memory copies in place of theirs (saved only at a task's start and
        end, the stored copy of a running task lags). Without a database, this replica's alone.
        Raises StoreError when the database fails."""
        mine = {t.id: t for t in self._tasks.values()}
        if self.shared is None:
            newest = sorted(mine.values(), key=lambda t: t.started_ms, reverse=True)[:limit]
            return [t.document() for t in newest]
        rows = await self.shared.recent_tasks(limit)
        return [mine[r.id].document() if r.id in mine else orjson.loads(r.document) for r in rows]

    async def start(self) -> None:
        """Tasks this replica was running when it last stopped end now, or go to the replica still
        running their operation; the operations its former process ran for others ran no more."""
        if self.shared is not None:
            try:
                await self.shared.forget_running_operations(self.replica)
            except StoreError as e:
                log.error("cannot forget the operations this replica ran before it restarted: %s", e)
        await self.end_tasks_of([self.replica], "the hub replica running it restarted")

    async def end_tasks_of(self, replicas: Collection[str], why: str) -> int:
        """End the tasks still marked running by these replicas (stopped or dead), with the results
        other replicas recorded for them (module docstring). A task whose forwarded operation runs
        on a live replica is handed to that replica, which ends it when the operation does."""
        if self.shared is None:
            return 0
        ended = 0
        live = {r.id for r in await self.shared.replicas()} - set(replicas)
        for row in await self.shared.running_tasks(replicas):
            if row.replica in live:
                continue  # its replica lost the holder of its operation, and sends it again
            if await self._end(row.id, row.replica, row.document, live, f"{why} while the task ran"):
                ended += 1
        if ended:
            log.warning("%d task(s) of replica(s) %s ended: %s", ended, ", ".join(replicas), why)
        return ended

    async def _end(self, task_id: str, replica: str, document: str, live: Collection[str], why: str) -> bool:
        """End a task whose replica is gone with its recorded results; or, while one of its
        operations runs on a live replica, hand the task to that replica (False)."""
        assert self.shared is not None
        for _ in range(2):  # an operation that ends while the task is handed over is read again
            operations = await self.shared.task_operations(task_id)
            holder = next((o.replica for o in operations if o.running_on(live)), None)
            if holder is None:
                break
            if holder == self.replica or await self.shared.hand_task(task_id, from_replica=replica, to_replica=holder):
                log.info("task %s of hub replica %s: its operation runs on %s, which ends it", task_id, replica, holder)
                return False
        doc = _ended_document(orjson.loads(document), operations, why)
        if not await self.shared.end_task(
            task_id, expect_replica=replica, state=doc["state"], document=orjson.dumps(doc).decode()
        ):
            return False
        log.warning("task %s of hub replica %s ended %s: %s", task_id, replica, doc["state"], why)
        return True

    async def run_forwarded(
        self,
        position: TaskPosition,
        op_id: str,
        type_: str,
        account: str,
        timeout: float,
        run: Callable[[], Awaitable[OperationReply]],
    ) -> OperationReply:
        """Run an operation another replica forwarded for its task, recording it as it starts and
        with its result, so that the task ends with that result even if its replica goes before it
        reads the answer: then this replica ends the task itself. The database failing never
        fails the operation, and holds it up by RECORD_SECONDS at most at each step (the task's
        replica still reads the answer)."""
        if self.shared is None:
            return await run()
        deadline = datetime.now(UTC) + timedelta(seconds=timeout + RUNNING_GRACE_SECONDS)
        record = StoredOperation(
            op_id,
            position.task,
            position.position,
            position.count,
            type_,
            account,
            self.replica,
            RUNNING,
            None,
            deadline,
        )
        await self._bounded(self.shared.put_operation(record), f"recording operation {op_id}")
        try:
            reply = await run()
        except BaseException:
            # Cut short (this replica stops): what it did is unknown, so it is recorded as nothing.
            await asyncio.shield(self._bounded(self.shared.forget_operation(op_id), f"forgetting operation {op_id}"))
            raise
        done = replace(record, state="done", document=orjson.dumps(reply.document()).decode())
        await self._bounded(self.shared.put_operation(done), f"recording the result of operation {op_id}")
        await self._bounded(self._end_if_mine(position.task), f"ending task {position.task}")
        return reply

    async def _end_if_mine(self, task_id: str) -> None:
        """After a forwarded operation ended: end its task if it was handed to this replica, or if
        its replica is gone (a sweep may not come: it found the operation running here)."""
        assert self.shared is not None
        row = await self.shared.get_task(task_id)
        if row is None or row.state != RUNNING:
            return
        live = {r.id for r in await self.shared.replicas()}
        if row.replica == self.replica or row.replica not in live:
            why = f"hub replica {row.replica} stopped while the task ran"
            await self._end(row.id, row.replica, row.document, live - {row.replica}, why)

    async def _bounded(self, work: Awaitable[Any], what: str) -> None:
        """A write that must not hold an operation up for long, nor fail it."""
        try:
            await asyncio.wait_for(work, RECORD_SECONDS)
        except (StoreError, TimeoutError) as e:
            log.error("%s: %s", what, e or f"the database did not answer within {RECORD_SECONDS:g}s")

    async def _handed_over(self, task: Task) -> bool:
        """This replica stops while `task` waits for an operation another replica runs: give the
        task to that replica, which ends it with the agent's answer."""
        if self.shared is None or not task.forwarded_now:
            return False
        live = {r.id for r in await self.shared.replicas()} - {self.replica}
        operations = await self.shared.task_operations(task.id)
        holder = next((o.replica for o in operations if o.running_on(live)), None)
        if holder is None:
            return False
        task.log(
            ORCHESTRATION,
            f"Hub replica {self.replica} stopped; hub replica {holder}, running the operation, ends the task",
        )
        await self.shared.put_task(task.id, self.replica, RUNNING, orjson.dumps(task.document()).decode())
        return await self.shared.hand_task(task.id, from_replica=self.replica, to_replica=holder)

    async def submit(self, operations: list[Operation], user: str = "") -> Task:
        """Create a task (recorded before its id is given out: any replica can read it) and run it."""
        task = Task(uuid.uuid4().hex, accounts=sorted({op.account for op in operations}), user=user)
        task.log(ORCHESTRATION, "Initializing Orchestration Task")
        self._tasks[task.id] = task
        self._evict()
        await self._save(task)
        runner = asyncio.get_running_loop().create_task(self._run(task, operations), name=f"task {task.id}")
        self._running.add(runner)
        runner.add_done_callback(self._running.discard)
        return task

    async def _save(self, task: Task) -> None:
        if self.shared is None:
            return
        try:
            await self.shared.put_task(
                task.id,
                self.replica,
                task.state,
                orjson.dumps(task.document()).decode(),
                forget_operations=task.forwarded,
            )
            self._saves += 1
            if self._saves % 1000 == 0:
                await self.shared.trim_tasks(self.max_tasks)
        except StoreError as e:  # this replica still answers from memory; others see the last saved state
            log.error("task %s: cannot save it to the database: %s", task.id, e)

    async def stop(self) -> None:
        for t in list(self._running):
            t.cancel()
        if self._running:
            await asyncio.wait(list(self._running))

    def _evict(self) -> None:
        if len(self._tasks) <= self.max_tasks:
            return
        for task_id in [i for i, t in self._tasks.items() if t.state != RUNNING][: len(self._tasks) - self.max_tasks]:
            del self._tasks[task_id]

    async def _run(self, task: Task, operations: list[Operation]) -> None:
        try:
            await self._operations(task, operations)
        finally:
            if task.state in self.ended:
                self.ended[task.state] += 1
            if not task.handed_over:
                await asyncio.shield(self._save(task))

    async def _operations(self, task: Task, operations: list[Operation]) -> None:
        try:
            for i, op in enumerate(operations):
                if not await self._one(task, op, f"{task.id}-{i}", TaskPosition(task.id, i, len(operations))):
                    return
                if i < len(operations) - 1:
                    # Progress, for a reader after this replica died; the end is saved once the
                    # caller has it (`_run`): until then other replicas ask this one.
                    await self._save(task)
            task.finish(COMPLETED, "Orchestration completed.")
        except asyncio.CancelledError:
            try:
                task.handed_over = await asyncio.wait_for(self._handed_over(task), RECORD_SECONDS)
            except (StoreError, TimeoutError) as e:
                log.error("task %s: cannot hand it over: %s", task.id, e or "the database did not answer")
            if task.handed_over:
                task.done.set()  # readers here look in the database, where its new replica ends it
                raise
            task.exception = {
                "message": "the hub stopped while the task ran",
                "code": 503,
                "reason": "ServiceUnavailable",
            }
            task.finish(FAILED, "Orchestration failed.")
            raise
        except Exception as e:
            log.exception("task %s failed unexpectedly", task.id)
            task.exception = {
                "message": f"the hub failed unexpectedly: {type(e).__name__}: {e}",
                "code": 500,
                "reason": "InternalError",
            }
            task.finish(FAILED, "Orchestration failed.")

    async def _one(self, task: Task, op: Operation, op_id: str, position: TaskPosition) -> bool:
        phase = PHASES[op.type]
        task.log(phase, f"Sending {op.type} to the agent of account {op.account}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.operation_wait
        task.forwarded_now = not self.router.local(op.account)
        reply = await self.router.run(op.account, op.type, _prepared(op), self.operation_wait, op_id, position)
        task.forwarded_now = False
        task.forwarded = task.forwarded or bool(reply.replica)
        result = _result_object(op, reply)
        if result:
            task.result_objects.append(result)
        if not reply.ok:
            task.exception = _exception(op, reply)
            message = task.exception["message"]
            task.log(phase, message)
            log.info("task %s: %s", task.id, message)
            task.finish(FAILED, "Orchestration failed.")
            return False
        if reply.resent_after:
            task.log(
                phase,
                f"Sent again with the same id, since {reply.resent_after}: an agent answers a repeated "
                "id from memory, so it was carried out once",
            )
        via = f" (through hub replica {reply.replica})" if reply.replica else ""
        task.log(phase, f"Agent {reply.agent_id}{via} ran {op.type}: {_summary(op, reply)}")
        if reply.cache_missed is not None:  # the replica whose agent ran it waited for its own cache
            if reply.cache_missed:
                task.log(
                    phase,
                    f"Warning: the hub's cache did not show {len(reply.cache_missed)} change(s) in time "
                    f"({', '.join(reply.cache_missed[:5])}); reads may still return the former state",
                )
            else:
                task.log(phase, "The hub's cache shows the changes")
        elif reply.expect:
            # Its own budget: an operation that used most of its time still gets the cache a chance.
            budget = max(deadline - loop.time(), min(CACHE_WAIT_SECONDS, self.operation_wait))
            missed = await self.cache.wait_for(op.account, reply.expect, budget)
            if missed:
                names = ", ".join(f"{x.kind} {x.name}" for x in missed[:5])
                task.log(
                    phase,
                    f"Warning: the hub's cache did not show {len(missed)} change(s) in time "
                    f"({names}); reads may still return the former state",
                )
            else:
                task.log(phase, "The hub's cache shows the changes")
        return True


def _prepared(op: Operation) -> dict[str, Any]:
    """The description the agent gets: for a deploy with a moniker, Spinnaker's moniker
    annotations are added to manifests that lack them, so the cache indexes them by application."""
    d = dict(op.description)
    moniker = d.get("moniker")
    if op.type == "deployManifest" and d.get("manifests") is None and isinstance(d.get("manifest"), dict):
        d["manifests"] = [d.pop("manifest")]
    if (
        op.type == "deployManifest"
        and isinstance(moniker, dict)
        and isinstance(moniker.get("app"), str)
        and isinstance(d.get("manifests"), list)
    ):
        manifests = []
        for m in d["manifests"]:
            if isinstance(m, dict) and isinstance(m.get("metadata"), dict):
                meta = dict(m["metadata"])
                annotations = dict(meta.get("annotations") or {})
                annotations.setdefault(APPLICATION, moniker["app"])
                if isinstance(moniker.get("cluster"), str):
                    annotations.setdefault(CLUSTER, moniker["cluster"])
                meta["annotations"] = annotations
                m = {**m, "metadata": meta}
            manifests.append(m)
        d["manifests"] = manifests
    return d


def _names_by_namespace(refs: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in refs:
        meta: dict[str, Any] = r["metadata"] if isinstance(r.get("metadata"), dict) else r
        kind = str(r.get("kind") or "")
        out.setdefault(str(meta.get("namespace") or ""), []).append(f"{kind[:1].lower()}{kind[1:]} {meta.get('name')}")
    return out


def _result_object(op: Operation, reply: OperationReply) -> dict[str, Any]:
    """Clouddriver's result object for the operation (also for a failure: what was done before it)."""
    if op.type == "deleteManifest":
        deleted = reply.output.get("deletedManifests") or []
        return {"manifestNamesByNamespace": _names_by_namespace(deleted), **reply.output}
    if not reply.objects and not reply.output:
        return {}
    doc: dict[str, Any] = {"manifests": reply.objects, "manifestNamesByNamespace": _names_by_namespace(reply.objects)}
    if op.type == "deployManifest":
        doc["createdArtifacts"] = [_artifact(op.account, o) for o in reply.objects]
        doc["boundArtifacts"] = []
    return doc | reply.output


def _artifact(account: str, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    return {
        "type": f"kubernetes/{kind[:1].lower()}{kind[1:]}",
        "name": meta.get("name"),
        "location": meta.get("namespace") or "",
        "reference": meta.get("name"),
        "version": "",
        "metadata": {"account": account},
    }


def _summary(op: Operation, reply: OperationReply) -> str:
    if op.type == "deleteManifest":
        deleted = reply.output.get("deletedManifests") or []
        return f"{len(deleted)} object(s) deleted" + (
            f", {len(reply.output['alreadyGone'])} already gone" if reply.output.get("alreadyGone") else ""
        )
    names = [f"{o.get('kind')} {(o.get('metadata') or {}).get('name')}" for o in reply.objects]
    return ", ".join(names) or "done"


def _exception(op: Operation, reply: OperationReply) -> dict[str, Any]:
    """A failed operation as its task's `exception` tells it."""
    error = reply.error or {}
    exception = {
        "message": f"{op.type} on account {op.account} failed: {error.get('message') or 'no reason given'}",
        "code": error.get("code", 500),
        "reason": error.get("reason", ""),
        "operation": op.type,
        "account": op.account,
    }
    if "details" in error:
        exception["details"] = error["details"]
    return exception


def _ended_document(doc: dict[str, Any], operations: list[StoredOperation], why: str) -> dict[str, Any]:
    """A stored task document ended by another replica than its own, which is gone: with the
    results other replicas recorded for its operations, else as failed (`_failed_document`)."""
    done = [o for o in operations if o.state == "done" and o.document]
    if not done:
        return _failed_document(doc, why)
    now = int(time.time() * 1000)
    history = list(doc.get("history") or [])
    results = list(doc.get("resultObjects") or [])
    exception: dict[str, Any] | None = None
    last, reply = done[-1], OperationReply(False)
    for recorded in done:
        op = Operation(recorded.type, recorded.account, {})
        reply = OperationReply.from_document(orjson.loads(recorded.document or "null"), recorded.replica)
        phase = PHASES.get(op.type, ORCHESTRATION)
        if result := _result_object(op, reply):
            results.append(result)
        if reply.ok:
            status = (
                f"Agent {reply.agent_id} (through hub replica {recorded.replica}) ran {op.type}: {_summary(op, reply)}"
            )
            exception = None
        else:
            exception = _exception(op, reply)
            status = exception["message"]
        history.append(
            {"phase": phase, "status": f"{status} (recorded by that replica, since {why})", "timestamp": now}
        )
        last = recorded
    if not reply.ok:
        state = FAILED
    elif last.position == last.count - 1:
        state = COMPLETED
    else:
        state = FAILED
        left = last.count - last.position - 1
        exception = {
            "message": f"{why}; operation {last.position + 1} of {last.count} ({last.type}) was carried out (hub "
            f"replica {last.replica} recorded its result), the {left} after it were not run",
            "code": 503,
            "reason": "ServiceUnavailable",
        }
    ended = "Orchestration completed." if state == COMPLETED else "Orchestration failed."
    history.append({"phase": ORCHESTRATION, "status": ended, "timestamp": now})
    out = {
        **doc,
        "state": state,
        "status": {
            "phase": ORCHESTRATION,
            "status": ended,
            "completed": True,
            "failed": state == FAILED,
            "retryable": False,
        },
        "history": history,
        "resultObjects": results,
        "endTimeMs": now,
    }
    out.pop("exception", None)
    if exception is not None:
        out["exception"] = exception
    return out


def _failed_document(doc: dict[str, Any], why: str) -> dict[str, Any]:
    """A stored task document ended as failed by another replica, in the shape `Task.document` has."""
    now = int(time.time() * 1000)
    history = list(doc.get("history") or [])
    history.append({"phase": ORCHESTRATION, "status": "Orchestration failed.", "timestamp": now})
    return {
        **doc,
        "state": FAILED,
        "status": {
            "phase": ORCHESTRATION,
            "status": "Orchestration failed.",
            "completed": True,
            "failed": True,
            "retryable": False,
        },
        "history": history,
        "endTimeMs": now,
        "exception": {
            "message": f"{why}; its last operation may have been carried out (an operation is never "
            "applied twice: the agent remembers its id)",
            "code": 503,
            "reason": "ServiceUnavailable",
        },
    }
