"""List and watch one kind, the way client-go's reflector does.

LIST in pages (inside a budget that bounds how many lists, and so pages, are in memory at once),
then WATCH from the list's resourceVersion with bookmarks. A stream that ends or breaks resumes
from the last version seen, without a new snapshot; `410 Gone` (the version was compacted away)
means relist and a fresh snapshot. Other failures back off with jitter. Nothing is kept after it
has been handed to the handler: memory does not grow with the objects watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import msgspec
import orjson

from .client import KubeClient
from .concurrency import stop_if_cancelled
from .discovery import KindInfo
from .errors import APIError, ClusterReplaced, ConnectionFailed, Forbidden, Gone
from .events import ADDED, DELETED, MODIFIED, SNAPSHOT_BEGIN, SNAPSHOT_END, ObjectEvent

log = logging.getLogger("scaleagent.kube.reflector")

Handler = Callable[[list[ObjectEvent]], Awaitable[None]]
Check = Callable[[], Awaitable[None]]
Transform = Callable[[dict[str, Any]], dict[str, Any]]
StateCallback = Callable[[str, str], None]

META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
META_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
CHANGES = {ADDED, MODIFIED, DELETED}
# How a watch line of each change starts, as the apiserver writes it: what follows, up to the
# line's closing brace, is the object's own JSON, handed on without encoding it again.
_LINE_PREFIX = {t: b'{"type":"' + t.encode() + b'","object":' for t in CHANGES}
SHORT_WATCH = 1.0  # seconds: a watch that ends sooner with nothing delivered counts as a failure
RELIST_SPACING = 5.0  # seconds: a relist sooner than this after the previous one waits for backoff
HEALTHY_STREAM = 60.0  # seconds: a stream that broke after serving this long resets the backoff
READ_SLACK = 30.0  # seconds beyond the watch's own timeout before a silent connection counts as dead
IDLE_TIMEOUT = 90.0  # seconds of silence (no event, no bookmark) after which a watch counts as dead
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark annotation that ends a streamed list


class _Meta(msgspec.Struct, gc=False):
    """What the agent reads of an object: its identity. Everything else is checked to be JSON
    (msgspec validates what it skips) and passed on as the server's own bytes."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""


