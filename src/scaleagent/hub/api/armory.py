"""The rest of Armory's plugin REST surface (its swagger, `swagger.0.13.20.json`), so that scripts
written for Armory's Clouddriver plugin work against the hub unchanged:

    GET  /armory/agents/{agentId}                       one agent (ArmoryAgentResponse)
    POST /armory/agent/{agentId}/disconnect             end the agent's sessions (it reconnects)
    GET  /armory/agent/operations?items=&page=          the hops of recent operations (OperationHistoryRecord)
    GET  /armory/agent/operations/{opId}                one operation's hops
    GET  /agents/kubernetes/accounts/{accountName}/namespaces   an agent-registered account's namespaces
    GET  /armory/clouddrivers/{clouddriverId}           one hub replica (ClouddriverInstance)

`GET /armory/agents` itself is in objects.py (the dashboard and the CLI read it too). This router
is included after bindings.py's, so `/armory/agents/bindings` keeps its meaning: an agent whose id
is `bindings` cannot be read one by one (it is in the list).

Everything here but the namespaces is for admins, like the other /armory/* routes (GET
/armory/clouddrivers, in replicas.py, too: replicas' addresses are for whoever runs the hubs).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from ..agents.registry import Session
from ..agents.routing import HISTORY_LIMIT
from ..auth.access import READ
from ..replicas.forwarding import PeerUnreachable
from ..replicas.peers import Peer
from ..store import StoreError
from .common import HubRoute, error_response, json_body
from .deps import ApiDeps
from .replicas import forward, forwarded, holder_elsewhere
from .schemas import FORBIDDEN, NOT_JSON, TOO_LARGE, ReplicaInfo, body_schema, error
from .security import audit, check_account, check_admin

__all__ = ["ArmoryAgent", "OperationHistoryRecord", "agent_document", "armory_fields", "armory_router"]

log = logging.getLogger("scaleagent.hub.api.armory")

MAX_ITEMS = 1000
"""The most operations one page of GET /armory/agent/operations holds (the history keeps
HISTORY_LIMIT per replica)."""


class ArmoryAgent(BaseModel):
    """Armory's `ArmoryAgentResponse`, with the hub's own session fields alongside (the dashboard
    and `scale-agent agents` read those)."""

    agentId: str = Field(description="The agent's id (its host name unless configured)")
    type: str = Field(description="Always `kubernetes`")
    caching: bool = Field(description="Whether the agent streams at least one account (not only standing by)")
    clouddriverId: str = Field(description="The hub replica holding the session (Armory's name for `replica`)")
    lastConnection: str = Field(description="When the session started, RFC 3339 UTC (Armory's name for `connectedAt`)")
    accounts: list[str] = Field(description="Accounts this agent serves")
    identity: str = Field("", description="The agent identity the session proved ('' when not checked)")
    sessionId: str
    zoneId: str = Field(description="The agent's zone; empty when it has none")
    agentVersion: str
    replica: str = Field(description="The hub replica holding the session")
    peer: str = Field(description="The agent's address as seen by the hub")
    connectedAt: str = Field(description="RFC 3339, UTC")
    rejectedAccounts: dict[str, str] = Field(description="Accounts refused, with the reason")
    events: int = Field(description="Object events received on this session")
    operationsStream: bool = Field(description="Whether the agent's Operations stream is attached")


def agent_document(session: Session) -> dict[str, Any]:
    """One session as GET /armory/agents shows it: Armory's six fields, then the hub's own."""
    info = session.info()
    return {
        "agentId": info["agentId"],
        "type": "kubernetes",
        "caching": bool(session.accounts),
        "clouddriverId": info["replica"],
        "lastConnection": info["connectedAt"],
        **info,
    }


def armory_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (a session's document, maybe from a replica of an older version) with Armory's fields."""
    doc.setdefault("type", "kubernetes")
    doc.setdefault("caching", bool(doc.get("accounts")))
    doc.setdefault("clouddriverId", doc.get("replica", ""))
    doc.setdefault("lastConnection", doc.get("connectedAt", ""))
    return doc


