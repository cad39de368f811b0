"""Which kinds a cluster serves, and which of them an identity may list and watch."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .client import KubeClient
from .concurrency import all_or_first_error
from .errors import APIError, KubeError

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


async def discover(client: KubeClient, concurrency: int = 8) -> Discovery:
    """Every listable and watchable kind, each at the first version of its group that serves it.

    As client-go's ServerPreferredResources: the preferred version of each group first, then the
    others, so a kind served only at an older version (CronJob in batch/v1beta1 on 1.20, or one
    CRD of a group whose other CRDs have moved on) is found too, and a kind served at several
    versions is followed once, at the preferred one.
    """
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


async def may(client: KubeClient, verb: str, kind: KindInfo, namespace: str | None) -> tuple[bool, str]:
    """A SelfSubjectAccessReview: may this identity do `verb` on the kind (in the namespace)?"""
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


async def readable(client: KubeClient, kind: KindInfo, namespace: str | None) -> tuple[bool, str]:
    """Both list and watch are needed to follow a kind."""
    for verb in ("list", "watch"):
        ok, why = await may(client, verb, kind, namespace)
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


async def readable_in(client: KubeClient, kinds: list[KindInfo], namespace: str) -> set[KindInfo]:
    """Which of the kinds the identity may list and watch in the namespace.

    One SelfSubjectRulesReview answers for every kind at once; where the review says its answer
    is incomplete (an authorizer that cannot list rules, such as a webhook), each kind is asked
    with access reviews instead.
    """
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
    "discover",
    "follow_once",
    "may",
    "readable",
    "readable_in",
    "select_kinds",
]
