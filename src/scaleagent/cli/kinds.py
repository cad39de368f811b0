"""KIND arguments as kubectl reads them (aliases, plurals, KIND.group, KIND/NAME), resolved to
what the hub's `kind` filter takes: `scale-agent get` must need no discovery of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..kube.printing import meta_of
from .errors import CliError

__all__ = [
    "KNOWN_KINDS",
    "KindInfo",
    "ResourceArg",
    "group_of",
    "kind_token",
    "manifest_name",
    "meta",
    "object_name",
    "parse_resource_args",
    "plural",
    "resolve_kind",
]


meta = meta_of
"""An object's metadata, empty when it has none (kube/printing.py's)."""


@dataclass(frozen=True)
class KindInfo:
    """What a KIND argument names: the hub's `kind` filter, the plural for messages, and the scope.

    `group` is None when the user gave an unknown bare kind: it then matches that Kind in every
    group (as the hub's filter does), and what is printed comes from each object's apiVersion.
    `namespaced` is None when unknown (decided from the objects found).
    """

    kind: str
    group: str | None
    resource: str
    namespaced: bool | None
    known: bool = False
    typed: str = ""
    """The argument as the user wrote it, for an unknown kind: kubectl's error names it as typed."""

    @property
    def typed_ref(self) -> str:
        """How `the server doesn't have a resource type "..."` names the kind: as typed, else its resource."""
        return self.typed or self.resource_ref

    @property
    def query(self) -> str:
        """The hub's `kind` filter value: `Kind.group` when the group is known, else the bare kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def resource_ref(self) -> str:
        """`deployments.apps`, `configmaps`: how kubectl names the resource in NotFound messages."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def token(self) -> str:
        """`deployment.apps`, `configmap`, `widget` (group unknown): the name kubectl prints."""
        return kind_token(self.kind, self.group or "")


# (Kind, group, plural, namespaced, short names): kubectl api-resources of a current cluster, for
# the kinds people type. Anything else resolves by rule (see resolve_kind).
_BUILTIN_KINDS: tuple[tuple[str, str, str, bool, tuple[str, ...]], ...] = (
    ("Pod", "", "pods", True, ("po",)),
    ("Service", "", "services", True, ("svc",)),
    ("ConfigMap", "", "configmaps", True, ("cm",)),
    ("Secret", "", "secrets", True, ()),
    ("Namespace", "", "namespaces", False, ("ns",)),
    ("Node", "", "nodes", False, ("no",)),
    ("ServiceAccount", "", "serviceaccounts", True, ("sa",)),
    ("PersistentVolumeClaim", "", "persistentvolumeclaims", True, ("pvc",)),
    ("PersistentVolume", "", "persistentvolumes", False, ("pv",)),
    ("Endpoints", "", "endpoints", True, ("ep",)),
    ("Event", "", "events", True, ("ev",)),
    ("LimitRange", "", "limitranges", True, ("limits",)),
    ("ResourceQuota", "", "resourcequotas", True, ("quota",)),
    ("ReplicationController", "", "replicationcontrollers", True, ("rc",)),
    ("PodTemplate", "", "podtemplates", True, ()),
    ("Deployment", "apps", "deployments", True, ("deploy",)),
    ("ReplicaSet", "apps", "replicasets", True, ("rs",)),
    ("StatefulSet", "apps", "statefulsets", True, ("sts",)),
    ("DaemonSet", "apps", "daemonsets", True, ("ds",)),
    ("ControllerRevision", "apps", "controllerrevisions", True, ()),
    ("Job", "batch", "jobs", True, ()),
    ("CronJob", "batch", "cronjobs", True, ("cj",)),
    ("Ingress", "networking.k8s.io", "ingresses", True, ("ing",)),
    ("IngressClass", "networking.k8s.io", "ingressclasses", False, ()),
    ("NetworkPolicy", "networking.k8s.io", "networkpolicies", True, ("netpol",)),
    ("HorizontalPodAutoscaler", "autoscaling", "horizontalpodautoscalers", True, ("hpa",)),
    ("PodDisruptionBudget", "policy", "poddisruptionbudgets", True, ("pdb",)),
    ("Role", "rbac.authorization.k8s.io", "roles", True, ()),
    ("RoleBinding", "rbac.authorization.k8s.io", "rolebindings", True, ()),
    ("ClusterRole", "rbac.authorization.k8s.io", "clusterroles", False, ()),
    ("ClusterRoleBinding", "rbac.authorization.k8s.io", "clusterrolebindings", False, ()),
    ("StorageClass", "storage.k8s.io", "storageclasses", False, ("sc",)),
    ("CustomResourceDefinition", "apiextensions.k8s.io", "customresourcedefinitions", False, ("crd", "crds")),
    ("EndpointSlice", "discovery.k8s.io", "endpointslices", True, ()),
    ("Lease", "coordination.k8s.io", "leases", True, ()),
    ("PriorityClass", "scheduling.k8s.io", "priorityclasses", False, ("pc",)),
    ("MutatingWebhookConfiguration", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", False, ()),
    ("ValidatingWebhookConfiguration", "admissionregistration.k8s.io", "validatingwebhookconfigurations", False, ()),
    ("APIService", "apiregistration.k8s.io", "apiservices", False, ()),
)

_ALIASES: dict[str, list[KindInfo]] = {}
for _kind, _group, _resource, _namespaced, _shorts in _BUILTIN_KINDS:
    _info = KindInfo(_kind, _group, _resource, _namespaced, known=True)
    for _alias in {_kind.lower(), _resource, *_shorts}:
        _ALIASES.setdefault(_alias, []).append(_info)
KNOWN_KINDS = {(k.group, k.kind): k for infos in _ALIASES.values() for k in infos}


def _singular(word: str) -> str:
    """English plural to singular, for kinds kubectl would learn from discovery (we cannot)."""
    if word.endswith("ies") and len(word) > 3:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def plural(kind_lower: str) -> str:
    if kind_lower.endswith("y") and kind_lower[-2:-1] not in tuple("aeiou"):
        return kind_lower[:-1] + "ies"
    if kind_lower.endswith(("s", "sh", "ch", "x", "z")):
        return kind_lower + "es"
    return kind_lower + "s"


def resolve_kind(text: str) -> KindInfo:
    """What kubectl's resource argument names, without discovery: a table, then rules.

    Accepted, case-insensitively: a Kind (`Deployment`), a plural (`deployments`), a short name
    (`deploy`), any of these with a group (`Deployment.apps`, `deployments.apps`). A name that is
    not in the table: if it has a capital letter it is taken as a Kind as written (`Widget`),
    otherwise as a plural or singular (`widgets` and `widget` both mean Kind `widget`; the hub
    compares kinds case-insensitively). A group after the first dot is kept either way.
    """
    text = text.strip()
    if not text or "/" in text:
        raise CliError(f'error: the server doesn\'t have a resource type "{text}"')
    base, _, group = text.partition(".")
    lower, group = base.lower(), group.lower()
    for info in _ALIASES.get(lower, []):
        if not group or info.group == group:
            return info
    if base != lower:  # a Kind, as written
        kind, resource = base, plural(lower)
    else:
        kind = _singular(lower)
        resource = lower if kind != lower else plural(lower)
    return KindInfo(kind, group or None, resource, None, typed=text)


def kind_token(kind: str, group: str) -> str:
    """`deployment.apps`, `configmap`: the lowercase kind, then `.group` unless core (kubectl's form)."""
    return f"{kind.lower()}.{group}" if group else kind.lower()


def group_of(obj: dict[str, Any]) -> str:
    api_version = str(obj.get("apiVersion") or "")
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def object_name(obj: dict[str, Any]) -> str:
    """`-o name`: `deployment.apps/nginx`, `configmap/settings`."""
    return f"{kind_token(str(obj.get('kind') or ''), group_of(obj))}/{meta(obj).get('name', '')}"


def manifest_name(obj: dict[str, Any]) -> str:
    """The operations API's `manifestName`: `deployment.apps nginx`."""
    return f"{kind_token(str(obj.get('kind') or ''), group_of(obj))} {meta(obj).get('name', '')}"


@dataclass(frozen=True)
class ResourceArg:
    """One kind to read or delete, with the names asked for (none: all of them)."""

    kind: KindInfo
    names: tuple[str, ...] = ()


def parse_resource_args(args: Sequence[str], verb: str = "get") -> list[ResourceArg]:
    """kubectl's argument forms: `KIND[,KIND...] [NAME...]` or `KIND/NAME...`, never both."""
    if not args:
        raise CliError(
            f"error: You must specify the type of resource to {verb}. "
            'Use "scale-agent get --help" for the accepted kinds'
        )
    if any("/" in a for a in args):
        if not all("/" in a for a in args):
            raise CliError(
                "error: there is no need to specify a resource type as a separate argument when "
                "passing arguments in resource/name form (e.g. 'scale-agent get resource/<resource_name>' "
                "instead of 'scale-agent get resource resource/<resource_name>')"
            )
        out: list[ResourceArg] = []
        for a in args:
            kind, _, name = a.partition("/")
            if not name or "/" in name:
                raise CliError(f"error: arguments in resource/name form must have a single resource and name: {a!r}")
            out.append(ResourceArg(resolve_kind(kind), (name,)))
        return out
    kinds = [k for k in args[0].split(",") if k]
    if not kinds:
        raise CliError(f"error: no resource type in {args[0]!r}")
    return [ResourceArg(resolve_kind(k), tuple(args[1:])) for k in kinds]