class OperationCloudDriver(BaseModel):
    clouddriverId: str = Field(description="The hub replica")
    time: str = Field(description="RFC 3339 UTC, with milliseconds")


class OperationAgent(BaseModel):
    agentId: str
    time: str = Field(description="RFC 3339 UTC, with milliseconds")


class OperationHistoryResult(BaseModel):
    status: int | None = Field(None, description="200 when the agent succeeded, else the error's HTTP code")
    durationMs: int | None = Field(None, description="From sending the operation to its result")


class OperationResultAgent(BaseModel):
    agentId: str
    clouddriverId: str = Field(description="The hub replica that received the result")
    time: str
    result: OperationHistoryResult


class OperationHistoryRecord(BaseModel):
    """Armory's `OperationHistoryRecord`: when each hop of one operation happened. A hop that has
    not happened (yet) is absent."""

    operationId: str = Field(description="The operation's id: `<task id>-<index>` for an operation of a task")
    account: str
    operationType: str = Field(description="deployManifest, deleteManifest, scaleManifest...")
    startTime: str = Field(description="When this replica received it")
    endTime: str | None = Field(None, description="When this replica answered its caller")
    finalOutcome: str | None = Field(None, description="succeeded, failed, timeout or disconnected")
    totalDurationMs: int | None = None
    opReceivedByClouddriver: OperationCloudDriver
    opSentToAgent: OperationAgent | None = Field(None, description="Absent when no agent could be sent it")
    resultReceivedFromAgent: OperationResultAgent | None = None
    resultReceivedByClouddriver: OperationCloudDriver | None = None
    opProcessedByClouddriver: OperationCloudDriver | None = Field(None, description="When the caller was answered")


class Disconnected(BaseModel):
    agentId: str
    sessions: list[dict[str, str]] = Field(description="The sessions ended: `{sessionId, replica}`")


_DISCONNECT_BODY = body_schema(
    {
        "type": "object",
        "properties": {
            "clusterDriven": {"type": "boolean"},
            "origin": {"type": "string"},
            "timestamp": {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1},
        },
        "additionalProperties": False,
        "example": {"origin": "ops-script"},
    },
    "Armory's DisconnectRequest; every field is optional and only recorded in the audit line. The body may be "
    "left out.",
    required=False,
)
_DISCONNECT_FIELDS = {"clusterDriven": bool, "origin": str, "timestamp": int}


def _disconnect_request(body: Any) -> dict[str, Any]:
    """Armory's DisconnectRequest, checked: every problem is named (HTTPException 400)."""
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object (DisconnectRequest: clusterDriven, origin, timestamp)")
    problems = []
    for key, value in body.items():
        wanted = _DISCONNECT_FIELDS.get(key)
        if wanted is int and isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON's 3.0 is 3 (JSON Schema's "integer" too)
        if wanted is None:
            problems.append(f"{key!r}: unknown field (DisconnectRequest has clusterDriven, origin, timestamp)")
        elif not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            what = {bool: "true or false", str: "a string", int: "a whole number"}[wanted]
            problems.append(f"{key}: expected {what}")
        elif isinstance(value, int) and not -(2**63) <= value < 2**63:
            problems.append(f"{key}: expected a whole number within int64")
    if problems:
        raise HTTPException(400, "; ".join(problems))
    return body


