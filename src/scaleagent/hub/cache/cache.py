"""The hub's in-memory cache of every account's objects, and the watch the hub serves from it.

Agents stream object changes (and snapshots, after every relist) for many clusters; the hub must
answer "what is in account X" and "what changed" from memory, for millions of objects. That
shapes everything here:

* Objects stay the JSON bytes the agent sent: the REST API returns them as they are, so nothing
  is re-encoded, and bytes are the most compact form Python has. Each object is read once, on
  ingest, for what is indexed (its uid, labels and the Spinnaker moniker annotations) and no more:
  msgspec builds only those fields and checks that the rest is JSON without building it, and a
  label set seen before is recognised by its bytes (see ``_LabelSets``).
* Storage is nested dicts account -> kind -> namespace -> name -> entry, so kind, namespace and
  name lookups are dict lookups and no per-object key tuple exists. Entries use ``__slots__``;
  namespaces, label keys and values are interned and identical label sets share one tuple, so
  the millions of objects that share them share one copy.
* Labels and monikers have an inverted index (key -> value -> entries) per kind. Its member
  lists cost 8 bytes per member where sets cost 35-140: measured on a million objects, sets were
  the largest overhead after the JSON itself. Lists are compacted lazily (see ``_Members``).
* Objects are keyed by (group, kind, namespace, name), not by version: after a rediscovery the
  same object may arrive under another version and must replace, not duplicate, itself.
* Snapshots reconcile by mark and sweep: every upsert stamps the entry with its kind's current
  generation, a SNAPSHOT_BEGIN starts a new generation for its scope, and SNAPSHOT_END removes
  the entries of that scope stamped before it. No set of seen keys is ever held.
* ``apply`` runs on the event loop for every batch, so it never raises and never waits: a bad
  event is counted and skipped, and each subscriber has a bounded queue that ends the
  subscription (not ingest) when it overflows.
* An older version never replaces a newer one. Outside a snapshot, an ADDED or MODIFIED older
  than the cached copy of the same object (same uid) is ignored, and so is a DELETED older than
  the cached copy (a stale event from a lagging agent, or one replayed; when its uid is another,
  it deleted an earlier incarnation). An event whose object has no uid is applied as before. Each account also
  remembers its last ``DELETED_MEMORY`` deleted uids with the version they went at, so a stale
  ADDED cannot bring a deleted object back. Versions are ordered only when both are decimal
  integers (what every API server hands out); opaque ones are applied as they come. A snapshot's
  objects are applied whatever their versions: a relist is the cluster's truth, and after an
  etcd restore versions really do go backwards (the agent then lists every kind again, and
  that snapshot must replace everything). Ignored events are counted (``staleEventsIgnored``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any

import msgspec
import orjson

from ...kube.selectors import DOUBLE_EQUALS, EQUALS, EXISTS, GREATER_THAN, IN, LESS_THAN, LabelSelector
from ...protocol.v1 import agent_pb2 as pb
from ...protocol.wire import PackedBatch, decode_index

__all__ = [
    "APPLICATION",
    "CLUSTER",
    "BatchApplied",
    "Cache",
    "Change",
    "Subscription",
    "SubscriptionOverflow",
    "version_at_least",
]

log = logging.getLogger("scaleagent.hub.cache")

APPLICATION = "moniker.spinnaker.io/application"
CLUSTER = "moniker.spinnaker.io/cluster"

_ADDED, _MODIFIED, _DELETED = pb.ADDED, pb.MODIFIED, pb.DELETED
_BEGIN, _END = pb.SNAPSHOT_BEGIN, pb.SNAPSHOT_END
_intern = sys.intern
_object_size = itemgetter(9)  # of a packed batch's index row
_flatten = chain.from_iterable
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class _Annotations(msgspec.Struct, gc=False):
    """The two annotations the cache indexes; every other annotation is skipped unread."""

    application: Any = msgspec.field(default=None, name=APPLICATION)
    cluster: Any = msgspec.field(default=None, name=CLUSTER)


class _Metadata(msgspec.Struct, gc=False):
    uid: Any = None
    labels: msgspec.Raw = msgspec.Raw()  # kept as bytes: a label set seen before is one dict lookup
    annotations: _Annotations | None = None


class _Object(msgspec.Struct, gc=False):
    metadata: _Metadata | None = None


class _UidMetadata(msgspec.Struct, gc=False):
    uid: Any = None


class _UidObject(msgspec.Struct, gc=False):
    metadata: _UidMetadata | None = None


_decode_object = msgspec.json.Decoder(_Object).decode
_decode_uid_object = msgspec.json.Decoder(_UidObject).decode

# Deleted uids remembered per account (see _Account.deleted): about 200 bytes each at most.
DELETED_MEMORY = 10_000


class _Entry(msgspec.Struct, gc=False, eq=False):
    """One cached object. ``labels`` is a flat tuple (k1, v1, k2, v2, ...): smaller than a dict.

    A msgspec Struct the garbage collector does not track (gc=False; eq=False: entries compare
    and hash by identity): entries hold only strings, bytes and tuples of strings, so they can be
    in no reference cycle, and a million tracked entries made every full collection walk them all
    (a quarter of a hub's time while it took a burst of new objects, in a profile). The dicts that
    hold only entries are then not tracked either. 80 bytes an entry where a class with __slots__
    took 96."""

    namespace: str
    name: str
    rv: str
    obj: bytes
    labels: tuple[str, ...]
    app: str | None
    cluster: str | None
    gen: int


# The moniker annotations are indexed beside the labels, under keys no label can have (a label
# key cannot contain a space), so that one index structure serves both.
_APP = " application"
_CLUSTER = " cluster"


class _Members(list):
    """The entries indexed under one value, when there are several.

    A list costs 8 bytes per member where a set costs 35 to 140. Removing from a list is a scan,
    so removal is lazy instead: it only counts the member as stale, and once half the list is
    stale the list is rebuilt from the members that still belong (amortised O(1) per removal).
    Readers of an index therefore re-check every candidate (and skip duplicates: a member that
    left and came back before a rebuild is listed twice).
    """

    __slots__ = ("stale",)

    def __init__(self, entries: Iterable[_Entry]) -> None:
        super().__init__(entries)
        self.stale = 0


# An index maps a value to the one entry that has it (most label values -- a pod-template-hash,
# a pod's own name -- belong to very few objects), or to _Members when several do.
_Slot = _Entry | _Members


def _slot_size(slot: Any) -> int:
    if slot is None:
        return 0
    return 1 if type(slot) is _Entry else len(slot)


def _slot_entries(slot: Any) -> Iterable[_Entry]:
    if slot is None:
        return ()
    return (slot,) if type(slot) is _Entry else slot


def _indexed_value(e: _Entry, key: str) -> str | None:
    if key == _APP:
        return e.app
    if key == _CLUSTER:
        return e.cluster
    labels = e.labels
    for i in range(0, len(labels), 2):
        if labels[i] == key:
            return labels[i + 1]
    return None


def _moniker_pairs(app: str | None, cluster: str | None) -> tuple[str, ...]:
    if app is None:
        return (_CLUSTER, cluster) if cluster is not None else ()
    return (_APP, app, _CLUSTER, cluster) if cluster is not None else (_APP, app)


def _indexed_pairs(labels: tuple[str, ...], app: str | None, cluster: str | None) -> dict[str, str]:
    pairs = dict(zip(labels[::2], labels[1::2]))
    if app is not None:
        pairs[_APP] = app
    if cluster is not None:
        pairs[_CLUSTER] = cluster
    return pairs


class _Kind:
    """Everything cached for one (group, kind) of one account, with that kind's index."""

    __slots__ = (
        "group",
        "kind",
        "version",
        "label",
        "lower",
        "label_lower",
        "namespaces",
        "index",
        "count",
        "gen",
        "open",
        "last_event_at",
    )

    def __init__(self, group: str, kind: str) -> None:
        self.group = _intern(group)
        self.kind = _intern(kind)
        self.version = ""  # the version the kind was last seen under
        self.last_event_at = 0.0  # when the newest event of this kind reached the cache (time.time())
        self.label = _intern(f"{kind}.{group}" if group else kind)
        self.lower = kind.lower()
        self.label_lower = self.label.lower()
        self.namespaces: dict[str, dict[str, _Entry]] = {}
        self.index: dict[str, dict[str, _Slot]] = {}  # label key (or _APP, _CLUSTER) -> value -> entries
        self.count = 0
        self.gen = 0  # bumped by every SNAPSHOT_BEGIN; upserts stamp entries with it
        self.open: dict[str, int] = {}  # open snapshot scope -> the generation it began at

    def matches(self, wanted_lower: str) -> bool:
        """``wanted_lower`` (lower-cased ``Kind`` or ``Kind.group``) names this kind."""
        return wanted_lower == self.lower or wanted_lower == self.label_lower

    def holds(self, e: _Entry) -> bool:
        nsd = self.namespaces.get(e.namespace)
        return nsd is not None and nsd.get(e.name) is e

    def entries(self) -> Iterator[_Entry]:
        for nsd in self.namespaces.values():
            yield from nsd.values()

    def add_to_index(self, e: _Entry) -> None:
        # The hot path of every new object: _add inlined.
        pairs = e.labels
        if e.app is not None or e.cluster is not None:
            pairs = pairs + _moniker_pairs(e.app, e.cluster)
        index = self.index
        it = iter(pairs)
        for key, value in zip(it, it):
            values = index.get(key)
            if values is None:
                index[key] = {value: e}
                continue
            cur = values.get(value)
            if cur is None:
                values[value] = e
            elif type(cur) is _Members:
                cur.append(e)
            else:
                values[value] = _Members((cur, e))  # type: ignore[arg-type]

    def remove_from_index(self, e: _Entry) -> None:
        """Call once ``e`` is no longer held."""
        pairs = e.labels
        if e.app is not None or e.cluster is not None:
            pairs = pairs + _moniker_pairs(e.app, e.cluster)
        it = iter(pairs)
        for key, value in zip(it, it):
            self._drop(key, value, e)

    def relabel(self, e: _Entry, labels: tuple[str, ...], app: str | None, cluster: str | None) -> None:
        """Give ``e`` new labels and monikers, moving it only in the index values that changed."""
        old = _indexed_pairs(e.labels, e.app, e.cluster)
        new = _indexed_pairs(labels, app, cluster)
        e.labels, e.app, e.cluster = labels, app, cluster
        for k, v in old.items():
            if new.get(k) != v:
                self._drop(k, v, e)
        for k, v in new.items():
            if old.get(k) != v:
                self._add(k, v, e)

    def _add(self, key: str, value: str, e: _Entry) -> None:
        values = self.index.get(key)
        if values is None:
            values = self.index[key] = {}
        cur = values.get(value)
        if cur is None:
            values[value] = e
        elif type(cur) is _Members:
            cur.append(e)
        else:
            values[value] = _Members((cur, e))  # type: ignore[arg-type]

    def _drop(self, key: str, value: str, e: _Entry) -> None:
        """``e`` no longer has ``value`` under ``key`` (its fields already say so, or it is gone)."""
        values = self.index.get(key)
        cur = values.get(value) if values is not None else None
        if cur is e:
            del values[value]  # type: ignore[union-attr]
        elif type(cur) is _Members:
            cur.stale += 1
            if cur.stale * 2 < len(cur):
                return
            live = [m for m in dict.fromkeys(cur) if self.holds(m) and _indexed_value(m, key) == value]
            if len(live) > 1:
                cur[:] = live
                cur.stale = 0
                return
            if live:
                values[value] = live[0]  # type: ignore[index]
            else:
                del values[value]  # type: ignore[union-attr]
        else:
            return
        if not values:
            del self.index[key]


class _Account:
    __slots__ = ("name", "kinds", "rv", "deleted")

    def __init__(self, name: str) -> None:
        self.name = name
        self.kinds: dict[tuple[str, str], _Kind] = {}
        self.rv = ""
        # uid -> the (numeric) resourceVersion it was deleted at, oldest first; at most
        # DELETED_MEMORY. An object whose uid is here at that version or later is not brought back
        # by a live ADDED/MODIFIED of an earlier version.
        self.deleted: dict[str, int] = {}

    def remember_deleted(self, uid: str, rv: str) -> None:
        if not uid or not rv.isdigit():
            return  # nothing to key on, or a version that cannot be ordered
        deleted = self.deleted
        at = int(rv)
        before = deleted.pop(uid, None)
        if before is not None and before > at:
            at = before
        elif len(deleted) >= DELETED_MEMORY:
            del deleted[next(iter(deleted))]
        deleted[uid] = at

    def deleted_since(self, uid: str, rv: str) -> bool:
        """Whether ``uid`` was deleted at ``rv`` or later: an event of that version is stale."""
        at = self.deleted.get(uid) if uid else None
        return at is not None and rv.isdigit() and at >= int(rv)

    def find(self, kind: str | None) -> list[_Kind]:
        """The kinds that ``kind`` names (case-insensitive ``Kind`` or ``Kind.group``); all for None."""
        if kind is None:
            return list(self.kinds.values())
        wanted = kind.lower()
        return [k for k in self.kinds.values() if k.matches(wanted)]


def _intern_labels(raw: dict[Any, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for k, v in raw.items():
        if type(k) is str and type(v) is str:
            out += (_intern(k), _intern(v))
    return tuple(out)


class _LabelSets:
    """Hands out one shared tuple per distinct label set.

    Objects often carry identical labels (every pod of a ReplicaSet, the same app in many
    clusters): they then share one tuple of interned strings, and a label set seen before costs
    one dict lookup instead of interning each string. The pool only ever speeds things up, so
    when it grows past ``limit`` it is simply emptied (the entries keep their tuples).
    """

    def __init__(self, limit: int = 1 << 16) -> None:
        self._pool: dict[tuple[str, ...], tuple[str, ...]] = {}
        # The same label sets by the bytes they came as: a set seen before costs hashing its
        # bytes, with nothing decoded, built or interned.
        self.by_bytes: dict[bytes, tuple[str, ...]] = {}
        self._limit = limit

    def from_json(self, raw: msgspec.Raw) -> tuple[str, ...]:
        """The shared tuple of a label set given as its JSON bytes (none: empty); () unless a JSON object."""
        if not raw:
            return ()
        key = bytes(raw)
        shared = self.by_bytes.get(key)
        if shared is None:
            try:
                shared = self.get(_loads(key))
            except _JSONDecodeError:  # not reachable: msgspec checked the bytes are JSON
                shared = ()
            if len(self.by_bytes) >= self._limit:
                self.by_bytes.clear()
            self.by_bytes[key] = shared
        return shared

    def get(self, raw: Any) -> tuple[str, ...]:
        if type(raw) is not dict or not raw:
            return ()
        flat = tuple(_flatten(raw.items()))
        try:
            shared = self._pool.get(flat)
            if shared is None:
                shared = tuple(map(_intern, flat))
                if len(self._pool) >= self._limit:
                    self._pool.clear()
                self._pool[shared] = shared
        except TypeError:  # not all strings (unhashable, or intern refused): keep the string pairs
            return _intern_labels(raw)
        return shared


def _label_map(labels: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(labels[::2], labels[1::2]))


class _Rejected(Exception):
    """An event the cache cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class Change:
    """One real change to the cache, as a subscriber sees it.

    ``type`` is ``"ADDED"``, ``"MODIFIED"`` or ``"DELETED"`` as the cache saw it (an agent's ADDED
    for an object already held is a MODIFIED here). For deletions ``object`` is the last known
    object when there is one.
    """

    account: str
    type: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    object: bytes | None


class SubscriptionOverflow(Exception):
    """A subscriber fell so far behind that its queue filled; its subscription has ended."""


class Subscription:
    """An async iterator of the cache's changes that pass the filters (empty filter: all).

    The queue is bounded so that a slow reader never holds ingest back nor grows without limit:
    when it fills, the queued changes are dropped and iteration raises ``SubscriptionOverflow``.
    The reader must then re-read the cache and subscribe again.
    """

    def __init__(
        self,
        cache: Cache,
        accounts: Collection[str],
        kinds: Collection[str],
        namespaces: Collection[str],
        max_queue: int,
    ) -> None:
        self._cache = cache
        self._accounts = frozenset(accounts)
        self._kinds = frozenset(k.lower() for k in kinds)
        self._namespaces = frozenset(namespaces)
        self._max_queue = max_queue
        self._queue: deque[Change] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._error: SubscriptionOverflow | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Unsubscribe; iteration stops (pending changes are dropped). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        self._cache._unsubscribe(self)
        self._wake()

    def _wants(self, account: str, kind: _Kind, namespace: str) -> bool:
        if self._accounts and account not in self._accounts:
            return False
        if self._kinds and kind.lower not in self._kinds and kind.label_lower not in self._kinds:
            return False
        return not self._namespaces or namespace in self._namespaces

    def _push(self, change: Change) -> None:
        if self._closed:
            return
        if len(self._queue) >= self._max_queue:
            self._error = SubscriptionOverflow(
                f"subscription ended: the reader fell more than {self._max_queue} changes behind; "
                "re-read the cache and subscribe again"
            )
            self.close()
            return
        self._queue.append(change)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> Subscription:
        return self

    async def batch(self, timeout: float) -> list[Change] | None:
        """Every change waiting now (at least one), ``[]`` when none came within ``timeout``
        seconds, or None once the subscription has ended.

        A watcher that writes what piled up in one go (one socket write per batch, not per change)
        keeps up with far more changes than one that takes them one by one; and the timeout is a
        timer on the loop, not ``asyncio.wait_for``'s task per change. Raises
        ``SubscriptionOverflow`` as iteration does.
        """
        while True:
            if self._error is not None:
                raise self._error
            if self._queue:
                out = list(self._queue)
                self._queue.clear()
                return out
            if self._closed:
                return None
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
            if not self._queue and not self._closed and self._error is None:
                return []

    async def __anext__(self) -> Change:
        while True:
            if self._error is not None:
                raise self._error
            if self._queue:
                return self._queue.popleft()
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(slots=True)
class BatchApplied:
    """What `Cache.apply_batch` did with a batch."""

    objects: int = 0  # objects' events (applied, or ignored as stale or unusable)
    markers: int = 0  # snapshot markers
    dropped: int = 0  # events of accounts not accepted


class Cache:
    """Every account's objects, fed by agents' event batches; see the module docstring."""

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}
        self._subs: tuple[Subscription, ...] = ()  # replaced, never mutated: safe to iterate while one ends
        self._objects = 0
        self._bytes = 0
        self._warned: set[tuple[str, str]] = set()
        self._label_sets = _LabelSets()
        # Namespaces and moniker values, one copy of each (see _upsert); only ever grows by what
        # agents send, bounded by those sets' sizes, and emptied when it is too large to help.
        self._strings: dict[str, str] = {}
        self.rejected = 0
        self.stale_ignored = 0  # events older than what the cache holds (see the module docstring)
        # (account, group, kind, namespace, name) -> waiters for that object (see wait_for)
        self._waiters: dict[tuple[str, str, str, str, str], set[_Waiter]] = {}

    # ---- ingest ----------------------------------------------------------------------------------

    def apply(self, account: str, events: Iterable[Any]) -> int:
        """Apply one batch of an agent's events (protobuf ``Event`` messages or alike) for ``account``;
        returns how many of them were snapshot markers (the others are objects' events).

        Never raises: an event that cannot be used is skipped and counted in ``rejected``.
        """
        rows = (
            ((e.type, account, e.group, e.version, e.kind, e.namespace, e.name, e.resource_version, 0, 0), e.object)
            for e in events
        )
        return self._apply(rows, None, None).markers

    def apply_batch(self, batch: Any, accepted: Collection[str], stamps: list[int]) -> BatchApplied:
        """Apply an agent's ``EventBatch``, whose events name their accounts: those of an account
        not in ``accepted`` are dropped (counted). The nonzero ``read_at_unix_ms`` of the events
        applied are appended to ``stamps``. The batch's events come as messages or packed
        (``PackedEvents``: an index read in one call, the objects sliced from one buffer), or as
        a packed batch read in place from its message (``PackedBatch``).

        Raises ValueError for a packed batch that cannot be read (nothing of it is applied).
        """
        rows: Iterable[tuple[tuple[Any, ...], bytes]]
        if type(batch) is PackedBatch:
            rows = self._packed_rows(batch.index, batch.data, batch.objects_start, batch.objects_end)
        elif batch.HasField("packed"):
            if len(batch.events):
                raise ValueError("a batch carries its events as messages or packed, not both")
            blob = batch.packed.objects
            rows = self._packed_rows(batch.packed.index, blob, 0, len(blob))
        else:
            rows = (
                (
                    (
                        e.type,
                        e.account,
                        e.group,
                        e.version,
                        e.kind,
                        e.namespace,
                        e.name,
                        e.resource_version,
                        e.read_at_unix_ms,
                        0,
                    ),
                    e.object,
                )
                for e in batch.events
            )
        return self._apply(rows, accepted, stamps)

    @staticmethod
    def _packed_rows(index: bytes, data: bytes, start: int, end: int) -> Iterable[tuple[tuple[Any, ...], bytes]]:
        """A packed batch's events as (row, object), the objects being data[start:end] one after
        the other. Raises ValueError when the index cannot be read or does not add up to them."""
        try:
            rows = decode_index(index)
        except msgspec.DecodeError as e:
            raise ValueError(f"its packed index cannot be read: {e}") from None
        sizes = list(map(_object_size, rows))
        if sum(sizes) != end - start or (sizes and min(sizes) < 0):
            raise ValueError(f"its objects are {end - start} bytes, not what its index says")
        bounds = list(accumulate(sizes, initial=start))
        # Each object sliced from the buffer, the iteration all in C.
        return zip(rows, map(data.__getitem__, map(slice, bounds[:-1], bounds[1:])))

    def _apply(
        self,
        rows: Iterable[tuple[tuple[Any, ...], bytes]],
        accepted: Collection[str] | None,
        stamps: list[int] | None,
    ) -> BatchApplied:
        """Events as (row, object), the row as a packed batch's index has it (type, account, group,
        version, kind, namespace, name, resource_version, read_at_unix_ms, object size): the one
        loop every event of every agent goes through."""
        objects = markers = dropped = 0
        if len(self._strings) > 1 << 16:  # a pool that only speeds things up (see __init__)
            self._strings.clear()
        acct: _Account | None = None
        last_group: str | None = None
        last_kind = ""
        kind: _Kind | None = None
        now = time.time()
        for (t, account, group, version, kind_name, namespace, name, rv, read_at, _), obj in rows:
            try:
                if acct is None or account != acct.name:
                    if accepted is not None and account not in accepted:
                        dropped += 1
                        continue
                    acct = self._accounts.get(account)
                    if acct is None:
                        acct = self._accounts[account] = _Account(account)
                    last_group = None
                if stamps is not None:
                    objects += 1  # markers are taken out at the end
                    if read_at:
                        stamps.append(read_at)
                if kind_name != last_kind or group != last_group:
                    found = acct.kinds.get((group, kind_name))
                    if found is None:
                        if not kind_name:
                            raise _Rejected("no kind")
                        found = acct.kinds[(group, kind_name)] = _Kind(group, kind_name)
                    kind, last_group, last_kind = found, group, kind_name
                    kind.last_event_at = now
                assert kind is not None
                if version and version != kind.version:
                    kind.version = version
                applied = True
                if t == _ADDED or t == _MODIFIED:
                    applied = self._upsert(acct, kind, namespace, name, rv, obj)
                elif t == _DELETED:
                    applied = self._delete(acct, kind, namespace, name, rv, obj)
                elif t == _BEGIN:
                    markers += 1
                    kind.gen += 1
                    kind.open[_intern(namespace)] = kind.gen
                elif t == _END:
                    markers += 1
                    self._end_snapshot(acct, kind, namespace, rv)
                else:
                    raise _Rejected(f"unknown event type {t}")
                if not applied:
                    self.stale_ignored += 1
                elif rv:
                    acct.rv = rv
            except _Rejected as e:
                self._reject(account, group, kind_name, str(e))
            except Exception as e:
                self._reject(account, group, kind_name, f"{type(e).__name__}: {e}")
        return BatchApplied(objects - markers if stamps is not None else 0, markers, dropped)

    def _upsert(self, acct: _Account, kind: _Kind, namespace: str, name: str, rv: str, obj: bytes) -> bool:
        """Returns False when the event was stale and ignored."""
        if not name:
            raise _Rejected("no name")
        nsd = kind.namespaces.get(namespace)
        old = nsd.get(name) if nsd is not None else None
        if old is not None and rv and old.rv == rv and old.obj == obj:
            # Seen again, unchanged (a resent snapshot): nothing to parse or tell. The bytes are
            # compared too (cheap next to parsing): a cluster rebuilt with fresh storage reuses
            # resourceVersions for other objects, and its object (another uid) must replace ours.
            old.gen = kind.gen
            return True
        try:
            meta = _decode_object(obj).metadata
        except msgspec.ValidationError as error:
            raise _Rejected(f"not a Kubernetes object ({error})") from None
        except msgspec.DecodeError as error:
            raise _Rejected(f"invalid JSON ({error})") from None
        if meta is None:
            raise _Rejected("not a Kubernetes object (no metadata)")
        uid = meta.uid
        uid = uid if type(uid) is str else ""
        if kind.open and ("" in kind.open or namespace in kind.open):
            # Part of a snapshot (a relist): the cluster's word, whatever the versions say. It may
            # come from a cluster restored from a backup, where versions went back for real.
            if uid and acct.deleted:
                acct.deleted.pop(uid, None)
        elif (
            uid
            and old is not None
            and rv.isdigit()
            and (held := old.rv).isdigit()
            and int(rv) < int(held)  # _older, inlined: this runs for every change of a held object
            and uid == _uid(old.obj)
        ):
            return False  # an older version of the object held
        elif acct.deleted and uid and uid in acct.deleted:
            if acct.deleted_since(uid, rv):
                return False  # a version from before the object was deleted: it stays deleted
            del acct.deleted[uid]  # newer than its deletion: only a restored cluster does that
        raw = meta.labels
        if raw:
            labels = self._label_sets.by_bytes.get(bytes(raw))  # from_json's common case, inlined
            if labels is None:
                labels = self._label_sets.from_json(raw)
        else:
            labels = ()
        annotations = meta.annotations
        app = cluster = None
        if annotations is not None:
            # One shared copy of each value, from a pool of the cache's own: interning each in the
            # interpreter's table (every identifier of the process) was 10% of ingest.
            strings = self._strings
            app = annotations.application
            app = strings.setdefault(app, app) if type(app) is str else None
            cluster = annotations.cluster
            cluster = strings.setdefault(cluster, cluster) if type(cluster) is str else None
        if old is None:
            namespace = self._strings.setdefault(namespace, namespace)
            if nsd is None:
                nsd = kind.namespaces[namespace] = {}
            e = _Entry(namespace, name, rv, obj, labels, app, cluster, kind.gen)
            nsd[name] = e
            kind.add_to_index(e)
            kind.count += 1
            self._objects += 1
            self._bytes += len(obj)
            change = "ADDED"
        else:
            e = old
            self._bytes += len(obj) - len(e.obj)
            if e.labels != labels or e.app != app or e.cluster != cluster:
                kind.relabel(e, labels, app, cluster)
            e.rv = rv
            e.obj = obj
            e.gen = kind.gen
            change = "MODIFIED"
        if self._subs:
            self._emit(acct.name, kind, change, e.namespace, name, rv, obj)
        if self._waiters:
            self._wake(acct.name, kind, e.namespace, name)
        return True

    def _delete(self, acct: _Account, kind: _Kind, namespace: str, name: str, rv: str, obj: bytes) -> bool:
        """Returns False when the event was stale and ignored."""
        nsd = kind.namespaces.get(namespace)
        e = nsd.get(name) if nsd is not None else None
        uid = _uid(obj) if obj else ""
        if e is None:
            acct.remember_deleted(uid, rv)
            return True  # already gone (or never seen): nothing changed
        if uid and _older(rv, e.rv):
            # Older than the copy held: the deletion of an earlier incarnation (another uid) or a
            # stale event of this one. Either way the object held is newer and stays. (A DELETED
            # without its object cannot be matched to what is held: applied as before.)
            if uid != _uid(e.obj):
                acct.remember_deleted(uid, rv)
            return False
        acct.remember_deleted(uid or _uid(e.obj), rv or e.rv)
        del nsd[name]  # type: ignore[union-attr]
        if not nsd:
            del kind.namespaces[namespace]
        self._forget(kind, e)
        if self._subs:
            self._emit(acct.name, kind, "DELETED", e.namespace, name, rv or e.rv, obj or e.obj)
        if self._waiters:
            self._wake(acct.name, kind, e.namespace, name, deleted_rv=rv or e.rv)
        return True

    def _end_snapshot(self, acct: _Account, kind: _Kind, scope: str, rv: str = "") -> None:
        began = kind.open.pop(scope, None)
        if began is None:
            log.debug("account %s: SNAPSHOT_END for %s scope %r without a BEGIN; ignored", acct.name, kind.label, scope)
            return
        namespaces = [scope] if scope else list(kind.namespaces)
        for ns in namespaces:
            nsd = kind.namespaces.get(ns)
            if nsd is None:
                continue
            stale = [e for e in nsd.values() if e.gen < began]
            for e in stale:
                del nsd[e.name]
                # Gone by the snapshot's version: a lagging event of it must not bring it back.
                acct.remember_deleted(_uid(e.obj), rv)
                self._forget(kind, e)
                if self._subs:
                    self._emit(acct.name, kind, "DELETED", e.namespace, e.name, e.rv, e.obj)
                if self._waiters:
                    self._wake(acct.name, kind, e.namespace, e.name)
            if not nsd:
                del kind.namespaces[ns]

    def _forget(self, kind: _Kind, e: _Entry) -> None:
        kind.remove_from_index(e)
        kind.count -= 1
        self._objects -= 1
        self._bytes -= len(e.obj)

    def _reject(self, account: str, group: Any, kind: Any, why: str) -> None:
        self.rejected += 1
        label = f"{kind}.{group}" if group else str(kind)
        if (account, label) not in self._warned:
            self._warned.add((account, label))
            log.warning(
                "account %s: skipped a %s event the cache cannot use (%s); later ones are only counted",
                account,
                label,
                why,
            )

    def drop_account(self, account: str) -> None:
        """Forget all of ``account``'s objects; subscribers see each one DELETED."""
        acct = self._accounts.pop(account, None)
        if acct is None:
            return
        for kind in acct.kinds.values():
            for e in kind.entries():
                self._objects -= 1
                self._bytes -= len(e.obj)
                if self._subs:
                    self._emit(account, kind, "DELETED", e.namespace, e.name, e.rv, e.obj)
        self._warned = {w for w in self._warned if w[0] != account}
        self._wake_account(account)

    def retain(
        self,
        account: str,
        kinds: Collection[str],
        namespaces: Collection[str] = (),
        omit_namespaces: Collection[str] = (),
    ) -> int:
        """Drop what an agent no longer follows: kinds not in ``kinds`` (``Kind`` or ``Kind.group``
        labels), namespaced objects outside ``namespaces`` when it is given, and those inside
        ``omit_namespaces``.

        No snapshot will ever come again for a scope the agent stopped following (its
        configuration changed, a kind became forbidden, a CRD was deleted), so without this its
        objects would stay forever. Returns how many objects went.
        """
        acct = self._accounts.get(account)
        if acct is None:
            return 0
        wanted = {k.lower() for k in kinds}
        gone = 0
        for key, kind in list(acct.kinds.items()):
            keep_kind = kind.label_lower in wanted
            for ns in list(kind.namespaces):
                if keep_kind and (not ns or ((not namespaces or ns in namespaces) and ns not in omit_namespaces)):
                    continue
                nsd = kind.namespaces.pop(ns)
                for e in nsd.values():
                    self._forget(kind, e)
                    gone += 1
                    if self._subs:
                        self._emit(account, kind, "DELETED", e.namespace, e.name, e.rv, e.obj)
            if not keep_kind:
                del acct.kinds[key]
        if gone:
            self._wake_account(account)
        return gone

    def close_subscriptions(self) -> None:
        """End every subscription (the hub is stopping): their readers see the end of the stream."""
        for sub in self._subs:
            sub.close()

    # ---- reads -----------------------------------------------------------------------------------

    def accounts(self) -> list[str]:
        return sorted(self._accounts)

    def counts(self, account: str) -> dict[str, int]:
        """Objects per kind label (``Deployment.apps``, ``Pod`` for the core group)."""
        acct = self._accounts.get(account)
        return {k.label: k.count for k in acct.kinds.values()} if acct is not None else {}

    def last_events(self, account: str) -> dict[str, float]:
        """When the newest event of each kind reached the cache (time.time()), by kind label."""
        acct = self._accounts.get(account)
        return {k.label: k.last_event_at for k in acct.kinds.values()} if acct is not None else {}

    def resource_version(self, account: str) -> str:
        """The last resourceVersion applied for ``account`` ("" if none)."""
        acct = self._accounts.get(account)
        return acct.rv if acct is not None else ""

    def stats(self) -> dict[str, int]:
        """Sizes for metrics: accounts, objects, bytes of object JSON held, and how many events
        were ignored for being older than what the cache holds."""
        return {
            "accounts": len(self._accounts),
            "objects": self._objects,
            "bytes": self._bytes,
            "staleEventsIgnored": self.stale_ignored,
        }

    def get(self, account: str, kind: str, namespace: str, name: str) -> bytes | None:
        """One object's JSON; ``kind`` as in ``query`` (the first group that has it wins)."""
        acct = self._accounts.get(account)
        if acct is None:
            return None
        for k in acct.find(kind):
            nsd = k.namespaces.get(namespace)
            e = nsd.get(name) if nsd is not None else None
            if e is not None:
                return e.obj
        return None

    def query(
        self,
        account: str,
        *,
        kind: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        label_selector: LabelSelector | None = None,
        application: str | None = None,
        cluster: str | None = None,
    ) -> list[bytes]:
        """The JSON of ``account``'s objects that pass every given filter, by kind then namespace/name.

        ``kind`` is case-insensitive ``Kind`` or ``Kind.group``; a bare Kind served by several
        groups (Event) matches all of them. ``application`` and ``cluster`` are the Spinnaker
        moniker annotations. Candidates come from the narrowest index the filters allow, so an
        equality selector on a label does not scan the account.
        """
        acct = self._accounts.get(account)
        if acct is None:
            return []
        if label_selector is not None:
            if label_selector.matches_nothing:
                return []
            if label_selector.empty:
                label_selector = None
        out: list[bytes] = []
        if name is None and label_selector is None and application is None and cluster is None:
            # Whole kinds, or a namespace of them (what Clouddriver asks most): no candidate to
            # check, only the objects' bytes in namespace/name order.
            for k in sorted(acct.find(kind), key=lambda k: k.label):
                spaces = k.namespaces
                if namespace is not None:
                    nsd = spaces.get(namespace)
                    if nsd:
                        out += [nsd[n].obj for n in sorted(nsd)]
                    continue
                for ns in sorted(spaces):
                    nsd = spaces[ns]
                    out += [nsd[n].obj for n in sorted(nsd)]
            return out
        for k in sorted(acct.find(kind), key=lambda k: k.label):
            found = [
                e
                for e in dict.fromkeys(_candidates(k, namespace, name, label_selector, application, cluster))
                if (namespace is None or e.namespace == namespace)
                and (name is None or e.name == name)
                and (application is None or e.app == application)
                and (cluster is None or e.cluster == cluster)
                and (label_selector is None or label_selector.matches(_label_map(e.labels)))
                and k.holds(e)
            ]
            found.sort(key=lambda e: (e.namespace, e.name))
            out.extend(e.obj for e in found)
        return out

    # ---- read-your-writes --------------------------------------------------------------------------

    def reached(self, account: str, expectation: Any, deleted_at: str | None = None) -> bool:
        """Whether the cache shows what an operation produced (a protobuf ``CacheExpectation`` or
        alike): the object at that resourceVersion or a later one, or, when it was deleted, no
        object (or one with another uid: recreated since). ``deleted_at`` is the version of a
        deletion seen since waiting began: an object that changed and went after the operation
        also counts as reached.

        Versions are compared as numbers when both are (etcd revisions, which every API server
        known uses), otherwise only for equality: Kubernetes calls them opaque.
        """
        acct = self._accounts.get(account)
        kind = acct.kinds.get((expectation.group, expectation.kind)) if acct is not None else None
        nsd = kind.namespaces.get(expectation.namespace) if kind is not None else None
        e = nsd.get(expectation.name) if nsd is not None else None
        if expectation.deleted:
            # Gone, or replaced by a new object of the same name (a recreated pod).
            return e is None or (bool(expectation.uid) and _uid(e.obj) != expectation.uid)
        if e is not None and version_at_least(e.rv, expectation.resource_version):
            return True
        return deleted_at is not None and version_at_least(deleted_at, expectation.resource_version)

    async def wait_for(self, account: str, expectations: Iterable[Any], timeout: float) -> list[Any]:
        """Wait until the cache reaches every expectation, or ``timeout`` seconds; returns those
        it did not reach (none: the cache reflects the operation)."""
        pending = [x for x in expectations if not self.reached(account, x)]
        if not pending or timeout <= 0:
            return pending
        waiter = _Waiter()
        keys = {(account, x.group, x.kind, x.namespace, x.name) for x in pending}
        for key in keys:
            self._waiters.setdefault(key, set()).add(waiter)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while pending:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(waiter.event.wait(), remaining)
                except TimeoutError:
                    pass
                waiter.event.clear()
                pending = [
                    x
                    for x in pending
                    if not self.reached(account, x, waiter.deleted_at.get((x.group, x.kind, x.namespace, x.name)))
                ]
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]
        return pending

    def _wake(self, account: str, kind: _Kind, namespace: str, name: str, deleted_rv: str | None = None) -> None:
        waiters = self._waiters.get((account, kind.group, kind.kind, namespace, name))
        if waiters:
            for w in waiters:
                if deleted_rv is not None:
                    w.deleted_at[(kind.group, kind.kind, namespace, name)] = deleted_rv
                w.event.set()

    def _wake_account(self, account: str) -> None:
        for key, waiters in self._waiters.items():
            if key[0] == account:
                for w in waiters:
                    w.event.set()

    # ---- subscriptions ---------------------------------------------------------------------------

    def subscribe(
        self,
        *,
        accounts: Collection[str] = (),
        kinds: Collection[str] = (),
        namespaces: Collection[str] = (),
        max_queue: int = 10000,
    ) -> Subscription:
        """Follow the changes of the given accounts, kinds and namespaces (empty: all)."""
        sub = Subscription(self, accounts, kinds, namespaces, max_queue)
        self._subs = (*self._subs, sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subs = tuple(s for s in self._subs if s is not sub)

    def _emit(
        self, account: str, kind: _Kind, type_: str, namespace: str, name: str, rv: str, obj: bytes | None
    ) -> None:
        change: Change | None = None
        for sub in self._subs:
            if sub._wants(account, kind, namespace):
                if change is None:
                    change = Change(
                        account, type_, kind.group, kind.version, kind.kind, namespace, name, rv, obj or None
                    )
                sub._push(change)


class _Waiter:
    """One wait_for call: woken by any change to an object it waits for."""

    __slots__ = ("event", "deleted_at")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.deleted_at: dict[tuple[str, str, str, str], str] = {}


def _uid(obj: bytes) -> str:
    try:
        meta = _decode_uid_object(obj).metadata
    except msgspec.DecodeError:
        return ""
    uid = meta.uid if meta is not None else None
    return uid if type(uid) is str else ""


def _older(rv: str, held: str) -> bool:
    """Whether version ``rv`` is before ``held``; only decimal versions can be ordered."""
    return rv.isdigit() and held.isdigit() and not version_at_least(rv, held)


def version_at_least(have: str, want: str) -> bool:
    """Whether resourceVersion ``have`` is ``want`` or later (see Cache.reached)."""
    if have == want or not want:
        return bool(have) or not want
    if have.isdigit() and want.isdigit():
        return int(have) >= int(want)
    return False


def _candidates(
    kind: _Kind,
    namespace: str | None,
    name: str | None,
    selector: LabelSelector | None,
    application: str | None,
    cluster: str | None,
) -> Iterator[_Entry]:
    """Entries of ``kind`` that may pass the filters, from the smallest source the filters name.

    Every candidate is still checked against all the filters by the caller, and whether it is
    still held (index lists are compacted lazily, see _Members).
    """
    if name is not None:
        nsds = [kind.namespaces.get(namespace)] if namespace is not None else kind.namespaces.values()
        for nsd in nsds:
            e = nsd.get(name) if nsd is not None else None
            if e is not None:
                yield e
        return
    # Each option is a list of slots whose union holds every match.
    options: list[list[Any]] = []
    if application is not None:
        options.append([kind.index.get(_APP, {}).get(application)])
    if cluster is not None:
        options.append([kind.index.get(_CLUSTER, {}).get(cluster)])
    if namespace is not None:
        options.append([kind.namespaces.get(namespace, {}).values()])
    if selector is not None:
        for r in selector.requirements:
            values = kind.index.get(r.key, {})
            if r.operator in (EQUALS, DOUBLE_EQUALS, IN):
                options.append([values.get(v) for v in r.values])
            elif r.operator in (EXISTS, GREATER_THAN, LESS_THAN):
                options.append(list(values.values()))
    if not options:
        yield from kind.entries()
        return
    best = min(options, key=lambda slots: sum(_slot_size(s) for s in slots))
    for slot in best:
        yield from _slot_entries(slot)
