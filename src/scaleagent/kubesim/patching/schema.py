"""The path-aware schema of the built-in kinds that strategic merge patch and server-side apply
follow (list types, merge keys, atomic structs), and the zero objects apply diffs against."""

from __future__ import annotations

from collections.abc import Iterable

# --------------------------------------------------------------------------- schema
#
# One node type carries both views of a field: the strategic-merge-patch tags of
# k8s.io/api (patchStrategy / patchMergeKey) and the structured-merge-diff schema
# (+listType / +listMapKey / +structType / +mapType). Fields that are not described
# are "open": maps of declared fields whose lists are atomic, which is what the
# built-in types look like wherever they have no special tags. Kinds without a schema
# (custom resources) are "deduced", the way structured-merge-diff treats untyped
# objects: maps are granular, lists are atomic.


class _T:
    __slots__ = ("kind", "fields", "extra", "elem", "atomic", "lt", "keys", "defaults", "smp_key", "smp_merge")

    def __init__(
        self,
        kind: str,
        *,
        fields=None,
        extra=None,
        elem=None,
        atomic=False,
        lt="atomic",
        keys=(),
        defaults=None,
        smp_key=None,
        smp_merge=False,
    ):
        self.kind = kind  # struct | map | list | scalar | open | deduced
        self.fields = fields or {}
        self.extra = extra
        self.elem = elem
        self.atomic = atomic
        self.lt = lt  # list type for server-side apply: atomic | set | map
        self.keys = tuple(keys)
        self.defaults = defaults or {}
        self.smp_key = smp_key
        self.smp_merge = smp_merge


_SCALAR = _T("scalar")
_OPEN = _T("open")
_DEDUCED = _T("deduced")
_ATOMIC_LIST = _T("list", elem=_OPEN)
_ATOMIC_STRUCT = _T("struct", extra=_OPEN, atomic=True)


def _S(fields: dict | None = None, *, atomic: bool = False, extra: _T = _OPEN) -> _T:
    return _T("struct", fields=fields, extra=extra, atomic=atomic)


def _M(elem: _T = _SCALAR, *, atomic: bool = False) -> _T:
    return _T("map", elem=elem, atomic=atomic)


def _keyed(elem: _T, key: str, *, ssa_keys: Iterable[str] | None = None, defaults=None) -> _T:
    """patchStrategy=merge on ``key``, and +listType=map on ``ssa_keys`` (default ``key``)."""
    return _T(
        "list", elem=elem, lt="map", keys=tuple(ssa_keys or (key,)), defaults=defaults, smp_key=key, smp_merge=True
    )


def _list_map(elem: _T, *keys: str) -> _T:
    """+listType=map without a patch strategy (strategic merge patch replaces it)."""
    return _T("list", elem=elem, lt="map", keys=keys)


def _set_list() -> _T:
    """patchStrategy=merge on a list of scalars, +listType=set."""
    return _T("list", elem=_SCALAR, lt="set", smp_merge=True)


def _field(t: _T, key: str) -> tuple[_T, bool]:
    """Type of ``key`` in a map-like value of type ``t``, and whether it is a declared field."""
    kind = t.kind
    if kind == "struct":
        return t.fields.get(key, t.extra), True
    if kind == "map":
        return t.elem, False
    if kind == "deduced":
        return _DEDUCED, False
    return _OPEN, True


def _elem(t: _T) -> _T:
    if t.kind == "list":
        return t.elem
    if t.kind == "deduced":
        return _DEDUCED
    return _OPEN


def _granular_map(t: _T) -> bool:
    return t.kind in ("struct", "map", "open", "deduced") and not t.atomic


def _list_type(t: _T) -> str:
    return t.lt if t.kind == "list" else "atomic"


