"""Which kinds a cluster serves, and which of them an identity may list and watch."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .client import KubeClient
from .concurrency import all_or_first_error
from .errors import APIError, KubeError

T = TypeVar("T")
LIST_WATCH = frozenset({"list", "watch"})


@dataclass(frozen=True, order=True)
class KindInfo:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    # The server's `storageVersionHash`: equal for resources that share one storage (Event in core
    # and in events.k8s.io, say). Not part of the identity of a kind.
    storage: str = field(default="", compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`Kind.group` (just `Kind` for the core group): how users name kinds in filters."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def path(self, namespace: str | None = None) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"


@dataclass
class Discovery:
    kinds: list[KindInfo]
    # Group versions that could not be read (an aggregated API down, say): reported, not fatal.
    failed: dict[str, str]


def _kinds(doc: dict, group: str, version: str) -> list[KindInfo]:
    out = []
    for r in doc.get("resources") or []:
        name = r.get("name", "")
        if "/" in name or not LIST_WATCH <= set(r.get("verbs") or ()):
            continue
        out.append(
            KindInfo(
                group,
                version,
                r.get("kind", ""),
                name,
                bool(r.get("namespaced")),
                str(r.get("storageVersionHash") or ""),
            )
        )
    return out


def _group_versions(group: dict) -> list[str]:
    """A group's versions, the preferred one first and then in the server's order (its priority)."""
    versions = [v.get("version") for v in group.get("versions") or [] if v.get("version")]
    preferred = (group.get("preferredVersion") or {}).get("version")
    if preferred:
        versions = [preferred] + [v for v in versions if v != preferred]
    return versions


async def discover(client: KubeClient, concurrency: int = 8, shared: SharedAnswers | None = None) -> Discovery:
    """Every listable and watchable kind, each at the first version of its group that serves it.

    As client-go's ServerPreferredResources: the preferred version of each group first, then the
    others, so a kind served only at an older version (CronJob in batch/v1beta1 on 1.20, or one
    CRD of a group whose other CRDs have moved on) is found too, and a kind served at several
    versions is followed once, at the preferred one. With `shared`, accounts asking the same
    server as the same identity share one discovery.
    """
    if shared is not None:
        who = await _asker(client)
        key = None if who is None else ("discover", who)
        found = await shared.get(key, lambda: discover(client, concurrency))
        return Discovery(list(found.kinds), dict(found.failed))  # each account its own, to keep
    core = await client.get("/api")
    groups = await client.get("/apis")
    wanted: list[tuple[str, str, str]] = [("", v, f"/api/{v}") for v in (core.get("versions") or ["v1"])[:1]]
    for g in groups.get("groups") or []:
        if g.get("name"):
            wanted += [(g["name"], v, f"/apis/{g['name']}/{v}") for v in _group_versions(g)]
    limit = asyncio.Semaphore(concurrency)
    failed: dict[str, str] = {}

    async def fetch(group: str, version: str, path: str) -> list[KindInfo]:
        async with limit:
            try:
                return _kinds(await client.get(path), group, version)
            except APIError as e:
                failed[path.removeprefix("/apis/").removeprefix("/api/")] = str(e)
                return []

    results = await all_or_first_error(fetch(*w) for w in wanted)
    seen: set[tuple[str, str]] = set()
    kinds: list[KindInfo] = []
    for found in results:  # in the order asked: within a group, the preferred version first
        for k in found:
            if (k.group, k.plural) not in seen:
                seen.add((k.group, k.plural))
                kinds.append(k)
    return Discovery(sorted(kinds), failed)


class SharedAnswers:
    """Discovery and access-review answers shared by accounts asking the same server as the same
    identity: a hundred accounts of one cluster activated together ask once, not a hundred times.

    An answer being computed is shared with whoever asks meanwhile; a finished one is reused for
    `ttl` seconds (rights and CRDs that change are seen at the next discovery after that). A
    failure is not kept: each asker gets it, and the next question asks the server again. Bounded
    by the distinct questions of the last `ttl` seconds; older ones are dropped as new ones come.
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._answers: dict[Hashable, tuple[float, asyncio.Future[Any]]] = {}
        self.asked = 0  # questions that went to a server (the others were shared)

    async def get(self, key: Hashable | None, ask: Callable[[], Awaitable[T]]) -> T:
        """`ask()`'s answer, or the one a peer got (or is getting) for the same key. key None: never shared."""
        if key is None or self.ttl <= 0:
            self.asked += 1
            return await ask()
        now = time.monotonic()
        held = self._answers.get(key)
        if held is None or (held[1].done() and (now - held[0] > self.ttl or _failed(held[1]))):
            self._prune(now)
            self.asked += 1
            future: asyncio.Future[Any] = asyncio.ensure_future(ask())
            future.add_done_callback(_retrieve)
            self._answers[key] = (now, future)
            # shield: one asker cancelled (its account stopped) does not cancel the others' answer
            return await asyncio.shield(future)
        try:
            return await asyncio.shield(held[1])
        except Exception:
            # The peer's request failed: maybe its own connection (its account stopped and closed
            # it). Ask on ours rather than take another account's failure for this one's.
            self.asked += 1
            return await ask()

    def _prune(self, now: float) -> None:
        for key in [k for k, (at, f) in self._answers.items() if f.done() and now - at > self.ttl]:
            del self._answers[key]


