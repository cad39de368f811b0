"""The read API: agents connected to this hub, the accounts they serve, each account's cached
objects (as Kubernetes Lists, or Clouddriver's manifest view), and the multi-cluster watch
(Server-Sent Events)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from ...kube.errors import SelectorError
from ...kube.selectors import parse_label_selector
from ...protocol.states import AgentAccountState
from ..auth.access import READ
from ..cache.cache import SubscriptionOverflow
from ..cache.manifests import manifest_view
from ..replicas.forwarding import PeerUnreachable
from ..replicas.peers import Peer
from ..store import StoreError
from .armory import ArmoryAgent, agent_document, armory_fields
from .common import HubRoute
from .deps import ApiDeps
from .replicas import forwarded
from .schemas import EVENT_STREAM, FORBIDDEN, KubernetesList, ManifestView, error
from .security import check_account, check_admin, login_check, principal_of, readable

log = logging.getLogger("scaleagent.hub.api.objects")

# Sent on an idle watch so proxies keep the stream open and clients notice a dead hub.
HEARTBEAT_SECONDS = 15.0

UNKNOWN_ACCOUNT = error("The account is not known to this hub")
REPLICA_UNREACHABLE = error("The account is streamed through another hub replica, which is unreachable")


class EventStreamResponse(StreamingResponse):
    """What the watch answers: it declares `text/event-stream` in the API's description."""

    media_type = "text/event-stream"


class KindFreshness(BaseModel):
    lastEventAt: str | None = Field(description="When the kind's newest event reached this replica's cache (UTC)")
    lastEventAgeSeconds: float | None = Field(description="Seconds since then; null: no event yet")
    watching: bool = Field(
        description="Whether its watch is established now: a quiet kind that is watching is current "
        "however old its newest event"
    )


