"""The operations REST API, in Clouddriver's shapes:

    POST /kubernetes/ops                 a list of operations, run as one task       200 {id, resourceUri}
    POST /kubernetes/ops/{type}          one operation's description                 200 {id, resourceUri}
    GET  /task?limit=N                   the newest tasks the caller may read         200
    GET  /task/{id}?waitSeconds=N        the task (waiting up to N s for its end)     200
    POST /cache/kubernetes/manifest      Clouddriver's on-demand cache refresh        200 fresh / 202 pending
    GET  /api/v1/accounts/{a}/namespaces/{ns}/pods/{pod}/log   a pod's log, through its agent

A body that is not a list of known operations is a 400 naming every problem; anything that goes
wrong once the task runs (an unknown account, an invalid manifest, a refusal by the API server,
a timeout) ends the task as failed with the reason, as Clouddriver reports it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ..accounts.errors import InvalidRequest
from ..agents.routing import OperationReply
from ..auth.access import READ, WRITE
from ..cache.cache import version_at_least
from ..replicas.forwarding import PeerUnreachable
from ..store import StoreError
from ..tasks import PHASES, RUNNING, BadOperations, parse_operations
from .common import BodyRefused, HubRoute, error_response, json_body, read_json
from .deps import ApiDeps
from .replicas import forward, forwarded, holder_elsewhere
from .schemas import (
    AGENT_ERRORS,
    CACHE_REFRESH_BODY,
    FORBIDDEN,
    KIND_NAME,
    NOT_JSON,
    ONE_OPERATION_BODY,
    OPERATIONS_BODY,
    TOO_LARGE,
    CacheRefresh,
    TaskDocument,
    TaskRef,
    error,
)
from .security import audit, check_account, principal_of

__all__ = ["operations_router"]

MAX_TASK_WAIT_SECONDS = 60.0
# GET /task: the newest tasks looked at (the dashboard shows the default); a bound, so that one
# request cannot make the hub read every stored task (operations.maxTasks, 10,000 by default).
DEFAULT_TASK_LIST, MAX_TASK_LIST = 50, 1000
# More lines than any log the agent returns (it keeps the last 256 KiB); beyond int64 the request
# could not even be encoded for the agent.
MAX_TAIL_LINES = 10_000_000
# Longer than any resourceVersion an API server hands out (an etcd revision, an int64: 19 digits);
# compared as a number, a longer one of digits would hit int()'s 4,300-digit limit.
MAX_RESOURCE_VERSION_CHARS = 64
# How long a forced cache refresh waits for the cache to reach the live version before it
# answers 202 (still pending), as Clouddriver's on-demand caching does for slow providers.
REFRESH_WAIT_SECONDS = 10.0


def _failed(reply: OperationReply) -> Response:
    error = reply.error or {}
    code = int(error.get("code") or 502)
    return error_response(code if 400 <= code <= 599 else 502, str(error.get("message") or "the operation failed"))


_SUBMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": TaskRef, "description": "The task, created; read it at `resourceUri`"},
    400: error("The body is not a list of operations this hub runs, or a number is out of its range; no task"),
    403: error("The caller may not WRITE an account the operations name; no task"),
    413: TOO_LARGE,
    415: NOT_JSON,
}


def operations_router(deps: ApiDeps) -> APIRouter:
    api = APIRouter(tags=["operations"], route_class=HubRoute)
    # Operations of the refresh and pod logs run here: the request was forwarded to this replica
    # already when another one streams the account.
    runner, router, cache = deps.tasks, deps.router, deps.cache

    async def submit(request: Request, single: str | None = None) -> Response:
        """A task for the body's operations (`single`: the body is one description of that type)."""
        try:
            body = await read_json(request)
            operations = parse_operations([{single: body}] if single is not None else body)
        except BodyRefused as e:
            return error_response(e.status, str(e))
        except (InvalidRequest, BadOperations) as e:
            return error_response(400, str(e))
        audit(request, operations=[{"type": op.type, "account": op.account} for op in operations])
        for account in sorted({op.account for op in operations}):
            await check_account(deps, request, WRITE, account)
        task = await runner.submit(operations, user=principal_of(request).name)
        audit(request, task=task.id)
        return JSONResponse({"id": task.id, "resourceUri": f"/task/{task.id}"})

    @api.post(
        "/kubernetes/ops",
        summary="Run operations (deployManifest, deleteManifest, ...) as one task",
        description='A JSON list such as `[{"deployManifest": {"account": "prod", "manifests": '
        "[...]}}]`; operations run in order and the task stops at the first failure. "
        f"Types: {', '.join(PHASES)}. See docs/operations.md.",
        response_class=JSONResponse,
        responses=_SUBMIT_RESPONSES,
        openapi_extra=OPERATIONS_BODY,
    )
    async def post_ops(request: Request) -> Response:
        return await submit(request)

    @api.post(
        "/kubernetes/ops/{type}",
        summary="Run one operation as a task",
        description="The body is one operation's description; the path names its type. Any other type is a 400.",
        response_class=JSONResponse,
        responses=_SUBMIT_RESPONSES,
        openapi_extra=ONE_OPERATION_BODY,
    )
    async def post_op(
        type_: Annotated[
            str,
            Path(alias="type", description="The operation's type", json_schema_extra={"enum": list(PHASES)}),
        ],
        request: Request,
    ) -> Response:
        return await submit(request, type_)

    @api.get(
        "/task",
        summary="Recent tasks, newest first",
        description="Every replica's tasks (they are kept in the database), newest first, each as "
        "`GET /task/{id}` shows it; only the tasks the caller may read (its own, and those whose "
        f"accounts it may all READ). `limit`: how many to look at, 1 to {MAX_TASK_LIST}.",
        response_class=JSONResponse,
        responses={
            200: {"model": list[TaskDocument]},
            400: error(f"`limit` is not a whole number from 1 to {MAX_TASK_LIST}"),
            503: error("The tasks could not be read from the database"),
        },
    )
    async def list_tasks(
        request: Request,
        limit: Annotated[
            int, Query(ge=1, le=MAX_TASK_LIST, description="How many of the newest tasks to look at")
        ] = DEFAULT_TASK_LIST,
    ) -> Response:
        try:
            docs = await runner.recent(limit)
        except StoreError as e:
            return error_response(503, f"cannot read the tasks from the database: {e}")
        shown = []
        for doc in docs:
            listed = doc.get("accounts")
            accounts = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
            try:
                await may_read_task(request, accounts, str(doc.get("user") or ""))
            except HTTPException:
                continue  # not the caller's to see: left out, as lists leave out unreadable accounts
            shown.append(doc)
        return Response(orjson.dumps(shown), media_type="application/json")

    @api.get(
        "/task/{task_id}",
        summary="A task: state, phases, outputs",
        description="`state` is running, completed or failed; `status`, `history` and `resultObjects` "
        "have Clouddriver's shape. `waitSeconds` holds the answer until the task ends "
        f"(at most {MAX_TASK_WAIT_SECONDS:g} s), so clients need not poll.",
        response_class=JSONResponse,
        responses={
            200: {"model": TaskDocument},
            400: error("`waitSeconds` is not a number of at least 0"),
            403: error("The caller neither sent the task nor may READ every account it changes"),
            404: error("No such task (finished tasks beyond `operations.maxTasks` are forgotten)"),
            503: error("The task could not be read from the database"),
        },
    )
    async def get_task(
        request: Request,
        task_id: str,
        waitSeconds: Annotated[
            float,
            Query(
                ge=0,
                allow_inf_nan=False,
                description=f"Seconds to wait for the task to end; more than {MAX_TASK_WAIT_SECONDS:g} waits "
                f"{MAX_TASK_WAIT_SECONDS:g}",
            ),
        ] = 0,
    ) -> Response:
        task = runner.get(task_id)
        if task is None:
            return await stored_task(request, task_id)
        await may_read_task(request, task.accounts, task.user)
        if waitSeconds > 0 and not task.done.is_set():
            try:
                await asyncio.wait_for(task.done.wait(), min(waitSeconds, MAX_TASK_WAIT_SECONDS))
            except TimeoutError:
                pass
        return Response(orjson.dumps(task.document()), media_type="application/json")

    async def may_read_task(request: Request, accounts: list[str], user: str) -> None:
        """Its submitter, and whoever may read every account it changes, may read a task."""
        caller = principal_of(request)
        if caller.admin or (user and caller.name == user and caller.method != "anonymous"):
            return
        for account in accounts:
            await check_account(deps, request, READ, account)

    async def stored_task(request: Request, task_id: str) -> Response:
        """A task this replica does not run: from the replica running it (which can wait for its
        end), or from the database when that replica is gone or the task has ended."""
        try:
            stored = await runner.stored(task_id)
        except StoreError as e:
            return error_response(503, f"task {task_id}: cannot read it from the database: {e}")
        if stored is None:
            return error_response(
                404, f"task {task_id} not found (finished tasks beyond operations.maxTasks are forgotten)"
            )
        replica, doc = stored
        listed = doc.get("accounts")
        accounts = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
        await may_read_task(request, accounts, str(doc.get("user") or ""))
        if doc.get("state") == RUNNING and replica != deps.replica and deps.replicated and not forwarded(request):
            assert deps.assignments is not None and deps.forwarder is not None
            base_url = await deps.assignments.base_url(replica)
            if base_url is not None:
                path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                try:
                    answer = await deps.forwarder.request(
                        replica, base_url, "GET", path, headers=request.headers, timeout=MAX_TASK_WAIT_SECONDS + 10
                    )
                    if answer.status == 200:
                        return Response(answer.body, media_type="application/json")
                except PeerUnreachable:
                    pass  # its replica is gone: the stored copy says where it was; the cleanup will end it
        return Response(orjson.dumps(doc), media_type="application/json")

    @api.post(
        "/cache/kubernetes/manifest",
        summary="Force a cache refresh of one object (Clouddriver on-demand)",
        description='Body `{"account", "location" (namespace), "name": "kind name"}`, optionally '
        "`resourceVersion`. 200 at once when the cache holds the object at that version or later; "
        "otherwise (or without a version) the live object is read through the agent and the "
        "answer waits until the cache shows it: 200, or 202 if it did not within "
        f"{REFRESH_WAIT_SECONDS:g} s.",
        response_class=JSONResponse,
        responses={
            200: {"model": CacheRefresh, "description": "The cache holds the live object (or there is none)"},
            202: {"model": CacheRefresh, "description": "The cache did not show the live object in time (`pending`)"},
            400: error("The body is invalid (named in `error`)"),
            403: FORBIDDEN,
            413: TOO_LARGE,
            415: NOT_JSON,
            **AGENT_ERRORS,
        },
        openapi_extra=CACHE_REFRESH_BODY,
    )
    async def refresh(request: Request) -> Response:
        body = await json_body(request, 'the body is empty: send {"account", "location", "name"}')
        if not isinstance(body, dict):
            return error_response(400, 'the body must be a JSON object: {"account", "location", "name"}')
        account, location, name = (
            body.get("account") or body.get("credentials"),
            body.get("location") or "",
            body.get("name"),
        )
        wanted_rv = body.get("resourceVersion") or ""
        if not isinstance(account, str) or not account:
            return error_response(400, "account is required (a string)")
        if not isinstance(location, str) or not isinstance(wanted_rv, str):
            return error_response(400, "location and resourceVersion must be strings")
        if len(wanted_rv) > MAX_RESOURCE_VERSION_CHARS:
            return error_response(
                400,
                f"resourceVersion: at most {MAX_RESOURCE_VERSION_CHARS} characters (an API "
                f"server's resourceVersion is an etcd revision), got {len(wanted_rv)}",
            )
        words = re.fullmatch(KIND_NAME, name) if isinstance(name, str) else None
        if words is None:
            return error_response(400, 'name must be "kind name", e.g. "deployment my-app"')
        kind, object_name = words.groups()
        await check_account(deps, request, READ, account)
        peer = await holder_elsewhere(deps, account, forwarded(request))
        if peer is not None:
            return await forward(
                deps, peer, "POST", request.url.path, orjson.dumps(body), {"content-type": "application/json"}, account
            )
        cached = cache.get(account, kind, location, object_name)
        cached_rv = _resource_version(cached)
        ident = {"account": account, "location": location, "name": name}
        # With the version an operation produced, the cache answers alone; without one, only the
        # live object says what "fresh" is.
        if cached is not None and wanted_rv and version_at_least(cached_rv, wanted_rv):
            return JSONResponse({**ident, "status": "cached", "resourceVersion": cached_rv})
        reply = await router.run(
            account, "getManifest", {"manifestName": name, "location": location}, REFRESH_WAIT_SECONDS
        )
        if not reply.ok:
            return _failed(reply)
        missed = await cache.wait_for(account, reply.expect, REFRESH_WAIT_SECONDS) if reply.expect else []
        if missed:
            return JSONResponse({**ident, "status": "pending"}, status_code=202)
        live = reply.objects[0] if reply.objects else None
        if live is None:
            return JSONResponse({**ident, "status": "absent"})
        if not reply.expect:
            return JSONResponse({**ident, "status": "not cached: its agent does not follow this kind or namespace"})
        return JSONResponse(
            {**ident, "status": "cached", "resourceVersion": (live.get("metadata") or {}).get("resourceVersion")}
        )

    @api.get(
        "/api/v1/accounts/{account}/namespaces/{namespace}/pods/{pod}/log",
        response_class=PlainTextResponse,
        summary="A pod's log, read through the account's agent",
        responses={
            200: {"description": "The log, as plain text"},
            400: error("`tailLines` is not a whole number in its range"),
            403: FORBIDDEN,
            **AGENT_ERRORS,
        },
    )
    async def pod_log(
        http: Request,
        account: str,
        namespace: str,
        pod: str,
        container: str = "",
        tailLines: Annotated[
            int | None,
            Query(ge=0, le=MAX_TAIL_LINES, description="Only the last lines of the log"),
        ] = None,
    ) -> Response:
        await check_account(deps, http, READ, account)
        request: dict[str, Any] = {"namespace": namespace, "name": pod, "container": container}
        if tailLines is not None:
            request["tailLines"] = tailLines
        reply = await router.run(account, "podLogs", request, runner.operation_wait)
        if not reply.ok:
            return _failed(reply)
        return PlainTextResponse(str(reply.output.get("log") or ""))

    return api


def _resource_version(raw: bytes | None) -> str:
    if raw is None:
        return ""
    try:
        return str(((orjson.loads(raw).get("metadata") or {}).get("resourceVersion")) or "")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