_LABEL_SELECTOR = _S(atomic=True)  # metav1.LabelSelector: +structType=atomic
_OBJECT_META = _S(
    {
        "labels": _M(),
        "annotations": _M(),
        "finalizers": _set_list(),
        "ownerReferences": _keyed(_ATOMIC_STRUCT, "uid"),  # OwnerReference: +structType=atomic
        "managedFields": _ATOMIC_LIST,
    }
)
_CONDITIONS = _keyed(_S(), "type")
_RESOURCES = _S({"limits": _M(), "requests": _M(), "claims": _list_map(_S(), "name")})
_ENV_VAR = _S(
    {
        "valueFrom": _S(
            {
                "configMapKeyRef": _ATOMIC_STRUCT,
                "secretKeyRef": _ATOMIC_STRUCT,
                "fieldRef": _ATOMIC_STRUCT,
                "resourceFieldRef": _ATOMIC_STRUCT,
            }
        )
    }
)
_CONTAINER = _S(
    {
        "ports": _keyed(_S(), "containerPort", ssa_keys=("containerPort", "protocol"), defaults={"protocol": "TCP"}),
        "env": _keyed(_ENV_VAR, "name"),
        "volumeMounts": _keyed(_S(), "mountPath"),
        "volumeDevices": _keyed(_S(), "devicePath"),
        "resources": _RESOURCES,
    }
)
_POD_SPEC = _S(
    {
        "volumes": _keyed(_S(), "name"),  # patchStrategy "merge,retainKeys"
        "initContainers": _keyed(_CONTAINER, "name"),
        "containers": _keyed(_CONTAINER, "name"),
        "ephemeralContainers": _keyed(_CONTAINER, "name"),
        "imagePullSecrets": _keyed(_ATOMIC_STRUCT, "name"),  # LocalObjectReference: atomic
        "hostAliases": _keyed(_S(), "ip"),
        "topologySpreadConstraints": _keyed(
            _S({"labelSelector": _LABEL_SELECTOR}), "topologyKey", ssa_keys=("topologyKey", "whenUnsatisfiable")
        ),
        "schedulingGates": _keyed(_S(), "name"),
        "resourceClaims": _keyed(_S(), "name"),
        "nodeSelector": _M(atomic=True),
        "overhead": _M(),
        "affinity": _S({"nodeAffinity": _S({"requiredDuringSchedulingIgnoredDuringExecution": _ATOMIC_STRUCT})}),
    }
)
_POD_TEMPLATE = _S({"metadata": _OBJECT_META, "spec": _POD_SPEC})
_POD_STATUS = _S(
    {
        "conditions": _CONDITIONS,
        "podIPs": _keyed(_S(), "ip"),
        "hostIPs": _keyed(_S(), "ip"),
        "resourceClaimStatuses": _keyed(_S(), "name"),
    }
)
_WORKLOAD_STATUS = _S({"conditions": _CONDITIONS})
_JOB_SPEC = _S({"selector": _LABEL_SELECTOR, "template": _POD_TEMPLATE})


def _root(fields: dict | None = None) -> _T:
    return _S({"metadata": _OBJECT_META, **(fields or {})})


_GENERIC = _root()
_REPLICATED = _root({"spec": _S({"selector": _LABEL_SELECTOR, "template": _POD_TEMPLATE}), "status": _WORKLOAD_STATUS})

