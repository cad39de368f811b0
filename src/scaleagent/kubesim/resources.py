"""The kinds a simulated cluster serves, and the discovery documents that describe them.

One `ResourceType` per (group, version, resource). Objects are stored per (group, resource), not
per version, so a custom resource served at two versions is one set of objects, as in etcd.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

READ = ("get", "list", "watch")
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# What each subresource serves upstream; any other verb on one (DELETE .../status) is 405.
SUBRESOURCE_VERBS = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "log": ("get",),
    "finalize": ("update",),
}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: tuple[str, ...] = ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Kinds whose strategy maintains metadata.generation (those with a spec).
    generation: bool = True
    # Custom resources cannot be strategic-merge patched and carry the CRD's list type.
    custom: bool = False
    # Kinds whose storage sets ReturnDeletedObject: a delete answers with the object, not a Status.
    returns_deleted: bool = False
    # The version objects are stored at (a CRD's storage version); "" for the served one.
    storage_version: str = ""
    # The group whose storage holds the objects, when another group serves them too (None: this
    # one): events.k8s.io Events are core Events, one set of objects seen in two shapes.
    storage_group: str | None = None

    @property
    def storage_version_hash(self) -> str:
        """Upstream's discovery.StorageVersionHash: base64 of the first 8 bytes of the sha256 of
        the storage version's "group/version/Kind", so resources sharing one storage share it and
        a client can follow them once."""
        group = self.group if self.storage_group is None else self.storage_group
        gvk = f"{group}/{self.storage_version or self.version}/{self.kind}"
        return base64.b64encode(hashlib.sha256(gvk.encode()).digest()[:8]).decode()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def storage_key(self) -> str:
        return f"{self.group if self.storage_group is None else self.storage_group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_version(self) -> str:
        return self.api_version

    def discovery_entries(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if "watch" in self.verbs:  # upstream: every stored resource (not reviews, not componentstatuses)
            entry["storageVersionHash"] = self.storage_version_hash
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        for sub in self.subresources:
            sub_kind = {"scale": "Scale", "log": "Pod"}.get(sub, self.kind)
            sub_group = "autoscaling" if sub == "scale" else None
            verbs = list(SUBRESOURCE_VERBS[sub])
            s: dict[str, Any] = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": sub_kind,
                "verbs": verbs,
            }
            if sub_group:
                s["group"] = sub_group
                s["version"] = "v1"
            entries.append(s)
        return entries


def _rt(group: str, version: str, kind: str, plural: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(group, version, kind, plural, namespaced, **kw)


ALL = ("all",)
REVIEW = ("create",)

BUILTIN: tuple[ResourceType, ...] = (
    # core/v1
    _rt(
        "",
        "v1",
        "Namespace",
        "namespaces",
        False,
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        short_names=("ns",),
        subresources=("finalize", "status"),
        generation=False,
        returns_deleted=True,
    ),
    # Pods, Services, volumes, Nodes, LimitRanges and ResourceQuotas carry no metadata.generation
    # upstream (their strategies never set it; Pods only from 1.33).
    _rt(
        "",
        "v1",
        "Pod",
        "pods",
        short_names=("po",),
        categories=ALL,
        subresources=("log", "status"),
        returns_deleted=True,
        generation=False,
    ),
    _rt(
        "",
        "v1",
        "Service",
        "services",
        short_names=("svc",),
        categories=ALL,
        subresources=("status",),
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        returns_deleted=True,
        generation=False,
    ),
    _rt("", "v1", "ConfigMap", "configmaps", short_names=("cm",), generation=False),
    _rt("", "v1", "Secret", "secrets", generation=False),
    _rt("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",), generation=False, returns_deleted=True),
    _rt("", "v1", "Endpoints", "endpoints", short_names=("ep",), generation=False),
    _rt("", "v1", "Event", "events", short_names=("ev",), generation=False),
    _rt("", "v1", "Node", "nodes", False, short_names=("no",), subresources=("status",), generation=False),
    _rt(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        short_names=("pvc",),
        subresources=("status",),
        returns_deleted=True,
        generation=False,
    ),
    _rt(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        False,
        short_names=("pv",),
        subresources=("status",),
        returns_deleted=True,
        generation=False,
    ),
    _rt(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        short_names=("rc",),
        categories=ALL,
        subresources=("scale", "status"),
    ),
    _rt("", "v1", "LimitRange", "limitranges", short_names=("limits",), generation=False),
    _rt(
        "", "v1", "ResourceQuota", "resourcequotas", short_names=("quota",), subresources=("status",), generation=False
    ),
    _rt("", "v1", "PodTemplate", "podtemplates", generation=False),
    # Computed on each read, never stored: get and list only (a watch is 405), no resourceVersion.
    _rt(
        "",
        "v1",
        "ComponentStatus",
        "componentstatuses",
        False,
        verbs=("get", "list"),
        short_names=("cs",),
        generation=False,
    ),
    # apps/v1
    _rt(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        short_names=("deploy",),
        categories=ALL,
        subresources=("scale", "status"),
    ),
    _rt(
        "apps", "v1", "ReplicaSet", "replicasets", short_names=("rs",), categories=ALL, subresources=("scale", "status")
    ),
    _rt(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        short_names=("sts",),
        categories=ALL,
        subresources=("scale", "status"),
    ),
    _rt("apps", "v1", "DaemonSet", "daemonsets", short_names=("ds",), categories=ALL, subresources=("status",)),
    _rt("apps", "v1", "ControllerRevision", "controllerrevisions", generation=False),
    # batch/v1
    _rt("batch", "v1", "Job", "jobs", categories=ALL, subresources=("status",)),
    _rt("batch", "v1", "CronJob", "cronjobs", short_names=("cj",), categories=ALL, subresources=("status",)),
    # events.k8s.io/v1: the core Events, in the newer shape (see kubesim/events.py)
    _rt("events.k8s.io", "v1", "Event", "events", short_names=("ev",), generation=False, storage_group=""),
    # autoscaling/v2
    _rt(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        short_names=("hpa",),
        categories=ALL,
        subresources=("status",),
    ),
    # networking.k8s.io/v1
    _rt("networking.k8s.io", "v1", "Ingress", "ingresses", short_names=("ing",), subresources=("status",)),
    _rt("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short_names=("netpol",)),
    _rt("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False),
    # policy/v1
    _rt("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short_names=("pdb",), subresources=("status",)),
    # rbac.authorization.k8s.io/v1
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, generation=False),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, generation=False),
    _rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", generation=False),
    _rt("rbac.authorization.k8s.io", "v1", "Role", "roles", generation=False),
    # storage.k8s.io/v1, coordination.k8s.io/v1
    _rt(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        False,
        short_names=("sc",),
        generation=False,
        returns_deleted=True,
    ),
    _rt("coordination.k8s.io", "v1", "Lease", "leases", generation=False),
    # apiextensions.k8s.io/v1
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
    # Reviews: create-only, never stored.
    _rt(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        False,
        verbs=REVIEW,
        generation=False,
    ),
    _rt(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        False,
        verbs=REVIEW,
        generation=False,
    ),
    _rt(
        "authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=REVIEW, generation=False
    ),
    _rt("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False, verbs=REVIEW, generation=False),
)

# Groups in the order a real apiserver lists them: core first, then by the aggregator's group
# priority (apps 17800, events.k8s.io 17750, ... apiextensions.k8s.io 16700, coordination.k8s.io
# 16500), custom resources' groups (priority 1000) last by name.
GROUP_ORDER = (
    "",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
)


@dataclass
class Registry:
    """What one cluster serves: the built-ins plus the kinds its CRDs define."""

    types: list[ResourceType] = field(default_factory=lambda: list(BUILTIN))
    # For custom groups, which version discovery calls preferred.
    preferred: dict[str, str] = field(default_factory=dict)
    # Bumped whenever the served kinds change, so derived documents can be cached.
    generation: int = 0

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        for rt in self.types:
            if rt.plural == plural and rt.group == group and rt.version == version:
                return rt
        return None

    def by_kind(self, group: str, kind: str) -> list[ResourceType]:
        return [rt for rt in self.types if rt.group == group and rt.kind == kind]

    def versions(self, group: str) -> list[str]:
        seen: list[str] = []
        for rt in self.types:
            if rt.group == group and rt.version not in seen:
                seen.append(rt.version)
        pref = self.preferred.get(group)
        if pref in seen:
            seen.remove(pref)
            seen.insert(0, pref)
        return seen

    def groups(self) -> list[str]:
        names = {rt.group for rt in self.types if rt.group}
        ordered = [g for g in GROUP_ORDER if g in names]
        return ordered + sorted(names - set(ordered))

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.types if rt.group == group and rt.version == version]

    def set_custom(self, crd: dict[str, Any]) -> None:
        """Serve (or stop serving) the kinds of one CRD, as soon as it is stored."""
        self.generation += 1
        spec = crd.get("spec") or {}
        group = spec.get("group", "")
        names = spec.get("names") or {}
        plural = names.get("plural", "")
        self.remove_custom(group, plural)
        if crd.get("metadata", {}).get("deletionTimestamp"):
            return
        served = [v for v in spec.get("versions") or [] if v.get("served", True)]
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), None)
        for v in served:
            subs = v.get("subresources") or {}
            self.types.append(
                ResourceType(
                    group=group,
                    version=v["name"],
                    kind=names.get("kind", ""),
                    plural=plural,
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    short_names=tuple(names.get("shortNames") or ()),
                    categories=tuple(names.get("categories") or ()),
                    subresources=tuple(s for s in ("scale", "status") if s in subs),
                    custom=True,
                    storage_version=storage or "",
                )
            )
        if storage:
            self.preferred[group] = _highest_version([v["name"] for v in served]) or storage

    def remove_custom(self, group: str, plural: str) -> None:
        self.generation += 1
        self.types = [rt for rt in self.types if not (rt.custom and rt.group == group and rt.plural == plural)]
        if not any(rt.group == group for rt in self.types):
            self.preferred.pop(group, None)

    def custom_types(self, group: str, plural: str) -> list[ResourceType]:
        return [rt for rt in self.types if rt.custom and rt.group == group and rt.plural == plural]


def version_priority(v: str) -> tuple[int, int, int, str]:
    """Kubernetes' version ordering: GA > beta > alpha, higher numbers first, then others by name."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (0, 0, 0, v)
    major = int(m.group(1))
    stage = {"": 3, "beta": 2, "alpha": 1}[m.group(2) or ""]
    minor = int(m.group(3) or 0)
    return (stage, major, minor, "")


def _highest_version(versions: Iterable[str]) -> str | None:
    vs = list(versions)
    return max(vs, key=version_priority) if vs else None