class Freshness(BaseModel):
    lastEventAt: str | None = Field(description="The newest event of any kind (UTC)")
    lastEventAgeSeconds: float | None
    watches: int = Field(description="Kinds followed")
    watchesEstablished: int = Field(description="Of those, kinds whose watch is established now")
    kinds: dict[str, KindFreshness] = Field(description="By kind, as Kind or Kind.group")


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
    freshness: Freshness = Field(description="How current this hub's copy of the account is")


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

    async def gathered(request: Request, path: str, local: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """`local`, then each other replica's answer to `path` (answered there from what it holds);
        a replica that does not answer is left out and logged."""
        if not deps.replicated or forwarded(request):
            return [local]
        assert deps.forwarder is not None
        forwarder = deps.forwarder

        async def one(peer: Peer) -> list[dict[str, Any]]:
            try:
                answer = await forwarder.request(peer.id, peer.base_url, "GET", path, timeout=10.0)
                doc = answer.json() if answer.status == 200 else None
            except (PeerUnreachable, ValueError) as e:
                log.warning("replica %s left out of %s: %s", peer.id, path, e)
                return []
            return [d for d in doc if isinstance(d, dict)] if isinstance(doc, list) else []

        # Every replica discovery knows, ready or not: one leaving the Service still holds agents.
        return [local, *await asyncio.gather(*(one(p) for p in deps.peers.others(ready_only=False)))]

    @router.get(
        "/armory/agents",
        response_model=list[ArmoryAgent],
        tags=["agents"],
        summary="Agents connected to the hub (every replica's, each with its `replica`)",
        description="One entry per session, in the shape of Armory's ArmoryAgentResponse (agentId, type, "
        "caching, clouddriverId, lastConnection, accounts) with the hub's own fields alongside.",
        responses={403: FORBIDDEN},
    )
    async def agents(request: Request) -> list[dict[str, Any]]:
        check_admin(deps, request, "listing agents")
        parts = await gathered(request, "/armory/agents", [agent_document(s) for s in registry.sessions.values()])
        # A replica of an older version answers without Armory's fields: derived from its own.
        return [armory_fields(a) for part in parts for a in part]

    @router.get(
        "/api/v1/accounts",
        response_model=list[AccountInfo],
        tags=["accounts"],
        summary="Accounts registered by agents, with their cluster's identity and cache counts (every replica's)",
    )
    async def accounts(request: Request) -> list[dict[str, Any]]:
        caller = principal_of(request)
        local = [
            registry.account_info(r)
            for r in sorted(registry.accounts.values(), key=lambda r: r.name)
            if readable(deps, caller, r.name)
        ]
        merged: dict[str, dict[str, Any]] = {}
        for part in await gathered(request, "/api/v1/accounts", local):
            for doc in part:
                name = doc.get("name")
                # Where several replicas know an account, the one streaming it speaks for it.
                if not isinstance(name, str):
                    continue
                known = merged.get(name)
                if known is None or _RANK.get(str(doc.get("state")), 0) > _RANK.get(str(known.get("state")), 0):
                    merged[name] = doc
        return [merged[n] for n in sorted(merged)]

    @router.get(
        "/api/v1/accounts/{account}",
        response_model=AccountInfo,
        tags=["accounts"],
        summary="One account",
        responses={403: FORBIDDEN, 404: UNKNOWN_ACCOUNT, 503: REPLICA_UNREACHABLE},
    )
    async def account(request: Request, account: str) -> dict[str, Any]:
        await check_account(deps, request, READ, account)
        return registry.account_info(record(account))

    @router.get(
        "/api/v1/accounts/{account}/objects",
        tags=["objects"],
        summary="Cached objects of an account, as a Kubernetes List",
        response_class=JSONResponse,
        responses={
            200: {"model": KubernetesList, "description": "The objects, each item the object's JSON"},
            400: error("Invalid labelSelector"),
            403: FORBIDDEN,
            404: error(
                "Unknown account, or a `kind` the account does not follow (`reason`: `UnknownKind`; a followed "
                "kind with no objects is an empty list)"
            ),
            503: REPLICA_UNREACHABLE,
        },
    )
    async def objects(
        request: Request,
        account: str,
        kind: Annotated[str | None, Query(description="Kind or Kind.group, case-insensitive")] = None,
        namespace: str | None = None,
        name: str | None = None,
        labelSelector: Annotated[str | None, Query(description="Kubernetes label selector syntax")] = None,
        application: Annotated[str | None, Query(description="Spinnaker moniker application")] = None,
    ) -> Response:
        await check_account(deps, request, READ, account)
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
        response_class=JSONResponse,
        responses={
            200: {"model": ManifestView},
            400: error("`name` is not `kind name`"),
            403: FORBIDDEN,
            404: error("Unknown account, or no such object in the cache"),
            503: REPLICA_UNREACHABLE,
        },
    )
    async def manifest(request: Request, account: str, location: str, name: str) -> Response:
        await check_account(deps, request, READ, account)
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
        response_class=EventStreamResponse,
        responses={200: EVENT_STREAM, 403: error("The caller may not READ an account named in `account`")},
    )
    async def watch(
        request: Request,
        account: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI's way of declaring a list
        kind: Annotated[list[str], Query()] = [],  # noqa: B006
        namespace: Annotated[list[str], Query()] = [],  # noqa: B006
    ) -> StreamingResponse:
        for name in _split(account):  # naming an account one may not read is a 403, not silence
            await check_account(deps, request, READ, name)
        subscription = cache.subscribe(accounts=_split(account), kinds=_split(kind), namespaces=_split(namespace))
        caller = principal_of(request)
        valid = _LoginCheck(login_check(request), lambda: deps.security.authenticator.generation)

        def visible(name: str) -> bool:
            return readable(deps, caller, name)

        stream = _sse(subscription, request, visible, valid)
        if deps.replicated and not forwarded(request):
            stream = _gathered_sse(deps, subscription, request, visible, valid)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


def _split(values: list[str]) -> list[str]:
    return [v for value in values for v in value.split(",") if v]


_RANK = {"ACTIVE": 2, "DISCONNECTED": 1, "ORPHANED": 0}

_PEER_QUEUE = 10_000
"""Frames from the replicas waiting to be written to one watcher: beyond it the watcher is too
slow, and its stream ends with an error as a local one does (SubscriptionOverflow)."""


_FRAMES_KEPT = 1024
_frames: dict[Any, bytes] = {}
"""Frames encoded lately, by change: every watcher of a change is handed the same Change, so it
is encoded once for all of them, not once per watcher. A frame depends on nothing but its change
(a frozen dataclass, compared by value), so a hit is always right; the memo is emptied when full."""


def _frame(change: Any) -> bytes:
    try:
        frame = _frames.get(change)
    except TypeError:  # not hashable: encode it each time
        return _encode(change)
    if frame is None:
        frame = _encode(change)
        if len(_frames) >= _FRAMES_KEPT:
            _frames.clear()
        _frames[change] = frame
    return frame


def _encode(change: Any) -> bytes:
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
    return b"event: " + change.type.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


def _error_frame(message: str) -> bytes:
    return b"event: error\ndata: " + orjson.dumps({"message": message}) + b"\n\n"


LOGIN_CHECK_SECONDS = 1.0