_SCHEMAS: dict[tuple[str, str], _T] = {
    ("", "Pod"): _root({"spec": _POD_SPEC, "status": _POD_STATUS}),
    ("apps", "Deployment"): _REPLICATED,
    ("apps", "ReplicaSet"): _REPLICATED,
    ("apps", "DaemonSet"): _REPLICATED,
    ("apps", "StatefulSet"): _REPLICATED,  # volumeClaimTemplates is atomic, the open default
    ("batch", "Job"): _root(
        {
            "spec": _JOB_SPEC,
            # JobStatus.conditions: patchStrategy=merge on type, but +listType=atomic
            "status": _S({"conditions": _T("list", elem=_S(), smp_key="type", smp_merge=True)}),
        }
    ),
    ("batch", "CronJob"): _root({"spec": _S({"jobTemplate": _S({"metadata": _OBJECT_META, "spec": _JOB_SPEC})})}),
    ("", "Service"): _root(
        {
            "spec": _S(
                {
                    "ports": _keyed(_S(), "port", ssa_keys=("port", "protocol"), defaults={"protocol": "TCP"}),
                    "selector": _M(atomic=True),
                }
            ),
            "status": _S({"conditions": _CONDITIONS}),
        }
    ),
    ("", "ConfigMap"): _root({"data": _M(), "binaryData": _M()}),
    ("", "Secret"): _root({"data": _M(), "stringData": _M()}),
    ("", "Namespace"): _root({"status": _S({"conditions": _CONDITIONS})}),
    ("", "ServiceAccount"): _root({"secrets": _keyed(_ATOMIC_STRUCT, "name")}),  # ObjectReference: atomic
    ("", "PersistentVolumeClaim"): _root(
        {
            "spec": _S({"selector": _LABEL_SELECTOR, "resources": _RESOURCES, "dataSource": _ATOMIC_STRUCT}),
            "status": _S(
                {
                    "conditions": _CONDITIONS,
                    "capacity": _M(),
                    "allocatedResources": _M(),
                    "allocatedResourceStatuses": _M(),
                }
            ),
        }
    ),
    ("", "PersistentVolume"): _root({"spec": _S({"capacity": _M(), "claimRef": _ATOMIC_STRUCT})}),
    ("", "Node"): _root(
        {
            "spec": _S({"podCIDRs": _set_list()}),
            "status": _S(
                {"conditions": _CONDITIONS, "addresses": _keyed(_S(), "type"), "capacity": _M(), "allocatable": _M()}
            ),
        }
    ),
    ("", "Event"): _root({"involvedObject": _ATOMIC_STRUCT, "related": _ATOMIC_STRUCT}),
    ("", "ReplicationController"): _root(
        {
            "spec": _S({"selector": _M(atomic=True), "template": _POD_TEMPLATE}),
            "status": _S({"conditions": _CONDITIONS}),
        }
    ),
    ("", "PodTemplate"): _root({"template": _POD_TEMPLATE}),
    ("", "ResourceQuota"): _root({"spec": _S({"hard": _M()}), "status": _S({"hard": _M(), "used": _M()})}),
    ("networking.k8s.io", "NetworkPolicy"): _root({"spec": _S({"podSelector": _LABEL_SELECTOR})}),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _root(
        {
            "status": _S({"conditions": _list_map(_S(), "type")}),  # +listType=map, no patch strategy
        }
    ),
}
for _gk in [
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "Binding"),
    ("", "ComponentStatus"),
    ("apps", "ControllerRevision"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "IngressClass"),
    ("policy", "PodDisruptionBudget"),
    ("policy", "Eviction"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "CSIStorageCapacity"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("apiregistration.k8s.io", "APIService"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
]:
    _SCHEMAS.setdefault(_gk, _GENERIC)
del _gk

# Custom resources: metadata is ObjectMeta; everything else is deduced from the value.
_CUSTOM_ROOT = _S({"metadata": _OBJECT_META}, extra=_DEDUCED)


def _schema(group: str, kind: str) -> _T:
    return _SCHEMAS.get((group, kind), _CUSTOM_ROOT)


def has_strategic_schema(group: str, kind: str) -> bool:
    """Whether strategic merge patch is available for the kind (built-in kinds only)."""
    return (group, kind) in _SCHEMAS


# The JSON of a zero-valued Go object of the kind: what the apiserver diffs a created
# object against. Only the nested maps/lists it contains matter (a map that is absent
# there and set on create gets a "." in the creator's managedFields).
_META0 = {"creationTimestamp": None}
_TEMPLATE0 = {"metadata": _META0, "spec": {"containers": None}}
_ZERO: dict[tuple[str, str], dict] = {
    ("", "Pod"): {"spec": {"containers": None}, "status": {}},
    ("apps", "Deployment"): {"spec": {"selector": None, "template": _TEMPLATE0, "strategy": {}}, "status": {}},
    ("apps", "ReplicaSet"): {"spec": {"selector": None, "template": _TEMPLATE0}, "status": {}},
    ("apps", "StatefulSet"): {"spec": {"selector": None, "template": _TEMPLATE0, "updateStrategy": {}}, "status": {}},
    ("apps", "DaemonSet"): {"spec": {"selector": None, "template": _TEMPLATE0, "updateStrategy": {}}, "status": {}},
    ("batch", "Job"): {"spec": {"template": _TEMPLATE0}, "status": {}},
    ("batch", "CronJob"): {
        "spec": {"jobTemplate": {"metadata": _META0, "spec": {"template": _TEMPLATE0}}},
        "status": {},
    },
    ("", "Service"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("", "Namespace"): {"spec": {}, "status": {}},
    ("", "PersistentVolumeClaim"): {"spec": {"resources": {}}, "status": {}},
    ("", "PersistentVolume"): {"spec": {}, "status": {}},
    ("", "Node"): {"spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {}}, "nodeInfo": {}}},
    ("", "Event"): {
        "involvedObject": {},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
    },
    ("", "ReplicationController"): {"spec": {"template": None}, "status": {}},
    ("", "PodTemplate"): {"template": _TEMPLATE0},
    ("rbac.authorization.k8s.io", "Role"): {"rules": None},
    ("rbac.authorization.k8s.io", "ClusterRole"): {"rules": None},
    ("rbac.authorization.k8s.io", "RoleBinding"): {"roleRef": {}},
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): {"roleRef": {}},
    ("networking.k8s.io", "Ingress"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("networking.k8s.io", "NetworkPolicy"): {"spec": {"podSelector": {}}},
    ("apiextensions.k8s.io", "CustomResourceDefinition"): {
        "spec": {"names": {}, "versions": None},
        "status": {"acceptedNames": {}, "storedVersions": None},
    },
}


def _zero_object(group: str, kind: str) -> dict:
    if (group, kind) not in _SCHEMAS:
        return {}  # an empty unstructured object
    return {"metadata": _META0, **_ZERO.get((group, kind), {})}