class _Item(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    apiVersion: str = ""  # custom resources' list items carry their type; built-in kinds' do not
    kind: str = ""


class _Line(msgspec.Struct, gc=False):
    """One watch line: `{"type": ..., "object": {...}}`."""

    type: str
    object: _Item


class _ListMeta(msgspec.Struct, gc=False):
    resourceVersion: str = ""
    next: str = msgspec.field(default="", name="continue")


class _Page(msgspec.Struct, gc=False):
    """One LIST page: its items as the exact bytes the server wrote (msgspec.Raw), not re-encoded."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] | None = None


_decode_line = msgspec.json.Decoder(_Line).decode
_decode_item = msgspec.json.Decoder(_Item).decode
_decode_page = msgspec.json.Decoder(_Page).decode


class _NoWatchList(Exception):
    """The server does not stream lists (refused the parameters, or ignored them)."""


class Backoff:
    """Exponential backoff with full jitter (client-go: 800ms doubling to 30s)."""

    def __init__(self, initial: float = 0.8, maximum: float = 30.0) -> None:
        self.initial, self.maximum = initial, maximum
        self.attempt = 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * (2**self.attempt))
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


def _object_event(account: str, kind: KindInfo, type_: str, obj: dict[str, Any], raw: bytes) -> ObjectEvent:
    meta = obj.get("metadata") or {}
    return ObjectEvent(
        account,
        kind.group,
        kind.version,
        kind.kind,
        meta.get("namespace", ""),
        meta.get("name", ""),
        meta.get("uid", ""),
        meta.get("resourceVersion", ""),
        type_,
        raw,
    )


def _number(rv: str | None) -> int | None:
    """resourceVersions are opaque, but etcd's (and kubesim's) are increasing integers."""
    return int(rv) if rv and rv.isdigit() else None


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        kind: KindInfo,
        handler: Handler,
        *,
        account: str,
        namespace: str | None = None,
        budget: Callable[[], AbstractAsyncContextManager[Any]] | None = None,
        page_size: int = 500,
        field_selector: str = "",
        metadata_only: bool = False,
        transform: Transform | None = None,
        on_state: StateCallback | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        before_resume: Check | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        reconnect_delay: float | None = None,
    ) -> None:
        self.client, self.kind, self.handler = client, kind, handler
        self.account, self.namespace = account, namespace
        self.budget = budget or (lambda: contextlib.nullcontext())
        self.page_size, self.field_selector = page_size, field_selector
        self.metadata_only, self.transform = metadata_only, transform
        self.on_state = on_state or (lambda state, reason: None)
        self.watch_timeout = watch_timeout
        # HTTP/1.1 has no ping (client-go relies on HTTP/2's ReadIdleTimeout): a connection the
        # network left half-open is silent for good, so silence longer than the bookmark interval
        # ends the watch, which resumes from the last version seen.
        self.idle_timeout = idle_timeout
        # Raises ClusterReplaced when the cluster is not the one listed; asked before a watch
        # resumes after a failure or an early end: the moments a server may have been replaced.
        self.before_resume = before_resume
        self._suspect = False
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.relists = 0
        self.resumes = 0
        self.failures = 0  # consecutive: how long this watch has been unable to make progress
        self._stream_started: float | None = None
        # The first wait before a failed list or watch is tried again (then doubling); None: 0.8 s.
        self.reconnect_delay = reconnect_delay
        self.last_event_at = 0.0  # epoch seconds of the newest change delivered by the watch (0: none yet)
        self._resumed_from: int | None = None
        self._initial = False  # a streamed list's snapshot is under way on the current watch
        self._last_list = -1e9
        # `{"apiVersion":…,"kind":…` : what list items of built-in kinds lack (see _listed).
        self._type_prefix = orjson.dumps({"apiVersion": kind.api_version, "kind": kind.kind})[:-1]

    @property
    def scope(self) -> str:
        return self.namespace or ""

    async def run(self) -> None:
        """List and watch until cancelled; raises Forbidden when the identity may not read the kind."""
        backoff = (
            Backoff()
            if self.reconnect_delay is None
            else Backoff(initial=self.reconnect_delay, maximum=max(30.0, self.reconnect_delay))
        )
        loop = asyncio.get_running_loop()
        while True:
            stop_if_cancelled()  # the account's stop waits for this loop to end
            try:
                initial = False
                if self.resource_version is None:
                    if loop.time() - self._last_list < RELIST_SPACING:
                        # A server that answers 410 right after a fresh list must not get a list storm.
                        await self._pause(backoff, "the list expired again right away")
                    self.on_state("listing", "")
                    if self.client.watch_list is not False:
                        initial = True  # a streamed list: the snapshot, then the watch, on one stream
                    else:
                        async with self.budget():
                            self.resource_version = await self._list()
                        self._last_list = loop.time()
                        self.synced.set()
                        self.failures = 0
                elif self._suspect:
                    if self.before_resume is not None:
                        await self.before_resume()
                    await self._check_not_ahead()
                self._suspect = True  # until the watch below ends by its own timeout
                try:
                    started, delivered = loop.time(), await self._watch(initial)
                except _NoWatchList as e:
                    log.info("%s %s: %s; listing in pages instead", self.account, self.kind.qualified, e)
                    self.client.watch_list = False  # remembered for every kind of this client
                    continue
                if loop.time() - started < SHORT_WATCH and not delivered:
                    # client-go's "very short watch": treat as a failure, not as a reason to spin.
                    await self._pause(backoff, "the watch ended at once without events")
                else:
                    backoff.reset()
                    self.failures = 0
            except Gone:
                self.relists += 1
                self.resource_version = None
            except APIError as e:
                if e.status == 403:
                    self.on_state("forbidden", e.message)
                    raise Forbidden(e.message) from None
                if e.status == 410:
                    self.relists += 1
                    self.resource_version = None
                    continue
                await self._pause(backoff, str(e))
            except ConnectionFailed as e:
                if self._stream_lasted(loop):
                    backoff.reset()  # a stream that served for a while earns a fresh start
                await self._pause(backoff, str(e))

    def _stream_lasted(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the stream that just failed had served long enough; asked once per stream, so a
        later failure (a relist that cannot connect, say) is not excused by an old stream's age."""
        started, self._stream_started = self._stream_started, None
        return started is not None and loop.time() - started > HEALTHY_STREAM

    async def _pause(self, backoff: Backoff, reason: str) -> None:
        delay = backoff.next()
        self.failures += 1
        self.on_state("backoff", reason)
        # The account reports retries, gathered across its watches (agent/retry_log.py).
        log.debug("%s %s: %s; retrying in %.1fs", self.account, self.kind.qualified, reason, delay)
        await asyncio.sleep(delay)

    def _params(self) -> dict[str, str]:
        params = {}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def _marker(self, type_: str, rv: str = "") -> ObjectEvent:
        k = self.kind
        return ObjectEvent(self.account, k.group, k.version, k.kind, self.scope, "", "", rv, type_, None)

    def _encode(self, type_: str, obj: dict[str, Any], raw: bytes | None) -> ObjectEvent:
        if self.metadata_only:
            obj = {"apiVersion": self.kind.api_version, "kind": self.kind.kind, "metadata": obj.get("metadata") or {}}
            raw = None
        if self.transform is not None:
            obj = self.transform(obj)
            raw = None
        return _object_event(self.account, self.kind, type_, obj, raw if raw is not None else orjson.dumps(obj))

    def _typed(self, item: dict[str, Any]) -> dict[str, Any]:
        """A list item with its `apiVersion` and `kind`, which the apiserver leaves out of the items
        of built-in kinds (the list's own TypeMeta names them); custom resources keep theirs."""
        if not item.get("kind") or not item.get("apiVersion"):
            rest = {k: v for k, v in item.items() if k not in ("apiVersion", "kind")}
            item = {"apiVersion": self.kind.api_version, "kind": self.kind.kind, **rest}
        return item

    def _listed(self, items: list[msgspec.Raw]) -> list[ObjectEvent]:
        """The ADDED events of one page's items, each carrying the item's bytes as the server wrote
        them. Items of built-in kinds lack `apiVersion` and `kind` (the list's own TypeMeta names
        them): those are spliced in front of the bytes rather than decoding and encoding the item.
        Scrubbed or transformed kinds decode each item whole."""
        if self.metadata_only or self.transform is not None:
            return [self._encode(ADDED, self._typed(item), None) for item in self._decoded(items)]
        out: list[ObjectEvent] = []
        account, kind, prefix = self.account, self.kind, self._type_prefix
        group, version, kind_name = kind.group, kind.version, kind.kind
        for raw in items:
            try:
                item = _decode_item(raw)
            except msgspec.DecodeError as e:
                self._skip_item(e)
                continue
            meta = item.metadata
            body = memoryview(raw)
            if item.kind and item.apiVersion:
                data = bytes(body)  # typed already (custom resources): as it came
            elif item.kind or item.apiVersion or len(body) < 3:
                # Half typed, or too short to splice into: decoded and typed whole.
                out.extend(self._encode(ADDED, self._typed(d), None) for d in self._decoded([raw]))
                continue
            else:
                data = b"".join((prefix, b",", body[1:]))
            out.append(
                ObjectEvent(
                    account,
                    group,
                    version,
                    kind_name,
                    meta.namespace,
                    meta.name,
                    meta.uid,
                    meta.resourceVersion,
                    ADDED,
                    data,
                )
            )
        return out

    def _decoded(self, items: list[msgspec.Raw]) -> list[dict[str, Any]]:
        """Items decoded whole (the general path); an item that is not a JSON object is skipped."""
        out = []
        for raw in items:
            try:
                item = orjson.loads(memoryview(raw))
            except orjson.JSONDecodeError as e:
                self._skip_item(e)
                continue
            if type(item) is not dict:
                self._skip_item(TypeError(f"a list item is a JSON {type(item).__name__}, not an object"))
                continue
            out.append(item)
        return out

    def _skip_item(self, error: Exception) -> None:
        log.warning("%s %s: skipping a list item the agent cannot read: %s", self.account, self.kind.qualified, error)

    async def _list(self) -> str:
        """One consistent snapshot, page by page; returns the list's resourceVersion.

        All pages travel on one connection that closes after the last one (`bulk_session`): one
        TLS handshake per list, not per page, and no deep read buffer left behind."""
        async with self.client.bulk_session() as session:
            return await self._list_pages(session)

    async def _page(self, session: aiohttp.ClientSession, token: str) -> _Page:
        params = {**self._params(), "limit": str(self.page_size)}
        if token:
            params["continue"] = token
        raw = await self.client.get(
            self.kind.path(self.namespace),
            params=params,
            session=session,
            accept=META_LIST if self.metadata_only else None,
            decode=False,
        )
        try:
            return _decode_page(raw or b"{}")
        except msgspec.DecodeError as e:
            raise APIError(200, "BadResponse", f"a LIST page of {self.kind.qualified} could not be read: {e}") from None

    async def _list_pages(self, session: aiohttp.ClientSession) -> str:
        """The pages of one list. The next page is asked for as soon as this one's continue token
        is known, so the server prepares it while this page's events are handed on: at most two
        pages of a list are in memory at once."""
        await self.handler([self._marker(SNAPSHOT_BEGIN)])
        token = ""
        ahead: asyncio.Future[_Page] = asyncio.ensure_future(self._page(session, token))
        try:
            while True:
                try:
                    page = await ahead
                except APIError as e:
                    if e.status == 410 and token:  # the snapshot expired between pages: start over
                        await self.handler([self._marker(SNAPSHOT_BEGIN)])
                        token = ""
                        ahead = asyncio.ensure_future(self._page(session, token))
                        continue
                    raise
                token = page.metadata.next
                if token:
                    ahead = asyncio.ensure_future(self._page(session, token))
                if page.items:
                    await self.handler(self._listed(page.items))
                if not token:
                    await self.handler([self._marker(SNAPSHOT_END, page.metadata.resourceVersion)])
                    return page.metadata.resourceVersion
                del page
        finally:
            if not ahead.done():
                ahead.cancel()
                await asyncio.wait([ahead])
            if not ahead.cancelled():
                ahead.exception()  # seen: a page's failure after the list had already failed is moot

    async def _watch(self, initial: bool = False) -> int:
        """Follow the stream until it ends; return how many events were delivered.

        The resume point moves only after the handler has taken a batch, so an event the handler
        did not accept is seen again after a restart.

        `initial`: a streamed list, as client-go's WatchList: the server sends the current objects
        as ADDED events, then a bookmark annotated `k8s.io/initial-events-end` whose version ends
        the snapshot (SNAPSHOT_END), and the same stream goes on as the watch. Object bytes pass
        through as the server wrote them. A server that refuses the parameters, or ignores them
        (no such bookmark before other events), raises _NoWatchList: the caller lists in pages.
        """
        timeout = random.randint(*self.watch_timeout)
        started = asyncio.get_running_loop().time()
        params = {
            **self._params(),
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version or "",
            "timeoutSeconds": str(timeout),
        }
        if initial:
            params.update(sendInitialEvents="true", resourceVersionMatch="NotOlderThan", resourceVersion="")
        delivered = 0
        self._resumed_from = _number(self.resource_version)
        self._stream_started = asyncio.get_running_loop().time()
        self._initial = False
        budget = contextlib.AsyncExitStack()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(budget.aclose)
            stack.callback(setattr, self, "_initial", False)  # however the stream ends
            session = None
            if initial:
                # The snapshot's objects are in flight until its end: inside the list budget. They
                # travel on a connection of their own, which closes when this stream ends (its
                # read buffer grew as deep as the snapshot's reads; see KubeClient.__init__); the
                # watches after it go back to the shared pool.
                await budget.enter_async_context(self.budget())
                session = await stack.enter_async_context(self.client.bulk_session())
            try:
                resp = await stack.enter_async_context(
                    self.client.stream(
                        "GET",
                        self.kind.path(self.namespace),
                        params=params,
                        accept=META_ONE if self.metadata_only else None,
                        read_timeout=min(self.idle_timeout, timeout + READ_SLACK),
                        session=session,
                    )
                )
            except APIError as e:
                if initial and e.status in (400, 422):
                    raise _NoWatchList(f"the server refused a streamed list ({e.status}: {e.message})") from None
                raise
            self.failures = 0  # the server accepted the watch: this kind is making progress again
            if initial:
                self._initial = True
                await self.handler([self._marker(SNAPSHOT_BEGIN)])
            else:
                self.on_state("watching", "")
            pending = b""
            chunks = resp.content.iter_any().__aiter__()
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    # Silent past the bookmark interval: a connection the network left half-open,
                    # or a server without periodic bookmarks. Not a failure: resume from the last
                    # version seen, once the server has been checked (a resume is suspect).
                    log.debug(
                        "%s %s: nothing received for %gs; resuming the watch on a new connection",
                        self.account,
                        self.kind.qualified,
                        self.idle_timeout,
                    )
                    self.resumes += 1
                    self._suspect = True
                    return delivered
                except (aiohttp.ClientError, OSError) as e:
                    # The stream broke: resume from the last version seen, no snapshot needed.
                    self.resumes += 1
                    raise ConnectionFailed(f"the watch broke: {type(e).__name__}: {e}") from None
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")
                was_initial = self._initial
                events, error, rv = self._decode(lines)
                if was_initial:
                    delivered += await self._initial_events(events, budget)
                elif events:
                    await self.handler(events)
                    delivered += len(events)
                    self.last_event_at = time.time()
                if rv and not self._initial:
                    self.resource_version = rv
                if error is not None:
                    raise error
            if self._initial:
                self._initial = False
                raise _NoWatchList("the server ended a streamed list without its initial-events-end bookmark")
        self.resumes += 1  # the server ended the watch: resume
        # Ended by its timeout (give or take the server's own rounding), or sooner: a server going away.
        self._suspect = asyncio.get_running_loop().time() - started < timeout * 0.9
        return delivered

    async def _initial_events(self, events: list[ObjectEvent], budget: contextlib.AsyncExitStack) -> int:
        """Hand on a streamed list's events: the snapshot's ADDED ones, its SNAPSHOT_END (alone in
        its batch, as a paged list sends it), then the watch's first changes."""
        end = next((i for i, e in enumerate(events) if e.type == SNAPSHOT_END), None)
        if end is None:
            if events:
                await self.handler(events)
            return len(events)
        if end:
            await self.handler(events[:end])
        await self.handler([events[end]])
        self.resource_version = events[end].resource_version
        self._last_list = asyncio.get_running_loop().time()
        self.synced.set()
        await budget.aclose()
        self.on_state("watching", "")
        rest = events[end + 1 :]
        if rest:
            await self.handler(rest)
            self.last_event_at = time.time()
        return len(events) - 1

    def _decode(self, lines: list[bytes]) -> tuple[list[ObjectEvent], Exception | None, str]:
        """Events of complete lines, the error that ends the stream if one came, and the last version.

        The common line (a change to an object of a kind passed on as it is) is read by msgspec for
        the object's identity only: the rest of the line is checked to be JSON, not built into
        Python objects, and the object's bytes go on as the server wrote them. Everything else
        (bookmarks, errors, the end of a streamed list, scrubbed kinds, lines of another shape)
        takes the general path, `_decode_general`."""
        out: list[ObjectEvent] = []
        rv = ""
        read_at = time.time()  # these lines arrived together
        fast = not self.metadata_only and self.transform is None
        account, kind = self.account, self.kind
        resumed_from = str(self._resumed_from) if self._resumed_from is not None else ""
        group, version, kind_name = kind.group, kind.version, kind.kind
        for line in lines:
            if fast and line:
                try:
                    msg = _decode_line(line)
                except msgspec.DecodeError:
                    msg = None
                if msg is not None:
                    type_ = msg.type
                    prefix = _LINE_PREFIX.get(type_)
                    if (
                        prefix is not None
                        and (type_ == ADDED or not self._initial)
                        and line.startswith(prefix)
                        and line.endswith(b"}")
                    ):
                        meta = msg.object.metadata
                        event_rv = meta.resourceVersion
                        out.append(
                            ObjectEvent(
                                account,
                                group,
                                version,
                                kind_name,
                                meta.namespace,
                                meta.name,
                                meta.uid,
                                event_rv,
                                type_,
                                line[len(prefix) : -1],
                                read_at,
                            )
                        )
                        # Older than the resume point? Decimal versions compare by length,
                        # then by their digits: no integer is built for the common answer, no.
                        if resumed_from and (
                            len(event_rv) < len(resumed_from)
                            or (len(event_rv) == len(resumed_from) and event_rv < resumed_from)
                        ):
                            self._check_forward(event_rv)  # raises ClusterReplaced when it really is
                        rv = event_rv or rv
                        continue
            error, rv = self._decode_general(line, out, read_at, rv)
            if error is not None:
                return out, error, rv
        return out, None, rv

    def _decode_general(
        self, line: bytes, out: list[ObjectEvent], read_at: float, rv: str
    ) -> tuple[Exception | None, str]:
        """One line of any kind, decoded whole: its event (if any) is appended to `out`; returns
        the error that ends the stream (or None) and the newest version seen."""
        line = line.strip()
        if not line:
            return None, rv
        try:
            msg = orjson.loads(line)
            type_, obj = msg["type"], msg["object"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning(
                "%s %s: ignoring a malformed watch line (%d bytes)", self.account, self.kind.qualified, len(line)
            )
            return None, rv
        if self._initial and (type_ in (MODIFIED, DELETED) or type_ == "BOOKMARK"):
            meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
            if type_ == "BOOKMARK" and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self._initial = False
                rv = str(meta.get("resourceVersion") or "")
                out.append(self._marker(SNAPSHOT_END, rv))
                return None, rv
            # A server that ignored sendInitialEvents: it sent the state as of now, then went on.
            self._initial = False
            return _NoWatchList(f"the server sent a {type_} before the end of a streamed list"), ""
        prefix = _LINE_PREFIX.get(type_)
        if prefix is not None and type(obj) is dict:
            raw = line[len(prefix) : -1] if line.startswith(prefix) and line.endswith(b"}") else None
            meta = obj.get("metadata")
            if type(meta) is dict:
                for key in ("name", "namespace", "uid", "resourceVersion"):
                    if type(meta.get(key, "")) is not str:
                        log.warning(
                            "%s %s: ignoring a watch line whose metadata.%s is not a string",
                            self.account,
                            self.kind.qualified,
                            key,
                        )
                        return None, rv
            event = self._encode(type_, obj, raw)
            event.read_at = read_at
            self._check_forward(event.resource_version)
            out.append(event)
            return None, event.resource_version or rv
        if type_ == "BOOKMARK" and isinstance(obj, dict):
            return None, (obj.get("metadata") or {}).get("resourceVersion") or rv
        if type_ == "ERROR":
            return self._watch_error(obj if isinstance(obj, dict) else {}), rv
        return None, rv

    async def _check_not_ahead(self) -> None:
        """A cluster restored from a backup keeps its identity but goes back in time: a watch from
        a version it has not reached yet is accepted and stays silent until the cluster gets there
        (a real 1.20 server answers 200 and nothing). A one-item list says where it is now."""
        held = _number(self.resource_version)
        if held is None:
            return
        page = await self.client.get(
            self.kind.path(self.namespace), params={**self._params(), "limit": "1"}, accept=META_LIST
        )
        current = _number(str(((page or {}).get("metadata") or {}).get("resourceVersion") or ""))
        if current is not None and held > current:
            raise ClusterReplaced(
                f"the watch of {self.kind.qualified} would resume from resourceVersion {held}, but "
                f"the cluster is at {current}: it was restored from an older state"
            )

    def _check_forward(self, rv: str) -> None:
        """A watch only delivers changes newer than the version it started from; an older one
        means the server's storage is not the one that version came from."""
        number = _number(rv)
        if number is not None and self._resumed_from is not None and number < self._resumed_from:
            raise ClusterReplaced(
                f"a watch of {self.kind.qualified} delivered resourceVersion {rv}, older than "
                f"{self._resumed_from} which it resumed from: the cluster's storage was replaced"
            )

    @staticmethod
    def _watch_error(status: dict[str, Any]) -> Exception:
        code = int(status.get("code") or 500)
        causes = (status.get("details") or {}).get("causes") or []
        if code == 410 or (code == 504 and any(c.get("reason") == "ResourceVersionTooLarge" for c in causes)):
            return Gone()
        return APIError(code, str(status.get("reason", "")), str(status.get("message", "")), status)
