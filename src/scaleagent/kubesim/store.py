"""Versioned object storage for one simulated cluster: the part etcd and the watch cache play.

Every write gets the next cluster-wide resourceVersion, is kept in a per-resource history window
(the watch cache), and is fanned out to the watchers of that resource in the same synchronous
step, so a watch started from version N sees every later change exactly once. Writes older than
the window are forgotten: a watch or a paginated list that needs them gets 410 Gone, which is what
makes clients relist. Stored objects are never mutated in place; a write stores a new dict.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import heapq
import math
from collections import defaultdict, deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from sortedcontainers import SortedDict

from .errors import StatusError

Predicate = Callable[[dict[str, Any]], bool]

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


def object_key(namespace: str, name: str) -> str:
    # Names cannot contain "/", so this sorts by namespace then name, as etcd keys do.
    return f"{namespace}/{name}"


@dataclass(slots=True)
class Event:
    rv: int
    type: str
    key: str  # object key within the resource
    obj: dict[str, Any]
    prev: dict[str, Any] | None = None
    raw: bytes | None = None

    def encoded(self) -> bytes:
        """The object's JSON, computed once however many watchers receive it."""
        if self.raw is None:
            self.raw = orjson.dumps(self.obj)
        return self.raw


class Expired(StatusError):
    def __init__(self, message: str, continue_token: str = "") -> None:
        super().__init__(
            410, message, reason="Expired", metadata={"continue": continue_token} if continue_token else None
        )


class TooLargeResourceVersion(StatusError):
    def __init__(self, rv: int, current: int) -> None:
        super().__init__(
            504,
            f"Too large resource version: {rv}, current: {current}",
            reason="Timeout",
            details={
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            },
        )


@dataclass(eq=False)  # identity: a watcher is one open connection
class Watcher:
    """One open watch: a bounded queue of events already filtered for this client."""

    resource: str
    namespace: str
    predicate: Predicate | None
    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    limit: int = 10_000
    overflowed: bool = False
    closed: bool = False

    def _in_scope(self, key: str) -> bool:
        return not self.namespace or key.startswith(self.namespace + "/")

    def matches(self, obj: dict[str, Any] | None) -> bool:
        return obj is not None and (self.predicate is None or self.predicate(obj))

    def translate(self, ev: Event) -> Event | None:
        """What this client sees of a change; selector transitions become ADDED/DELETED as in Kubernetes."""
        if not self._in_scope(ev.key):
            return None
        if self.predicate is None:
            return ev
        now = self.matches(ev.obj)
        if ev.type == MODIFIED:
            before = self.matches(ev.prev)
            if now and before:
                return ev
            if now:
                return Event(ev.rv, ADDED, ev.key, ev.obj, ev.prev, ev.raw)
            if before and ev.prev is not None:
                # As the cacher does: the object as it last matched, at the event's resourceVersion.
                gone = {**ev.prev, "metadata": {**ev.prev["metadata"], "resourceVersion": str(ev.rv)}}
                return Event(ev.rv, DELETED, ev.key, gone, ev.prev)
            return None
        return ev if now else None

    def offer(self, ev: Event) -> None:
        if self.closed:
            return
        out = self.translate(ev)
        if out is None:
            return
        if self.queue.qsize() >= self.limit:
            # A real apiserver drops watchers that cannot keep up; the client resumes from its last version.
            self.overflowed = True
            self.closed = True
        self.queue.put_nowait(out)

    def close(self) -> None:
        self.closed = True
        self.queue.put_nowait(Event(0, ERROR, "", {}))

    def stream(
        self,
        current_rv: Callable[[], int],
        *,
        timeout: float,
        bookmark_interval: float | None,
        clock: Callable[[], float],
    ) -> AsyncGenerator[list[Event], None]:
        """What the watch sends after its initial events: batches of changes, and BOOKMARK events.

        A bookmark promises that every change up to its resourceVersion has been sent, so one is
        sent only when the queue is empty: fan-out is synchronous, so at that moment every change up
        to the store's current version has been queued, and written. At the deadline, what is still
        queued goes out before the final bookmark. `bookmark_interval` None: no bookmarks. The clock
        starts now, not at the first iteration.
        """
        start = clock()
        first_bookmark = math.inf if bookmark_interval is None else start + bookmark_interval
        return self._stream(current_rv, start + timeout, first_bookmark, bookmark_interval, clock)

    async def _stream(
        self,
        current_rv: Callable[[], int],
        deadline: float,
        next_bookmark: float,
        bookmark_interval: float | None,
        clock: Callable[[], float],
    ) -> AsyncGenerator[list[Event], None]:
        waiting: Event | None = None
        while True:
            expired = clock() >= deadline
            batch = [] if waiting is None else [waiting]
            waiting = None
            while not self.queue.empty() and (expired or len(batch) < 1000):
                batch.append(self.queue.get_nowait())
            closing = any(e.type == ERROR for e in batch)  # the server is shutting down
            batch = [e for e in batch if e.type != ERROR]
            if expired and not closing and bookmark_interval is not None and not self.overflowed:
                batch.append(Event(current_rv(), BOOKMARK, "", {}))
            if batch:
                yield batch
            if closing or expired:
                return
            if batch:
                continue
            if self.closed:
                return
            now = clock()
            if now >= next_bookmark:
                yield [Event(current_rv(), BOOKMARK, "", {})]
                next_bookmark = clock() + (bookmark_interval or 0.0)
                continue
            try:
                waiting = await asyncio.wait_for(self.queue.get(), min(deadline, next_bookmark) - now)
            except TimeoutError:
                pass


