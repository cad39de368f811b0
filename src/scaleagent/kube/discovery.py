"""Which kinds a cluster serves, and which of them an identity may list and watch."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Iterable

from .client import APIError, KubeClient, KubeError
from .concurrency import all_or_first_error

LIST_WATCH = frozenset({"list", "watch"})


@dataclass(frozen=True, order=True)
class KindInfo:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

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
        out.append(KindInfo(group, version, r.get("kind", ""), name, bool(r.get("namespaced"))))
    return out


async def discover(client: KubeClient, concurrency: int = 8) -> Discovery:
    """Every listable and watchable kind, at its group's preferred version."""
    core = await client.get("/api")
    groups = await client.get("/apis")
    wanted: list[tuple[str, str, str]] = [("", v, f"/api/{v}") for v in (core.get("versions") or ["v1"])[:1]]
    for g in groups.get("groups") or []:
        preferred = (g.get("preferredVersion") or (g.get("versions") or [{}])[0]).get("version")
        if g.get("name") and preferred:
            wanted.append((g["name"], preferred, f"/apis/{g['name']}/{preferred}"))
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
    return Discovery(sorted(k for ks in results for k in ks), failed)


def _matches(kind: KindInfo, entry: str) -> bool:
    name, _, group = entry.strip().partition(".")
    if name.lower() != kind.kind.lower():
        return False
    return not group or group.lower() == kind.group.lower()


def select_kinds(
    kinds: Iterable[KindInfo], include: Iterable[str] = (), exclude: Iterable[str] = (), only_namespaced: bool = False,
) -> tuple[list[KindInfo], list[str]]:
    """Apply `kinds`/`omitKinds`/`onlyNamespacedResources`; also return include entries that matched nothing."""
    kinds = list(kinds)
    include, exclude = list(include), list(exclude)
    selected = [k for k in kinds
                if (not include or any(_matches(k, e) for e in include))
                and not any(_matches(k, e) for e in exclude)
                and (k.namespaced or not only_namespaced)]
    unmatched = [e for e in include if not any(_matches(k, e) for k in kinds)]
    return selected, unmatched


async def may(client: KubeClient, verb: str, kind: KindInfo, namespace: str | None) -> tuple[bool, str]:
    """A SelfSubjectAccessReview: may this identity do `verb` on the kind (in the namespace)?"""
    attrs = {"verb": verb, "group": kind.group, "resource": kind.plural}
    if namespace:
        attrs["namespace"] = namespace
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attrs}}
    try:
        out = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    except APIError as e:
        if e.status in (403, 404):  # the review API itself is off limits: find out by listing instead
            return True, ""
        raise
    status = (out or {}).get("status") or {}
    where = f" in namespace {namespace}" if namespace else " cluster-wide"
    return bool(status.get("allowed")), "" if status.get("allowed") else \
        f"not allowed to {verb} {kind.plural}{'.' + kind.group if kind.group else ''}{where}" + \
        (f" ({status['reason']})" if status.get("reason") else "")


async def readable(client: KubeClient, kind: KindInfo, namespace: str | None) -> tuple[bool, str]:
    """Both list and watch are needed to follow a kind."""
    for verb in ("list", "watch"):
        ok, why = await may(client, verb, kind, namespace)
        if not ok:
            return False, why
    return True, ""


__all__ = ["Discovery", "KindInfo", "KubeError", "discover", "may", "readable", "select_kinds"]
