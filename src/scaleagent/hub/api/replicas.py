"""Replicas in the HTTP API: the seeds' endpoints between Clouddriver replicas, and how a request
for an account streamed by another replica gets there.

    GET  /armory/clouddrivers            the replicas discovery knows (seeds' shape)
    GET  /armory/replicas/assignments    which replica and agent stream each account
    POST /armory/agent/operations        an operation forwarded by another replica, run here
    POST /armory/replicas/released       another replica let accounts go (agents standing by here may take them)

`AccountForwarding` is an ASGI middleware: a GET under `/api/v1/accounts/{account}` or
`/manifests/{account}` for an account that another replica's agent streams is answered by that
replica. Requests that already made their hop (`X-Scale-Agent-Forwarded-By`) are answered here.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..agents.routing import OperationReply
from ..auth.access import WRITE
from ..replicas.forwarding import HOP_HEADER, PeerUnreachable
from ..replicas.operations import TaskPosition
from ..replicas.peers import Peer
from ..store import StoreError
from .common import HubRoute, database_unreachable, error_response, json_body
from .deps import ApiDeps
from .schemas import (
    ACCOUNTS_BODY,
    FORBIDDEN,
    FORWARDED_OPERATION_BODY,
    NAMES_BODY,
    NOT_JSON,
    TOO_LARGE,
    Assignment,
    OperationResult,
    Released,
    ReplicaInfo,
    Stopped,
    Taken,
    error,
)
from .security import check_account, check_admin, replicas_only

log = logging.getLogger("scaleagent.hub.api.replicas")

_ONLY_REPLICAS = error(
    "Not sent by a hub replica: with logins on, only a request with the replicas' token (`replicas.token`)"
)
_BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error("The body is not of the shape described"),
    403: _ONLY_REPLICAS,
    413: TOO_LARGE,
    415: NOT_JSON,
}

_ACCOUNT_PATHS = (re.compile(r"^/api/v1/accounts/([^/]+)(?:/.*)?$"), re.compile(r"^/manifests/([^/]+)/.*$"))


def forwarded(request: Request) -> bool:
    """Whether another replica sent this request (it is answered here, never forwarded again)."""
    return HOP_HEADER in request.headers


async def holder_elsewhere(deps: ApiDeps, account: str, hop: bool) -> Peer | None:
    """The other replica whose agent streams `account`, when the request should go there.

    Raises a 503 (HTTPException, with Retry-After) when the database cannot say: this replica
    does not hold the account, so it cannot tell whether another one does (a 404 from here
    would say a live account does not exist)."""
    if not deps.replicated or hop or deps.operations.local(account):
        return None
    assert deps.assignments is not None
    try:
        return await deps.assignments.locate(account)
    except StoreError as e:
        log.warning("account %s: cannot tell which replica streams it (%s)", account, e)
        raise database_unreachable(
            f"account {account!r} is not streamed through this hub replica, and which replica streams it "
            f"cannot be told: the hub's database does not answer ({e}); try again shortly"
        ) from None


async def forward(
    deps: ApiDeps, peer: Peer, method: str, path_and_query: str, body: bytes | None, headers: Any, account: str
) -> Response:
    assert deps.forwarder is not None
    try:
        answer = await deps.forwarder.request(
            peer.id, peer.base_url, method, path_and_query, body=body, headers=headers
        )
    except PeerUnreachable as e:
        if deps.assignments is not None:
            deps.assignments.forget_location(account)
        return error_response(
            503,
            f"account {account!r} is streamed through hub replica {peer.id}, which is unreachable ({e.reason}); "
            "its agent reconnects to another replica, try again shortly",
        )
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type or None)


class AccountForwarding:
    """ASGI middleware: account-scoped GETs go to the replica that streams the account."""

    def __init__(self, app: ASGIApp, deps: ApiDeps) -> None:
        self.app, self.deps = app, deps

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not self.deps.replicated:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        account = next((m.group(1) for p in _ACCOUNT_PATHS if (m := p.match(path))), None)
        if account is None:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            peer = await holder_elsewhere(self.deps, account, HOP_HEADER.lower() in headers)
        except HTTPException as e:
            refused = error_response(e.status_code, e.detail)
            refused.headers.update(e.headers or {})
            await refused(scope, receive, send)
            return
        if peer is None:
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        raw_path = scope.get("raw_path") or path.encode()
        target = raw_path.decode("latin-1") + (f"?{query}" if query else "")
        response = await forward(self.deps, peer, "GET", target, None, headers, account)
        await response(scope, receive, send)


def replicas_router(deps: ApiDeps) -> APIRouter:
    api = APIRouter(tags=["replicas"], route_class=HubRoute)

    @api.get(
        "/armory/clouddrivers",
        summary="The hub replicas discovery knows",
        description="Each `{baseUrl, id, lastUpdated, ready}`, as the seeds show Clouddriver replicas; "
        "`ready` follows the pod's readiness. One replica lists only itself. Admins only.",
        response_model=None,
        responses={200: {"model": list[ReplicaInfo]}, 403: FORBIDDEN},
    )
    async def clouddrivers(request: Request) -> list[dict[str, Any]]:
        # Admins only, as the other /armory/* routes: each replica's address inside the network
        # is of use to whoever runs the hubs, and to no caller who only reads or deploys.
        check_admin(deps, request, "listing the hub replicas")
        dead: set[str] = set()
        if deps.assignments is not None:
            try:
                dead = set(await deps.assignments.dead_replicas())
            except StoreError:
                pass  # discovery's view alone
        # A replica whose heartbeat stopped is not ready, whatever its pod's readiness still says.
        return [{**p.document(), "ready": p.ready and p.id not in dead} for p in deps.peers.all()]

    @api.get(
        "/armory/replicas/assignments",
        summary="Which replica and agent stream each account",
        response_class=JSONResponse,
        responses={
            200: {"model": list[Assignment]},
            403: FORBIDDEN,
            404: error("This hub runs as one replica (`replicas.cluster: none`): nothing is assigned"),
            503: error("The database failed"),
        },
    )
    async def assignments(request: Request) -> Response:
        check_admin(deps, request, "reading the assignments of accounts to replicas")
        if deps.assignments is None:
            return error_response(404, "this hub runs as one replica (replicas.cluster: none): nothing is assigned")
        try:
            rows = await deps.assignments.shared.assignments()
        except StoreError as e:
            return error_response(503, str(e))
        return Response(orjson.dumps([r.document() for r in rows]), media_type="application/json")

    @api.post(
        "/armory/agent/operations",
        summary="Run an operation forwarded by another replica on this replica's agent",
        description='Body `{"operation": {id, account, type, request, timeoutMs}}`; the answer is the '
        "agent's result, once this replica's cache shows the change. Never forwarded further.",
        response_class=JSONResponse,
        responses={
            200: {"model": OperationResult},
            **_BODY_ERRORS,
            403: error(f"{_ONLY_REPLICAS['description']}; or the caller it acts for may not WRITE the account"),
        },
        openapi_extra=FORWARDED_OPERATION_BODY,
    )
    async def operations(request: Request) -> Response:
        replicas_only(deps, request)
        body = await json_body(request, 'the body is empty: send {"operation": {...}}')
        op = body.get("operation") if isinstance(body, dict) else None
        problems = _operation_problems(op)
        if problems:
            return error_response(400, "; ".join(problems))
        assert isinstance(op, dict)
        await check_account(deps, request, WRITE, op["account"])  # for the caller the replica acts for
        timeout = min(op["timeoutMs"], 3_600_000) / 1000

        async def run() -> OperationReply:
            reply = await deps.operations.run_here(
                op["account"], op["type"], op.get("request") or {}, timeout, op["id"]
            )
            if reply.ok and reply.expect:
                missed = await deps.cache.wait_for(op["account"], reply.expect, min(timeout, 10.0))
                reply.cache_missed = [f"{x.kind} {x.name}" for x in missed]
            elif reply.ok:
                reply.cache_missed = []
            return reply

        task = op.get("task")
        if task is None:
            reply = await run()
        else:
            position = TaskPosition(task["id"], task["position"], task["count"])
            reply = await deps.tasks.run_forwarded(position, op["id"], op["type"], op["account"], timeout, run)
        return Response(orjson.dumps(reply.document()), media_type="application/json")

    @api.post(
        "/armory/replicas/released",
        summary="Another replica let these accounts go",
        response_class=JSONResponse,
        responses={200: {"model": Released}, **_BODY_ERRORS},
        openapi_extra=ACCOUNTS_BODY,
    )
    async def released(request: Request) -> JSONResponse:
        replicas_only(deps, request)
        body = await json_body(request, 'the body is empty: send {"accounts": [...]}')
        accounts = body.get("accounts") if isinstance(body, dict) else None
        if not isinstance(accounts, list) or not all(isinstance(a, str) for a in accounts):
            return error_response(400, 'the body must be {"accounts": ["name", ...]}')
        if deps.assignments is not None:
            deps.assignments.released_elsewhere(accounts)
        return JSONResponse({"accounts": accounts})

    async def names_of(request: Request) -> list[str] | Response:
        replicas_only(deps, request)
        if not forwarded(request):
            return error_response(403, "only hub replicas send this (with the X-Scale-Agent-Forwarded-By header)")
        body = await json_body(request, 'the body is empty: send {"names": [...]}')
        names = body.get("names") if isinstance(body, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) and 0 < len(n) <= 253 for n in names):
            return error_response(400, 'the body must be {"names": ["account", ...]}')
        return names

    @api.post(
        "/armory/replicas/migrate",
        summary="Send accounts another replica has no agent for to this one's",
        response_class=JSONResponse,
        responses={
            200: {"model": Taken},
            **_BODY_ERRORS,
            403: error(f"{_ONLY_REPLICAS['description']} and the `X-Scale-Agent-Forwarded-By` header"),
            503: error("The database failed"),
        },
        openapi_extra=NAMES_BODY,
    )
    async def migrate(request: Request) -> Response:
        names = await names_of(request)
        if isinstance(names, Response):
            return names
        try:
            taken = await deps.accounts.migrate_here(names)
        except StoreError as e:
            return error_response(503, str(e))
        return JSONResponse({"taken": taken})

    @api.post(
        "/armory/replicas/stop",
        summary="This replica's agents stop following these accounts",
        response_class=JSONResponse,
        responses={
            200: {"model": Stopped},
            **_BODY_ERRORS,
            403: error(f"{_ONLY_REPLICAS['description']} and the `X-Scale-Agent-Forwarded-By` header"),
        },
        openapi_extra=NAMES_BODY,
    )
    async def stop(request: Request) -> Response:
        names = await names_of(request)
        if isinstance(names, Response):
            return names
        return JSONResponse({"warnings": await deps.accounts.stop_here(names)})

    return api


def _operation_problems(op: Any) -> list[str]:
    if not isinstance(op, dict):
        return ['the body must be {"operation": {"id", "account", "type", "request", "timeoutMs"}}']
    problems = []
    for key in ("id", "account", "type"):
        if not isinstance(op.get(key), str) or not op.get(key) or len(op[key]) > 253:
            problems.append(f"operation.{key}: a string of 1-253 characters is required")
    if not isinstance(op.get("request", {}), dict):
        problems.append("operation.request must be a JSON object")
    timeout = op.get("timeoutMs")
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 3_600_000:
        problems.append("operation.timeoutMs: a whole number from 1 to 3600000 is required")
    task = op.get("task")
    if task is not None:
        count = task.get("count") if isinstance(task, dict) else None
        position = task.get("position") if isinstance(task, dict) else None
        if (
            not isinstance(task, dict)
            or not isinstance(task.get("id"), str)
            or not 1 <= len(task["id"]) <= 64
            or not _whole(count, 1, 10_000)
            or not _whole(position, 0, 9_999)
            or position >= count  # type: ignore[operator]
        ):
            problems.append("operation.task must be {id: 1-64 characters, position: 0 to count-1, count: 1 to 10000}")
    return problems


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