def armory_router(deps: ApiDeps) -> APIRouter:
    """The routes above, to `include_router` into the hub's app after the bindings router."""
    api = APIRouter(route_class=HubRoute)
    registry = deps.registry
    history = deps.router.history

    def peers() -> list[Peer]:
        return deps.peers.others(ready_only=False) if deps.replicated and deps.forwarder is not None else []

    async def ask_peers(request: Request, method: str, path: str, body: bytes | None = None) -> list[Any]:
        """Every other replica's JSON answer of 200 to `path` (answered there from what it holds,
        never forwarded further); unreachable replicas are left out and logged."""
        if forwarded(request):
            return []
        assert deps.forwarder is not None or not peers()

        async def one(peer: Peer) -> Any:
            assert deps.forwarder is not None
            try:
                answer = await deps.forwarder.request(
                    peer.id,
                    peer.base_url,
                    method,
                    path,
                    body=body,
                    headers={"content-type": "application/json"} if body is not None else None,
                    timeout=10.0,
                )
                return answer.json() if answer.status == 200 else None
            except (PeerUnreachable, ValueError) as e:
                log.warning("replica %s left out of %s %s: %s", peer.id, method, path, e)
                return None

        return [a for a in await asyncio.gather(*(one(p) for p in peers())) if a is not None]

    @api.get(
        "/armory/agents/{agentId}",
        tags=["agents"],
        summary="One agent (its newest session, on any replica)",
        response_class=JSONResponse,
        responses={200: {"model": ArmoryAgent}, 403: FORBIDDEN, 404: error("No agent of that id is connected")},
    )
    async def one_agent(request: Request, agentId: str) -> Response:
        check_admin(deps, request, "reading agents")
        found = [agent_document(s) for s in registry.sessions.values() if s.agent_id == agentId]
        for answer in await ask_peers(request, "GET", f"/armory/agents/{quote(agentId, safe='')}"):
            if isinstance(answer, dict):
                found.append(answer)
        if not found:
            return error_response(404, f"no agent {agentId!r} is connected to this hub (GET /armory/agents lists them)")
        return JSONResponse(max(found, key=lambda a: str(a.get("connectedAt", ""))))

    @api.post(
        "/armory/agent/{agentId}/disconnect",
        tags=["agents"],
        summary="End an agent's sessions (Caching and Operations streams); the agent reconnects",
        description="Every session of the agent, on every replica, ends at once with UNAVAILABLE: "
        "operations it was running fail as disconnected, and its accounts are DISCONNECTED until "
        "it reconnects (within the grace period nothing else changes). The agent reconnects by itself.",
        response_class=JSONResponse,
        openapi_extra=_DISCONNECT_BODY,
        responses={
            200: {"model": Disconnected},
            400: error("The body is not a DisconnectRequest (the problem is named)"),
            403: FORBIDDEN,
            404: error("No agent of that id is connected"),
            413: TOO_LARGE,
            415: NOT_JSON,
        },
    )
    async def disconnect(request: Request, agentId: Annotated[str, Path(max_length=253)]) -> Response:
        check_admin(deps, request, "disconnecting agents")
        given: dict[str, Any] = {}
        if request.headers.get("content-length", "0") != "0" or "chunked" in request.headers.get(
            "transfer-encoding", ""
        ):
            given = _disconnect_request(await json_body(request, "the body is empty: send {} or no body"))
        audit(request, agent=agentId, **{k: v for k, v in given.items() if k in ("origin", "clusterDriven")})
        ended = []
        for session in [s for s in registry.sessions.values() if s.agent_id == agentId]:
            if session.end is not None:
                session.end(
                    f"an admin asked the hub to disconnect agent {agentId!r} (POST /armory/agent/.../disconnect)"
                )
                ended.append({"sessionId": session.id, "replica": session.replica})
        path = f"/armory/agent/{quote(agentId, safe='')}/disconnect"
        for answer in await ask_peers(request, "POST", path, body=b"{}"):
            if isinstance(answer, dict) and isinstance(answer.get("sessions"), list):
                ended.extend(s for s in answer["sessions"] if isinstance(s, dict))
        if not ended:
            return error_response(404, f"no agent {agentId!r} is connected to this hub (GET /armory/agents lists them)")
        log.info("agent %s: %d session(s) ended on request", agentId, len(ended))
        return JSONResponse({"agentId": agentId, "sessions": ended})

    @api.get(
        "/armory/agent/operations",
        tags=["operations"],
        summary="The hops of the operations this replica routed to its agents, newest first",
        description=f"Each record says when this replica received the operation, sent it to an agent, "
        f"received the agent's result and answered (Armory's OperationHistoryRecord). Kept in memory, "
        f"the newest {HISTORY_LIMIT} per replica: an operation forwarded to the replica holding its "
        "agent is shown by that replica. The task (GET /task/{id}) is the lasting record.",
        response_class=JSONResponse,
        responses={
            200: {"model": list[OperationHistoryRecord]},
            400: error(f"`items` is not 1 to {MAX_ITEMS}, or `page` not 1 to {HISTORY_LIMIT}"),
            403: FORBIDDEN,
        },
    )
    async def operations(
        request: Request,
        items: Annotated[int, Query(ge=1, le=MAX_ITEMS, description="Records per page")] = 50,
        page: Annotated[int, Query(ge=1, le=HISTORY_LIMIT, description="Which page, from 1 (the newest)")] = 1,
    ) -> Response:
        check_admin(deps, request, "reading the operation history")
        return JSONResponse([hops.document() for hops in history.page(items, page)])

    @api.get(
        "/armory/agent/operations/{opId}",
        tags=["operations"],
        summary="One operation's hops (asked of every replica)",
        response_class=JSONResponse,
        responses={
            200: {"model": OperationHistoryRecord},
            403: FORBIDDEN,
            404: error("No replica remembers an operation of that id"),
        },
    )
    async def operation(request: Request, opId: str) -> Response:
        check_admin(deps, request, "reading the operation history")
        hops = history.get(opId)
        if hops is not None:
            return JSONResponse(hops.document())
        for answer in await ask_peers(request, "GET", f"/armory/agent/operations/{quote(opId, safe='')}"):
            if isinstance(answer, dict):
                return JSONResponse(answer)
        return error_response(
            404,
            f"no operation {opId!r} in the history (each replica keeps its newest {HISTORY_LIMIT}; GET /task/"
            "{id} has every task's result)",
        )

    @api.get(
        "/armory/clouddrivers/{clouddriverId}",
        tags=["replicas"],
        summary="One hub replica discovery knows",
        description="As one item of GET /armory/clouddrivers: `{baseUrl, id, lastUpdated, ready}`. Admins only.",
        response_class=JSONResponse,
        responses={200: {"model": ReplicaInfo}, 403: FORBIDDEN, 404: error("No replica of that id is known")},
    )
    async def clouddriver(request: Request, clouddriverId: str) -> Response:
        check_admin(deps, request, "reading a hub replica")
        peer = next((p for p in deps.peers.all() if p.id == clouddriverId), None)
        if peer is None:
            return error_response(
                404, f"no hub replica {clouddriverId!r} is known (GET /armory/clouddrivers lists them)"
            )
        dead: set[str] = set()
        if deps.assignments is not None:
            try:
                dead = set(await deps.assignments.dead_replicas())
            except StoreError:
                pass  # discovery's view alone, as GET /armory/clouddrivers
        return JSONResponse({**peer.document(), "ready": peer.ready and peer.id not in dead})

    @api.get(
        "/agents/kubernetes/accounts/{accountName}/namespaces",
        tags=["accounts"],
        summary="The namespaces of an account agents serve",
        description="The Namespace objects in the cache; for an account whose agent may not list "
        "Namespaces, the namespaces its settings name. Needs READ on the account.",
        response_class=JSONResponse,
        responses={
            200: {"model": list[str]},
            403: FORBIDDEN,
            404: error("No agent serves an account of that name"),
            503: error("The account is streamed through another hub replica, which is unreachable"),
        },
    )
    async def namespaces(request: Request, accountName: str) -> Response:
        await check_account(deps, request, READ, accountName)
        peer = await holder_elsewhere(deps, accountName, forwarded(request))
        if peer is not None:
            path = f"/agents/kubernetes/accounts/{quote(accountName, safe='')}/namespaces"
            return await forward(deps, peer, "GET", path, None, dict(request.headers), accountName)
        record = registry.accounts.get(accountName)
        if record is None:
            return error_response(
                404, f"no agent serves account {accountName!r} (GET /api/v1/accounts lists the accounts agents serve)"
            )
        names = sorted(
            {
                str((doc.get("metadata") or {}).get("name"))
                for raw in deps.cache.query(accountName, kind="Namespace")
                if isinstance(doc := _loads(raw), dict)
            }
        )
        if not names:
            configured = record.properties.get("namespaces") if isinstance(record.properties, dict) else None
            names = sorted(str(n) for n in configured or ())
        return JSONResponse(names)

    return api


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