def _failed(future: asyncio.Future[Any]) -> bool:
    return future.cancelled() or future.exception() is not None


async def _asker(client: KubeClient) -> tuple[str, str] | None:
    """Who asks, as SharedAnswers keys it: the credentials' identity and current token; None when
    the credentials do not say (then nothing is shared)."""
    credentials = getattr(client, "credentials", None)
    identity = getattr(credentials, "identity", "")
    if not identity or credentials is None:
        return None
    return identity, await credentials.authorization() or ""


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failure as seen: when no one is left to await it, asyncio would log it as lost."""
    if not future.cancelled():
        future.exception()


# Resources that share one storage, for servers that do not publish storageVersionHash.
_COHABITING = {
    ("events.k8s.io", "events"): "core/events",
    ("", "events"): "core/events",
    ("extensions", "ingresses"): "networking/ingresses",
    ("networking.k8s.io", "ingresses"): "networking/ingresses",
}
_STABILITY = re.compile(r"^v\d+(?:(alpha|beta)\d+)?$")


def _preference(kind: KindInfo) -> tuple[int, int, str]:
    """Which of several groups serving the same objects to follow: the core group, then the most
    stable version (GA before beta before alpha: networking.k8s.io/v1 Ingress before the
    extensions/v1beta1 one), then by group name so the choice is the same every time."""
    level = _STABILITY.match(kind.version)
    stability = 0 if level and not level.group(1) else 1 if level and level.group(1) == "beta" else 2
    return (0 if kind.group == "" else 1, stability, kind.group)


def follow_once(kinds: Iterable[KindInfo]) -> tuple[list[KindInfo], dict[str, str]]:
    """Drop kinds whose objects another kind in the list already delivers (same storage).

    Returns the kinds to follow and, for each dropped one, the qualified name of the one kept:
    following both would cache every Event (or Ingress) twice.
    """
    kinds = list(kinds)
    by_storage: dict[str, list[KindInfo]] = {}
    for k in kinds:
        storage = _COHABITING.get((k.group, k.plural)) or (f"hash:{k.storage}" if k.storage else "")
        if storage:
            by_storage.setdefault(storage, []).append(k)
    dropped: dict[KindInfo, KindInfo] = {}
    for same in by_storage.values():
        if len(same) > 1:
            keep = min(same, key=_preference)
            dropped.update({k: keep for k in same if k is not keep})
    return [k for k in kinds if k not in dropped], {k.qualified: v.qualified for k, v in dropped.items()}


def _matches(kind: KindInfo, entry: str) -> bool:
    name, _, group = entry.strip().partition(".")
    if name.lower() != kind.kind.lower():
        return False
    return not group or group.lower() == kind.group.lower()


def select_kinds(
    kinds: Iterable[KindInfo],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    only_namespaced: bool = False,
) -> tuple[list[KindInfo], list[str]]:
    """Apply `kinds`/`omitKinds`/`onlyNamespacedResources`; also return include entries that matched nothing."""
    kinds = list(kinds)
    include, exclude = list(include), list(exclude)
    selected = [
        k
        for k in kinds
        if (not include or any(_matches(k, e) for e in include))
        and not any(_matches(k, e) for e in exclude)
        and (k.namespaced or not only_namespaced)
    ]
    unmatched = [e for e in include if not any(_matches(k, e) for k in kinds)]
    return selected, unmatched


async def may(
    client: KubeClient, verb: str, kind: KindInfo, namespace: str | None, shared: SharedAnswers | None = None
) -> tuple[bool, str]:
    """A SelfSubjectAccessReview: may this identity do `verb` on the kind (in the namespace)?
    With `shared`, one review answers every account asking the same as the same identity."""
    if shared is not None:
        who = await _asker(client)
        key = None if who is None else ("may", who, verb, kind.group, kind.plural, namespace)
        return await shared.get(key, lambda: may(client, verb, kind, namespace))
    attrs = {"verb": verb, "group": kind.group, "resource": kind.plural}
    if namespace:
        attrs["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    try:
        out = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    except APIError as e:
        if e.status in (403, 404):  # the review API itself is off limits: find out by listing instead
            return True, ""
        raise
    status = (out or {}).get("status") or {}
    where = f" in namespace {namespace}" if namespace else " cluster-wide"
    return bool(status.get("allowed")), "" if status.get(
        "allowed"
    ) else f"not allowed to {verb} {kind.plural}{'.' + kind.group if kind.group else ''}{where}" + (
        f" ({status['reason']})" if status.get("reason") else ""
    )


async def readable(
    client: KubeClient, kind: KindInfo, namespace: str | None, shared: SharedAnswers | None = None
) -> tuple[bool, str]:
    """Both list and watch are needed to follow a kind. Both are asked at once (one round trip of
    latency, not two); a denied list is the reason given when both are denied."""
    answers = await all_or_first_error(may(client, verb, kind, namespace, shared) for verb in ("list", "watch"))
    for ok, why in answers:
        if not ok:
            return False, why
    return True, ""


def _rule_allows(rule: dict, verb: str, kind: KindInfo) -> bool:
    def has(values: object, wanted: str) -> bool:
        return isinstance(values, list) and (wanted in values or "*" in values)

    return (
        has(rule.get("verbs"), verb)
        and has(rule.get("apiGroups"), kind.group)
        and has(rule.get("resources"), kind.plural)
        and not rule.get("resourceNames")
    )


async def readable_in(
    client: KubeClient, kinds: list[KindInfo], namespace: str, shared: SharedAnswers | None = None
) -> set[KindInfo]:
    """Which of the kinds the identity may list and watch in the namespace.

    One SelfSubjectRulesReview answers for every kind at once; where the review says its answer
    is incomplete (an authorizer that cannot list rules, such as a webhook), each kind is asked
    with access reviews instead. With `shared`, accounts asking the same as the same identity
    share one answer.
    """
    if shared is not None:
        who = await _asker(client)
        key = None if who is None else ("rules", who, namespace, frozenset(kinds))
        return set(await shared.get(key, lambda: readable_in(client, kinds, namespace)))
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    try:
        out = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body=review)
        status = (out or {}).get("status") or {}
    except APIError as e:
        if e.status not in (403, 404):
            raise
        status = {"incomplete": True}
    rules = [r for r in status.get("resourceRules") or [] if isinstance(r, dict)]
    allowed = {k for k in kinds if all(any(_rule_allows(r, v, k) for r in rules) for v in LIST_WATCH)}
    if status.get("incomplete"):
        for k in kinds:
            if k not in allowed and (await readable(client, k, namespace))[0]:
                allowed.add(k)
    return allowed


__all__ = [
    "Discovery",
    "KindInfo",
    "KubeError",
    "SharedAnswers",
    "discover",
    "follow_once",
    "may",
    "readable",
    "readable_in",
    "select_kinds",
]
