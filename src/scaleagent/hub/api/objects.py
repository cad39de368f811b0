"""The read API: agents connected to this hub, the accounts they serve, each account's cached
objects (as Kubernetes Lists, or Clouddriver's manifest view), and the multi-cluster watch
(Server-Sent Events)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from ...kube.errors import SelectorError
from ...kube.selectors import parse_label_selector
from ...protocol.states import AgentAccountState
from ..cache.cache import SubscriptionOverflow
from ..cache.manifests import manifest_view
from .common import HubRoute
from .deps import ApiDeps

# Sent on an idle watch so proxies keep the stream open and clients notice a dead hub.
HEARTBEAT_SECONDS = 15.0


class AgentInfo(BaseModel):
    agentId: str = Field(description="The agent's id (its host name unless configured)")
    sessionId: str
    zoneId: str = Field(description="The agent's zone; empty when it has none")
    agentVersion: str
    replica: str = Field(description="The hub replica holding the session")
    peer: str = Field(description="The agent's address as seen by the hub")
    connectedAt: str = Field(description="RFC 3339, UTC")
    accounts: list[str] = Field(description="Accounts this agent serves")
    rejectedAccounts: dict[str, str] = Field(description="Accounts refused, with the reason")
    events: int = Field(description="Object events received on this session")
    operationsStream: bool = Field(description="Whether the agent's Operations stream is attached")


class AccountInfo(BaseModel):
    name: str
    state: str = Field(
        description="ACTIVE (an agent serves it), DISCONNECTED (its agent is gone; served from "
        "cache during the grace period) or ORPHANED (grace period over; not cached)"
    )
    agentState: str = Field(description="The agent's view: connecting, syncing, watching or error")
    reason: str | None = Field(None, description="Why, when agentState is error, or syncing again after a failure")
    apiHost: str
    certificateFingerprint: str
    serverVersion: str
    zoneId: str
    agentId: str
    kinds: list[str] = Field(description="Kinds followed, as Kind or Kind.group")
    objects: int = Field(description="Objects in the cache")
    objectsByKind: dict[str, int]
    properties: dict[str, Any] = Field(description="The account's configuration on the agent (no secrets)")
    registeredAt: str
    disconnectedAt: str | None = None
    agents: list[str] = Field(description="Agents serving the account now")


def objects_router(deps: ApiDeps) -> APIRouter:
    """The read routes, to `include_router` into the hub's app."""
    router = APIRouter(route_class=HubRoute)
    registry, cache = deps.registry, deps.cache

    def record(account: str) -> Any:
        r = registry.accounts.get(account)
        if r is None:
            raise HTTPException(404, f"account {account!r} is not known to this hub")
        return r

    def unknown_kind(r: Any, kind: str) -> str:
        """Why `kind` names nothing the account follows ("" if it names something, or if the account
        has not said yet what it follows: an account still connecting is not judged)."""
        followed = list(r.kinds) + list(cache.counts(r.name))
        if not followed and r.agent_state in ("", AgentAccountState.CONNECTING):
            return ""
        wanted = kind.lower()
        if any(wanted in (k.lower(), k.partition(".")[0].lower()) for k in followed):
            return ""
        return (
            f'the server doesn\'t have a resource type "{kind}": account {r.name!r} follows no kind of that name '
            f"(Kind or Kind.group, as in its `kinds`: {', '.join(sorted(set(followed))[:12]) or 'none yet'}"
            f"{', ...' if len(set(followed)) > 12 else ''})"
        )

    @router.get(
        "/armory/agents", response_model=list[AgentInfo], tags=["agents"], summary="Agents connected to this hub"
    )
    async def agents() -> list[dict[str, Any]]:
        return [s.info() for s in registry.sessions.values()]

    @router.get(
        "/api/v1/accounts",
        response_model=list[AccountInfo],
        tags=["accounts"],
        summary="Accounts registered by agents, with their cluster's identity and cache counts",
    )
    async def accounts() -> list[dict[str, Any]]:
        return [registry.account_info(r) for r in sorted(registry.accounts.values(), key=lambda r: r.name)]

    @router.get("/api/v1/accounts/{account}", response_model=AccountInfo, tags=["accounts"], summary="One account")
    async def account(account: str) -> dict[str, Any]:
        return registry.account_info(record(account))

    @router.get(
        "/api/v1/accounts/{account}/objects",
        tags=["objects"],
        summary="Cached objects of an account, as a Kubernetes List",
        responses={
            200: {"description": "`{apiVersion: v1, kind: List, items: [...]}`, each item the object's JSON"},
            400: {"description": "invalid labelSelector"},
            404: {
                "description": "unknown account, or a `kind` the account does not follow (`reason`: "
                "`UnknownKind`; a followed kind with no objects is an empty list)"
            },
        },
    )
    async def objects(
        account: str,
        kind: Annotated[str | None, Query(description="Kind or Kind.group, case-insensitive")] = None,
        namespace: str | None = None,
        name: str | None = None,
        labelSelector: Annotated[str | None, Query(description="Kubernetes label selector syntax")] = None,
        application: Annotated[str | None, Query(description="Spinnaker moniker application")] = None,
    ) -> Response:
        if kind is not None:
            unknown = unknown_kind(record(account), kind)
            if unknown:
                return JSONResponse({"error": unknown, "status": 404, "reason": "UnknownKind"}, status_code=404)
        else:
            record(account)
        selector = None
        if labelSelector:
            try:
                selector = parse_label_selector(labelSelector)
            except SelectorError as e:
                raise HTTPException(400, f"invalid labelSelector: {e}") from None
        items = cache.query(
            account, kind=kind, namespace=namespace, name=name, label_selector=selector, application=application
        )
        body = b'{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":%s},"items":[%s]}' % (
            orjson.dumps(cache.resource_version(account)),
            b",".join(items),
        )
        return Response(body, media_type="application/json")

    @router.get(
        "/manifests/{account}/{location}/{name}",
        tags=["objects"],
        summary="One object in Clouddriver's manifest shape",
        description="`name` is `kind name`, e.g. `deployment my-app` (URL-encoded: `deployment%20my-app`); "
        "`location` is the namespace, or `_` for cluster-scoped objects.",
    )
    async def manifest(account: str, location: str, name: str) -> Response:
        record(account)
        kind, _, object_name = name.partition(" ")
        if not object_name:
            raise HTTPException(400, f"name {name!r} must be 'kind name', e.g. 'deployment my-app'")
        raw = cache.get(account, kind, "" if location == "_" else location, object_name)
        if raw is None:
            raise HTTPException(
                404,
                f"{kind} {object_name!r} is not in the cache of account {account!r}"
                + (f" in namespace {location!r}" if location != "_" else ""),
            )
        return Response(orjson.dumps(manifest_view(account, location, raw)), media_type="application/json")

    @router.get(
        "/api/v1/watch",
        tags=["objects"],
        summary="Changes across all accounts, as Server-Sent Events",
        description="Each event is `event: ADDED|MODIFIED|DELETED` with `data:` a JSON document "
        "`{account, type, kind, group, namespace, name, resourceVersion, object}`. Filters take "
        "several values (repeat the parameter or separate with commas). A client that reads too "
        "slowly gets an `event: error` and the stream ends; reconnect and reread the objects.",
    )
    async def watch(
        request: Request,
        account: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI's way of declaring a list
        kind: Annotated[list[str], Query()] = [],  # noqa: B006
        namespace: Annotated[list[str], Query()] = [],  # noqa: B006
    ) -> StreamingResponse:
        subscription = cache.subscribe(accounts=_split(account), kinds=_split(kind), namespaces=_split(namespace))
        return StreamingResponse(
            _sse(subscription, request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


def _split(values: list[str]) -> list[str]:
    return [v for value in values for v in value.split(",") if v]


async def _sse(subscription: Any, request: Request) -> Any:
    async with subscription:
        iterator = subscription.__aiter__()
        while True:
            try:
                change = await asyncio.wait_for(iterator.__anext__(), HEARTBEAT_SECONDS)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield b": heartbeat\n\n"
                continue
            except StopAsyncIteration:
                return
            except SubscriptionOverflow as e:
                yield b"event: error\ndata: " + orjson.dumps({"message": str(e)}) + b"\n\n"
                return
            doc = {
                "account": change.account,
                "type": change.type,
                "kind": change.kind,
                "group": change.group,
                "namespace": change.namespace,
                "name": change.name,
                "resourceVersion": change.resource_version,
            }
            if change.object:
                doc["object"] = orjson.Fragment(change.object)
            yield b"event: " + change.type.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"
