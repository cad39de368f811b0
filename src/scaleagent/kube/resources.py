"""Which REST resource a manifest or a "kind name" reference means, in one cluster.

Operations name objects two ways: a manifest gives `apiVersion` and `kind` (the exact version
matters: an `autoscaling/v2` HPA is not at the preferred version's path), and Clouddriver's
references give only a kind, `deployment` or `deployment.apps`. Both are resolved against the
cluster's own discovery documents, which are read when first needed and read again once when a
name is not found, so that a CRD created a moment ago (by the same deploy, say) is found.
The watch engine's discovery (discovery.py) is not reused: it keeps only listable kinds at
preferred versions, while an operation may target any version of anything the server serves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .client import KubeClient
from .discovery import KindInfo
from .errors import APIError, UnknownKind

__all__ = ["ResourceMap", "UnknownKind"]


def _resources(doc: Any, group: str, version: str) -> list[KindInfo]:
    out = []
    for r in (doc or {}).get("resources") or []:
        name = r.get("name", "")
        if name and "/" not in name and r.get("kind"):
            out.append(KindInfo(group, version, r["kind"], name, bool(r.get("namespaced"))))
    return out


class ResourceMap:
    """One cluster's served kinds, read lazily; safe to share between concurrent operations."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._versions: dict[str, list[KindInfo]] = {}  # "apps/v1" -> kinds
        self._preferred: list[KindInfo] | None = None
        self._lock = asyncio.Lock()

    async def _group_version(self, api_version: str, refresh: bool) -> list[KindInfo] | None:
        if not refresh and api_version in self._versions:
            return self._versions[api_version]
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        try:
            doc = await self._client.get(path)
        except APIError as e:
            if e.status == 404:
                return None
            raise
        kinds = self._versions[api_version] = _resources(doc, group, version)
        return kinds

    async def for_manifest(self, api_version: Any, kind: Any) -> KindInfo:
        """The resource a manifest's `apiVersion` and `kind` name, at exactly that version."""
        if not isinstance(api_version, str) or not api_version or api_version.count("/") > 1:
            raise UnknownKind(f'apiVersion {api_version!r} is not valid (expected "v1" or "group/version")')
        if not isinstance(kind, str) or not kind:
            raise UnknownKind("kind is missing")
        for refresh in (False, True):
            kinds = await self._group_version(api_version, refresh)
            if kinds is None:
                if refresh:
                    raise UnknownKind(f"apiVersion {api_version!r} is not served by this cluster")
                continue
            for k in kinds:
                if k.kind == kind:
                    return k
        close = [k.kind for k in self._versions.get(api_version) or [] if k.kind.lower() == kind.lower()]
        hint = f" (did you mean {close[0]!r}? kinds are case-sensitive)" if close else ""
        raise UnknownKind(f"kind {kind!r} is not served in {api_version} by this cluster{hint}")

    async def _all_preferred(self, refresh: bool) -> list[KindInfo]:
        async with self._lock:
            if self._preferred is not None and not refresh:
                return self._preferred
            core = await self._client.get("/api")
            groups = await self._client.get("/apis")
            found: list[KindInfo] = []
            for v in ((core or {}).get("versions") or ["v1"])[:1]:
                found += await self._group_version(v, refresh) or []
            for g in (groups or {}).get("groups") or []:
                preferred = (g.get("preferredVersion") or (g.get("versions") or [{}])[0]).get("groupVersion")
                if preferred:
                    found += await self._group_version(preferred, refresh) or []
            self._preferred = found
            return found

    async def for_reference(self, ref: str) -> KindInfo:
        """The resource a Clouddriver-style kind reference names: `deployment`, `Deployment.apps`,
        `deployments` or `replicaSet` (case-insensitive). The core group wins a bare name that
        several groups serve (`event`), as with kubectl."""
        name, _, group = ref.strip().partition(".")
        if not name:
            raise UnknownKind(f"kind {ref!r} is not valid")
        lname, lgroup = name.lower(), group.lower()
        for refresh in (False, True):
            matches = [
                k
                for k in await self._all_preferred(refresh)
                if lname in (k.kind.lower(), k.plural.lower()) and (not group or k.group.lower() == lgroup)
            ]
            if matches:
                return sorted(matches, key=lambda k: (k.group != "", k.group))[0]
        raise UnknownKind(f"kind {ref!r} is not served by this cluster")