class Store:
    def __init__(self, history: int = 10_000, watch_queue: int = 10_000) -> None:
        self.rv = 1
        self.history_size = history
        self.watch_queue = watch_queue
        self._objects: dict[str, SortedDict] = defaultdict(SortedDict)
        self._history: dict[str, deque[Event]] = defaultdict(deque)
        self._evicted: dict[str, int] = defaultdict(int)
        self._watchers: dict[str, set[Watcher]] = defaultdict(set)
        self._listeners: list[Callable[[str, Event], None]] = []
        # ownerReference uid -> {(resource, key)}: lets the garbage collector find dependents.
        self._dependents: dict[str, set[tuple[str, str]]] = defaultdict(set)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects[resource].get(object_key(namespace, name))

    def count(self, resource: str) -> int:
        return len(self._objects[resource])

    def items(self, resource: str, namespace: str = "") -> Iterator[dict[str, Any]]:
        objs = self._objects[resource]
        if not namespace:
            yield from objs.values()
            return
        for k in objs.irange(namespace + "/", namespace + "0", inclusive=(True, False)):
            yield objs[k]

    def resources(self) -> list[str]:
        return [r for r, objs in self._objects.items() if objs]

    def dependents(self, uid: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for resource, key in list(self._dependents.get(uid, ())):
            obj = self._objects[resource].get(key)
            if obj is not None:
                out.append((resource, obj))
        return out

    def list(
        self,
        resource: str,
        namespace: str,
        predicate: Predicate | None,
        limit: int = 0,
        continue_token: str = "",
        at_rv: int | None = None,
    ) -> tuple[list[dict[str, Any]], int, str, int | None]:
        """One page of a consistent list: (items, list rv, continue token, remaining count or None).

        A first page is read at the current version; later pages at the version the first one
        was read at, reconstructed from the history window (410 once that is compacted away).
        """
        start = ""
        if continue_token:
            at_rv, start = _decode_continue(continue_token)
            if at_rv == -1:  # the token a 410 hands out: go on from the latest version, inconsistently
                at_rv = None
        rv = self.rv if at_rv is None else at_rv
        if rv > self.rv:
            raise TooLargeResourceVersion(rv, self.rv)
        overlay = self._state_since(resource, rv, start if continue_token else None)
        lo = (namespace + "/") if namespace else ""
        hi = (namespace + "0") if namespace else None
        if start and start > lo:
            lo = start
        items: list[dict[str, Any]] = []
        last = ""
        more = False
        for key, obj in self._merged(resource, overlay, lo, hi, exclusive_lo=bool(start)):
            if predicate is not None and not predicate(obj):
                continue
            if limit and len(items) >= limit:
                more = True
                break  # with a predicate Kubernetes omits the count: it would mean filtering everything
            items.append(obj)
            last = key
        token = _encode_continue(rv, last) if more else ""
        count = self._count_after(resource, overlay, last, hi) if (more and predicate is None) else None
        return items, rv, token, count

    def _count_after(self, resource: str, overlay: dict[str, dict[str, Any] | None], after: str, hi: str | None) -> int:
        """Objects with keys in (after, hi) at the list's version, without visiting them: the
        current count from the sorted keys, corrected by what changed since that version."""
        objs = self._objects[resource]
        end = objs.bisect_left(hi) if hi is not None else len(objs)
        count = end - objs.bisect_right(after)
        for k, then in overlay.items():
            if k > after and (hi is None or k < hi):
                count += (then is not None) - (k in objs)
        return count

    def _state_since(self, resource: str, rv: int, continue_from: str | None) -> dict[str, dict[str, Any] | None]:
        """Objects as they were at `rv`, for the keys that changed since (None: did not exist).

        Too old a version is 410 with etcd3 storage's messages; for a next page (`continue_from`, the
        key it starts after) the Status carries a token to go on from the latest version instead,
        as upstream's handleCompactedErrorForPaging does.
        """
        if rv >= self.rv:
            return {}
        if rv < self._evicted[resource]:
            if continue_from is not None:
                raise Expired(
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter, or use the continue token in "
                    "this response to retrieve the remainder of the results. Continuing with the provided token "
                    "results in an inconsistent list - objects that were created, modified, or deleted between "
                    "the time the first chunk was returned and now may show up in the list.",
                    continue_token=_encode_continue(-1, continue_from),
                )
            raise Expired("The resourceVersion for the provided list is too old.")
        overlay: dict[str, dict[str, Any] | None] = {}
        for ev in reversed(self._history[resource]):
            if ev.rv <= rv:
                break
            overlay[ev.key] = ev.prev if ev.type != ADDED else None
        return overlay

    def _merged(
        self, resource: str, overlay: dict[str, dict[str, Any] | None], lo: str, hi: str | None, exclusive_lo: bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        objs = self._objects[resource]
        live = objs.irange(lo, hi, inclusive=(not exclusive_lo, False)) if (lo or hi) else iter(objs.keys())
        if not overlay:
            for k in live:
                yield k, objs[k]
            return
        extra = sorted(k for k in overlay if k >= lo and (hi is None or k < hi) and not (exclusive_lo and k == lo))
        previous = None
        for k in heapq.merge(live, extra):
            if k == previous:
                continue
            previous = k
            if k in overlay:
                old = overlay[k]
                if old is not None:
                    yield k, old
            else:
                yield k, objs[k]

    # -- writes --------------------------------------------------------------------------------

    def commit(self, resource: str, type_: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> Event:
        """Store one change atomically (no await), stamping it with the next resourceVersion."""
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        key = object_key(meta.get("namespace", ""), meta["name"])
        objs = self._objects[resource]
        if type_ == DELETED:
            objs.pop(key, None)
        else:
            objs[key] = obj
        self._index_owners(resource, key, prev, None if type_ == DELETED else obj)
        ev = Event(self.rv, type_, key, obj, prev)
        hist = self._history[resource]
        hist.append(ev)
        while len(hist) > self.history_size:
            self._evicted[resource] = hist.popleft().rv
        for w in list(self._watchers[resource]):
            w.offer(ev)
        for listener in self._listeners:
            listener(resource, ev)
        return ev

    def compact(self) -> None:
        """Forget all history, as etcd compaction does: older versions answer 410 Gone from now on."""
        for resource, hist in self._history.items():
            if hist:
                self._evicted[resource] = hist[-1].rv
            hist.clear()
        for resource in self._objects:
            self._evicted[resource] = self.rv

    def _index_owners(self, resource: str, key: str, old: dict | None, new: dict | None) -> None:
        for o in (old or {}).get("metadata", {}).get("ownerReferences") or ():
            uid = o.get("uid", "")
            self._dependents[uid].discard((resource, key))
            if not self._dependents[uid]:
                del self._dependents[uid]  # owners come and go: keep no empty entry behind
        for o in (new or {}).get("metadata", {}).get("ownerReferences") or ():
            self._dependents[o.get("uid", "")].add((resource, key))

    # -- watch ---------------------------------------------------------------------------------

    def listen(self, fn: Callable[[str, Event], None]) -> None:
        """In-process informer for controllers: called synchronously for every change."""
        self._listeners.append(fn)

    def watch(
        self, resource: str, namespace: str, predicate: Predicate | None, from_rv: int | None
    ) -> tuple[Watcher, builtins.list[Event]]:
        """Register a watcher and return the events it must see first.

        from_rv None ("unset" or "0" in the API) starts with synthetic ADDED events for the
        current state; otherwise every retained change after from_rv is replayed.
        """
        w = Watcher(resource, namespace, predicate, limit=self.watch_queue)
        initial: list[Event] = []
        if from_rv is None:
            for obj in self.items(resource, namespace):
                if w.matches(obj):
                    meta = obj["metadata"]
                    initial.append(
                        Event(
                            int(meta["resourceVersion"]),
                            ADDED,
                            object_key(meta.get("namespace", ""), meta["name"]),
                            obj,
                        )
                    )
        else:
            if from_rv > self.rv:
                raise TooLargeResourceVersion(from_rv, self.rv)
            if from_rv < self._evicted[resource]:
                raise Expired(f"too old resource version: {from_rv} ({self._evicted[resource]})")
            for ev in self._history[resource]:
                if ev.rv > from_rv:
                    out = w.translate(ev)
                    if out is not None:
                        initial.append(out)
        self._watchers[resource].add(w)
        return w, initial

    def unwatch(self, w: Watcher) -> None:
        self._watchers[w.resource].discard(w)

    def close_watchers(self) -> None:
        for ws in self._watchers.values():
            for w in list(ws):
                w.close()
            ws.clear()


def _encode_continue(rv: int, start: str) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError
        return int(data["rv"]), str(data["start"])
    except Exception:
        raise StatusError(
            400, "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None