class _LoginCheck:
    """A watch outlives the request that opened it: before a change is sent, if the last check is
    older than LOGIN_CHECK_SECONDS, the caller's login is checked again (cheap: static tokens are a
    hash, reviews are cached), and a revoked one (a token taken out of the file, a ServiceAccount
    deleted) ends the stream with an error event instead."""

    ENDED = "subscription ended: your login is no longer valid; log in again and watch again"

    def __init__(self, still_valid: Any, generation: Any) -> None:
        self.still_valid, self.generation = still_valid, generation
        self.seen = self.generation()
        self.next = time.monotonic() + LOGIN_CHECK_SECONDS

    async def revoked(self) -> bool:
        """Checked at most once a second, and at once when the tokens file was read again."""
        if time.monotonic() < self.next and self.generation() == self.seen:
            return False
        self.next, self.seen = time.monotonic() + LOGIN_CHECK_SECONDS, self.generation()
        return not await self.still_valid()


async def _gathered_sse(deps: ApiDeps, subscription: Any, request: Request, visible: Any, valid: _LoginCheck) -> Any:
    """This replica's changes and every other replica's (their own watch, one hop), in one stream.
    It ends with an `error` event when a replica's stream breaks or the set of replicas changes,
    since an account may then move: the client rereads the objects and watches again, as after
    an overflow."""
    assert deps.forwarder is not None
    forwarder = deps.forwarder
    queue: asyncio.Queue[bytes] = asyncio.Queue(_PEER_QUEUE)
    ended = asyncio.Event()

    def put(frame: bytes) -> None:
        if ended.is_set():
            return
        if frame.startswith(b"event: error") or queue.full():
            ended.set()
            frame = (
                frame
                if frame.startswith(b"event: error")
                else _error_frame(
                    f"subscription ended: the reader fell more than {_PEER_QUEUE} changes behind; "
                    "re-read the objects and watch again"
                )
            )
        queue.put_nowait(frame)

    async def local() -> None:
        async with subscription:
            try:
                async for change in subscription:
                    if visible(change.account):
                        put(_frame(change))
            except SubscriptionOverflow as e:
                put(_error_frame(str(e)))
        put(_error_frame(f"hub replica {deps.replica} is stopping; watch again"))

    async def peer(p: Peer) -> None:
        path = "/api/v1/watch" + (f"?{request.url.query}" if request.url.query else "")
        buffer, opened = b"", False
        try:
            async for chunk in forwarder.stream(p.id, p.base_url, path):
                opened = True
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                for frame in frames:
                    if frame and not frame.startswith(b":"):
                        put(frame + b"\n\n")
            why = "ended its stream"
        except PeerUnreachable as e:
            if not opened:
                # Down before this watch began (its accounts are moving to the others, whose streams
                # this watch has): nothing was missed from it.
                log.info("watch: hub replica %s left out: %s", p.id, e.reason)
                return
            why = e.reason
        put(_error_frame(f"hub replica {p.id} {why}: re-read the objects and watch again"))

    def peers_changed(_: Any) -> None:
        put(_error_frame("the set of hub replicas changed: re-read the objects and watch again"))

    assert deps.assignments is not None
    try:
        dead = set(await deps.assignments.dead_replicas())
    except StoreError:
        dead = set()
    peers = [p for p in deps.peers.others(ready_only=False) if p.id not in dead]
    tasks = [asyncio.create_task(local())] + [asyncio.create_task(peer(p)) for p in peers]
    deps.peers.listeners.append(peers_changed)
    try:
        while True:
            try:
                frame = await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield b": heartbeat\n\n"
                continue
            if await valid.revoked():  # checked before a change goes out, not after
                yield _error_frame(valid.ENDED)
                return
            yield frame
            if frame.startswith(b"event: error"):
                return
    finally:
        deps.peers.listeners.remove(peers_changed)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _sse(subscription: Any, request: Request, visible: Any, valid: _LoginCheck) -> Any:
    """This replica's changes: what piled up since the last write goes out as one write."""
    async with subscription:
        while True:
            try:
                changes = await subscription.batch(HEARTBEAT_SECONDS)
            except SubscriptionOverflow as e:
                yield _error_frame(str(e))
                return
            if changes is None:
                return
            if not changes:
                if await request.is_disconnected():
                    return
                yield b": heartbeat\n\n"
                continue
            frames = [_frame(change) for change in changes if visible(change.account)]
            if not frames:
                continue
            if await valid.revoked():  # checked before a change goes out, not after
                yield _error_frame(valid.ENDED)
                return
            yield frames[0] if len(frames) == 1 else b"".join(frames)
