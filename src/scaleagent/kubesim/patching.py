"""Patch types and field ownership, the way kube-apiserver does them.

kubesim has to answer PATCH and server-side apply like a real API server: ``kubectl`` and
the official clients send strategic merge patches with directives, and read back
``metadata.managedFields``. This module holds that logic as pure functions on plain
JSON-like dicts:

* :func:`apply_json_patch` - RFC 6902 (``application/json-patch+json``).
* :func:`apply_merge_patch` - RFC 7386 (``application/merge-patch+json``).
* :func:`apply_strategic_merge_patch` - ``application/strategic-merge-patch+json``, a port
  of ``k8s.io/apimachinery/pkg/util/strategicpatch`` (mergeMap / mergeSlice /
  normalizeElementOrder), driven by a small path-aware schema of the built-in kinds.
* :func:`server_side_apply` - ``application/apply-patch+yaml``, a port of the parts of
  ``sigs.k8s.io/structured-merge-diff`` (merge, ToFieldSet, Compare, prune, conflicts)
  and of the apiserver's ``fieldmanager`` chain (strip meta fields, reset fields,
  ``before-first-apply``, managedFields encoding).
* :func:`record_update` - the ownership bookkeeping the apiserver does for every other
  write, so that a later apply conflicts where Kubernetes would.

Nothing here mutates its inputs. Results are built by copying along the changed paths,
so they share untouched sub-objects with the inputs; the top-level dict and
``metadata`` of every result are always fresh copies, so a caller may set
``resourceVersion`` and friends on a result without touching the input. Treat deeper
levels as read-only or copy them first.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Iterable

import jsonpatch
import jsonpointer

__all__ = [
    "ApplyConflict",
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "has_strategic_schema",
    "record_update",
    "server_side_apply",
]


# --------------------------------------------------------------------------- errors


class PatchError(Exception):
    """A patch that cannot be applied.

    ``code`` is the HTTP status the API server answers with: 422 (Invalid: e.g. a JSON
    patch ``test`` op fails, a path that does not exist), 400 (malformed patch document),
    415 (strategic merge patch on a kind with no strategic-merge schema, e.g. custom
    resources).
    """

    def __init__(self, message: str, code: int = 422):
        super().__init__(message)
        self.message = message
        self.code = code


class ApplyConflict(Exception):
    """Server-side apply conflict, HTTP 409 (reason ``Conflict``).

    ``conflicts`` lists ``(manager, field_path)`` pairs, e.g.
    ``[("kubectl-client-side-apply", ".spec.replicas")]``. ``causes`` holds the
    ``status.details.causes`` entries Kubernetes sends, ready to serialize
    (``{"reason": "FieldManagerConflict", "message": "conflict with \"m\" using apps/v1",
    "field": ".spec.replicas"}``; StatusCause's type is the JSON key ``reason``).
    ``str(exc)`` is Kubernetes' message, e.g. ``Apply failed with 1 conflict: conflict
    with "kubectl-client-side-apply" using apps/v1: .spec.replicas``.
    """

    code = 409

    def __init__(
        self,
        conflicts: list[tuple[str, str]],
        message: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ):
        self.conflicts = list(conflicts)
        if causes is None:
            causes = [
                {"reason": "FieldManagerConflict", "message": f"conflict with {json.dumps(m)}", "field": p}
                for m, p in self.conflicts
            ]
        self.causes = causes
        if message is None:
            n = len(self.conflicts)
            message = f"Apply failed with {n} conflict{'s' if n != 1 else ''}: " + "; ".join(
                f"{c['message']}: {c['field']}" for c in causes
            )
        self.message = message
        super().__init__(message)


class _SchemaError(Exception):
    """A value that does not fit the schema (e.g. a list-map item without its key)."""


# --------------------------------------------------------------------------- JSON helpers

_MISSING: Any = object()  # "absent", as opposed to an explicit null
_EMPTIED: Any = object()  # a container that pruning left empty


def _eq(a: Any, b: Any) -> bool:
    """JSON equality as Go sees it: 1 == 1.0, but True != 1."""
    if a is b:
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for k, v in a.items():
            w = b.get(k, _MISSING)
            if w is _MISSING or not _eq(v, w):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _hkey(v: Any) -> Any:
    """Hashable identity of a JSON value (bools apart from numbers, 80 == 80.0)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    return ("j", json.dumps(v, sort_keys=True))


def _intify(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _intify(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_intify(x) for x in v]
    return v


def _canon_json(v: Any) -> str:
    """Compact JSON with sorted keys and Go's HTML-safe escaping, as managedFields keys use."""
    s = json.dumps(_intify(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if any(c in s for c in "<>&\u2028\u2029"):
        s = (
            s.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return s


def _copy_json(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy_json(x) for x in v]
    return v


def _fresh_top(obj: dict) -> dict:
    """Copy the top level and metadata, the parts callers routinely mutate."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = dict(meta)
    return out


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

    def __init__(self, kind: str, *, fields=None, extra=None, elem=None, atomic=False,
                 lt="atomic", keys=(), defaults=None, smp_key=None, smp_merge=False):
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
    return _T("list", elem=elem, lt="map", keys=tuple(ssa_keys or (key,)), defaults=defaults,
              smp_key=key, smp_merge=True)


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
_OBJECT_META = _S({
    "labels": _M(),
    "annotations": _M(),
    "finalizers": _set_list(),
    "ownerReferences": _keyed(_ATOMIC_STRUCT, "uid"),  # OwnerReference: +structType=atomic
    "managedFields": _ATOMIC_LIST,
})
_CONDITIONS = _keyed(_S(), "type")
_RESOURCES = _S({"limits": _M(), "requests": _M(), "claims": _list_map(_S(), "name")})
_ENV_VAR = _S({"valueFrom": _S({
    "configMapKeyRef": _ATOMIC_STRUCT,
    "secretKeyRef": _ATOMIC_STRUCT,
    "fieldRef": _ATOMIC_STRUCT,
    "resourceFieldRef": _ATOMIC_STRUCT,
})})
_CONTAINER = _S({
    "ports": _keyed(_S(), "containerPort", ssa_keys=("containerPort", "protocol"), defaults={"protocol": "TCP"}),
    "env": _keyed(_ENV_VAR, "name"),
    "volumeMounts": _keyed(_S(), "mountPath"),
    "volumeDevices": _keyed(_S(), "devicePath"),
    "resources": _RESOURCES,
})
_POD_SPEC = _S({
    "volumes": _keyed(_S(), "name"),  # patchStrategy "merge,retainKeys"
    "initContainers": _keyed(_CONTAINER, "name"),
    "containers": _keyed(_CONTAINER, "name"),
    "ephemeralContainers": _keyed(_CONTAINER, "name"),
    "imagePullSecrets": _keyed(_ATOMIC_STRUCT, "name"),  # LocalObjectReference: atomic
    "hostAliases": _keyed(_S(), "ip"),
    "topologySpreadConstraints": _keyed(_S({"labelSelector": _LABEL_SELECTOR}), "topologyKey",
                                        ssa_keys=("topologyKey", "whenUnsatisfiable")),
    "schedulingGates": _keyed(_S(), "name"),
    "resourceClaims": _keyed(_S(), "name"),
    "nodeSelector": _M(atomic=True),
    "overhead": _M(),
    "affinity": _S({"nodeAffinity": _S({"requiredDuringSchedulingIgnoredDuringExecution": _ATOMIC_STRUCT})}),
})
_POD_TEMPLATE = _S({"metadata": _OBJECT_META, "spec": _POD_SPEC})
_POD_STATUS = _S({
    "conditions": _CONDITIONS,
    "podIPs": _keyed(_S(), "ip"),
    "hostIPs": _keyed(_S(), "ip"),
    "resourceClaimStatuses": _keyed(_S(), "name"),
})
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
    ("batch", "Job"): _root({
        "spec": _JOB_SPEC,
        # JobStatus.conditions: patchStrategy=merge on type, but +listType=atomic
        "status": _S({"conditions": _T("list", elem=_S(), smp_key="type", smp_merge=True)}),
    }),
    ("batch", "CronJob"): _root({"spec": _S({"jobTemplate": _S({"metadata": _OBJECT_META, "spec": _JOB_SPEC})})}),
    ("", "Service"): _root({
        "spec": _S({
            "ports": _keyed(_S(), "port", ssa_keys=("port", "protocol"), defaults={"protocol": "TCP"}),
            "selector": _M(atomic=True),
        }),
        "status": _S({"conditions": _CONDITIONS}),
    }),
    ("", "ConfigMap"): _root({"data": _M(), "binaryData": _M()}),
    ("", "Secret"): _root({"data": _M(), "stringData": _M()}),
    ("", "Namespace"): _root({"status": _S({"conditions": _CONDITIONS})}),
    ("", "ServiceAccount"): _root({"secrets": _keyed(_ATOMIC_STRUCT, "name")}),  # ObjectReference: atomic
    ("", "PersistentVolumeClaim"): _root({
        "spec": _S({"selector": _LABEL_SELECTOR, "resources": _RESOURCES, "dataSource": _ATOMIC_STRUCT}),
        "status": _S({"conditions": _CONDITIONS, "capacity": _M(), "allocatedResources": _M(),
                      "allocatedResourceStatuses": _M()}),
    }),
    ("", "PersistentVolume"): _root({"spec": _S({"capacity": _M(), "claimRef": _ATOMIC_STRUCT})}),
    ("", "Node"): _root({
        "spec": _S({"podCIDRs": _set_list()}),
        "status": _S({"conditions": _CONDITIONS, "addresses": _keyed(_S(), "type"),
                      "capacity": _M(), "allocatable": _M()}),
    }),
    ("", "Event"): _root({"involvedObject": _ATOMIC_STRUCT, "related": _ATOMIC_STRUCT}),
    ("", "ReplicationController"): _root({
        "spec": _S({"selector": _M(atomic=True), "template": _POD_TEMPLATE}),
        "status": _S({"conditions": _CONDITIONS}),
    }),
    ("", "PodTemplate"): _root({"template": _POD_TEMPLATE}),
    ("", "ResourceQuota"): _root({"spec": _S({"hard": _M()}), "status": _S({"hard": _M(), "used": _M()})}),
    ("networking.k8s.io", "NetworkPolicy"): _root({"spec": _S({"podSelector": _LABEL_SELECTOR})}),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _root({
        "status": _S({"conditions": _list_map(_S(), "type")}),  # +listType=map, no patch strategy
    }),
}
for _gk in [
    ("", "Endpoints"), ("", "LimitRange"), ("", "Binding"), ("", "ComponentStatus"),
    ("apps", "ControllerRevision"),
    ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "Ingress"), ("networking.k8s.io", "IngressClass"),
    ("policy", "PodDisruptionBudget"), ("policy", "Eviction"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("storage.k8s.io", "StorageClass"), ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "CSIDriver"), ("storage.k8s.io", "CSINode"), ("storage.k8s.io", "CSIStorageCapacity"),
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
    ("batch", "CronJob"): {"spec": {"jobTemplate": {"metadata": _META0, "spec": {"template": _TEMPLATE0}}}, "status": {}},
    ("", "Service"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("", "Namespace"): {"spec": {}, "status": {}},
    ("", "PersistentVolumeClaim"): {"spec": {"resources": {}}, "status": {}},
    ("", "PersistentVolume"): {"spec": {}, "status": {}},
    ("", "Node"): {"spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {}}, "nodeInfo": {}}},
    ("", "Event"): {"involvedObject": {}, "source": {}, "firstTimestamp": None, "lastTimestamp": None, "eventTime": None},
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


# --------------------------------------------------------------------------- JSON patch


def apply_json_patch(obj: dict, patch: object) -> dict:
    """Apply an RFC 6902 JSON patch (``application/json-patch+json``).

    Like the apiserver: a document that is not a list of operation objects is a 400;
    an operation that cannot be applied (failed ``test``, missing path, unknown op) is
    a 422.
    """
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise PatchError("json: cannot unmarshal the patch: expected a JSON array of operation objects", 400)
    try:
        jp = jsonpatch.JsonPatch(patch)
        result = jp.apply(obj, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchError(f"the test operation failed: {exc}", 422) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"the JSON patch could not be applied: {exc}", 422) from None
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PatchError(f"the JSON patch could not be applied: {exc}", 422) from None
    if not isinstance(result, dict):
        raise PatchError("the JSON patch did not produce a JSON object", 422)
    return result


# --------------------------------------------------------------------------- merge patch


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy_json(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def apply_merge_patch(obj: dict, patch: object) -> dict:
    """Apply an RFC 7386 JSON merge patch (``application/merge-patch+json``).

    Maps merge recursively, ``null`` deletes a key, every other value (lists included)
    replaces what was there.
    """
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal the merge patch: expected a JSON object", 400)
    return _fresh_top(_merge_patch(obj, patch))


# --------------------------------------------------------------------------- strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        if prefix == _DELETE_PRIMITIVE:
            raise PatchError("invalid patch format of primitive list", 400)
        raise PatchError("invalid patch format of setElementOrder list", 400)
    return rest


def _is_directive(key: str) -> bool:
    # Only these are directives; other "$" keys are data (e.g. "$ref" in a CRD schema).
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_SET_ORDER) or key.startswith(_DELETE_PRIMITIVE)


def _smp_clean(v: Any) -> Any:
    """A patch value taken as is: copied, with directives and nulls dropped."""
    if isinstance(v, dict):
        return {k: _smp_clean(x) for k, x in v.items() if x is not None and not _is_directive(k)}
    if isinstance(v, list):
        out = []
        for x in v:
            if isinstance(x, dict) and _DIRECTIVE in x and (x[_DIRECTIVE] == "delete" or len(x) == 1):
                continue
            out.append(_smp_clean(x))
        return out
    return v


def _smp_map(orig: dict | None, patch: dict, t: _T) -> dict:
    directive = patch.get(_DIRECTIVE, _MISSING)
    if directive is not _MISSING:
        rest = {k: v for k, v in patch.items() if k != _DIRECTIVE}
        if directive == "replace":
            return _smp_map({}, rest, t)
        if directive == "delete":
            return {}
        if directive != "merge":  # apimachinery rejects "merge" on maps; kubesim treats it as the default
            raise PatchError(f"unknown patch type: {directive} in map: {patch}", 400)
        patch = rest

    out = dict(orig) if orig else {}
    patch = dict(patch)

    retain = patch.pop(_RETAIN_KEYS, _MISSING)
    if retain is not _MISSING:
        if not isinstance(retain, list):
            raise PatchError("invalid patch format of retainKeys", 400)
        keep = {_hkey(x) for x in retain}
        for k, v in patch.items():
            if v is None or k.startswith(_DELETE_PRIMITIVE) or k.startswith(_SET_ORDER):
                continue
            if _hkey(k) not in keep:
                raise PatchError("patch content doesn't match retainKeys list", 422)
        for k in list(out):
            if _hkey(k) not in keep:
                del out[k]

    for key in [k for k in patch if k.startswith(_SET_ORDER)]:
        _smp_set_element_order(out, patch, key, t)

    for k, pv in patch.items():
        delete_list = False
        if k.startswith(_DELETE_PRIMITIVE):
            k = _extract_key(k, _DELETE_PRIMITIVE)
            delete_list = True
        if pv is None:
            out.pop(k, None)
            continue
        ov = out.get(k, _MISSING)
        if ov is _MISSING:
            if not delete_list:
                out[k] = _smp_clean(pv)
            continue
        ct = _field(t, k)[0]
        if isinstance(ov, dict) and isinstance(pv, dict):
            out[k] = _smp_map(ov, pv, ct)
        elif isinstance(ov, list) and isinstance(pv, list):
            out[k] = _smp_list(ov, pv, ct, delete_list)
        elif not delete_list:
            out[k] = _smp_clean(pv)
    return out


def _smp_set_element_order(out: dict, patch: dict, key: str, t: _T) -> None:
    """apimachinery's mergePatchIntoOriginal: merge one list and enforce ``$setElementOrder``."""
    order = patch.pop(key)
    name = _extract_key(key, _SET_ORDER)
    if not isinstance(order, list):
        raise PatchError("invalid patch format of setElementOrder list", 400)
    ov = out.get(name, _MISSING)
    pv = patch.get(name, _MISSING)
    if ov is not _MISSING and not isinstance(ov, list):
        raise PatchError(f"invalid patch: {name} is not a list in the object", 400)
    if pv is not _MISSING and not isinstance(pv, list):
        raise PatchError(f"invalid patch: {name} is not a list in the patch", 400)
    lt = _field(t, name)[0]
    key_field = None
    if any(isinstance(x, dict) for x in order):
        key_field = lt.smp_key if lt.kind == "list" and lt.smp_merge and lt.smp_key else _common_key(order)
    _validate_set_order(pv if pv is not _MISSING else [], order, key_field)

    if ov is _MISSING and pv is _MISSING:
        return
    if pv is _MISSING:
        merged = list(ov)
    elif ov is _MISSING:
        merged = _smp_list([], pv, lt, False)
    else:
        merged = _smp_list(ov, pv, lt, False)
    original = ov if ov is not _MISSING else []
    patch_items, server_only = _partition(merged, order, key_field)
    out[name] = _normalize_order(patch_items, server_only, order, original, key_field)
    patch.pop(name, None)


def _common_key(order: list) -> str | None:
    for x in order:
        if isinstance(x, dict) and len(x) == 1:
            return next(iter(x))
    return None


def _validate_set_order(patch_list: list, order: list, mk: str | None) -> None:
    if not order or not patch_list:
        return
    items = [x for x in patch_list if not (isinstance(x, dict) and x.get(_DIRECTIVE) == "delete")] if mk else patch_list
    pi = oi = 0
    while pi < len(items) and oi < len(order):
        item = items[pi]
        if isinstance(item, dict) and _DIRECTIVE in item:
            pi += 1
            continue
        if mk:
            if not isinstance(item, dict) or mk not in item:
                raise PatchError(f"map: {item} does not contain declared merge key: {mk}", 400)
            o = order[oi]
            if not isinstance(o, dict) or mk not in o:
                raise PatchError(f"map: {o} does not contain declared merge key: {mk}", 400)
            equal = _eq(item[mk], o[mk])
        else:
            equal = _eq(item, order[oi])
        if equal:
            pi += 1
        oi += 1
    if pi < len(items):
        raise PatchError(
            f"The order in patch list:\n{patch_list}\n doesn't match $setElementOrder list:\n{order}\n", 400)


def _smp_list(orig: list, patch: list, t: _T, delete_list: bool) -> list:
    if t.kind != "list" or not t.smp_merge:
        if delete_list:
            return _delete_from_slice(orig, patch)
        return _smp_clean(patch)
    return _merge_slice(orig, patch, t, delete_list)


def _delete_from_slice(current: list, to_delete: list) -> list:
    gone = {_hkey(x) for x in to_delete}
    return [x for x in current if _hkey(x) not in gone]


def _merge_slice(original: list, patch: list, t: _T, delete_list: bool) -> list:
    if not original and not patch:
        return list(original)
    kinds = {("map" if isinstance(x, dict) else "list" if isinstance(x, list) else "scalar")
             for x in (*original, *patch)}
    if "list" in kinds:
        raise PatchError("lists of lists are not supported", 422)
    if len(kinds) > 1:
        raise PatchError(f"list element types are not identical: {original} {patch}", 400)
    if "scalar" in kinds:
        if delete_list:
            return _delete_from_slice(original, patch)
        merged, seen = [], set()
        for x in (*original, *patch):
            h = _hkey(x)
            if h not in seen:
                seen.add(h)
                merged.append(x)
        mk = None
    else:
        mk = t.smp_key
        if not mk:
            raise PatchError("cannot merge lists without merge key for type map", 400)
        original, patch = _special_elements(original, patch, mk)
        merged = _merge_by_key(original, patch, mk, t.elem)
    patch_items, server_only = _partition(merged, patch, mk)
    return _normalize_order(patch_items, server_only, patch, original, mk)


def _special_elements(original: list, patch: list, mk: str) -> tuple[list, list]:
    """apimachinery's mergeSliceWithSpecialElements: ``$patch`` on list elements."""
    rest: list = []
    replace = False
    for v in patch:
        directive = v.get(_DIRECTIVE, _MISSING)
        if directive is _MISSING:
            rest.append(v)
        elif directive == "delete":
            if mk not in v:
                raise PatchError(f"map: {v} does not contain declared merge key: {mk}", 400)
            key = _hkey(v[mk])
            original = [o for o in original if not (isinstance(o, dict) and mk in o and _hkey(o[mk]) == key)]
        elif directive == "replace":
            replace = True
        elif directive == "merge":  # rejected by apimachinery; kubesim merges the element
            rest.append({k: x for k, x in v.items() if k != _DIRECTIVE})
        else:
            raise PatchError(f"unknown patch type: {directive} in map: {v}", 400)
    if replace:
        return [_smp_clean(v) for v in rest], []
    return original, rest


def _merge_by_key(original: list, patch: list, mk: str, elem: _T) -> list:
    out = list(original)
    index: dict = {}
    for i, o in enumerate(out):
        if isinstance(o, dict) and mk in o:
            index.setdefault(_hkey(o[mk]), i)
    for v in patch:
        if mk not in v:
            raise PatchError(f"map: {v} does not contain declared merge key: {mk}", 400)
        h = _hkey(v[mk])
        i = index.get(h)
        if i is None:
            index[h] = len(out)
            out.append(_smp_clean(v))
        else:
            out[i] = _smp_map(out[i], v, elem)
    return out


def _order_key(x: Any, mk: str | None) -> Any:
    if mk is None:
        return _hkey(x)
    if isinstance(x, dict):
        return _hkey(x.get(mk))
    return ("?", id(x))


def _partition(merged: list, by: list, mk: str | None) -> tuple[list, list]:
    keys = {_order_key(x, mk) for x in by}
    inside, server_only = [], []
    for v in merged:
        (inside if _order_key(v, mk) in keys else server_only).append(v)
    return inside, server_only


def _positions(order: list, mk: str | None) -> dict:
    pos: dict = {}
    for i, x in enumerate(order):
        pos.setdefault(_order_key(x, mk), i)
    return pos


def _normalize_slice_order(to_sort: list, order: list, mk: str | None) -> list:
    pos = _positions(order, mk)
    idx = [pos.get(_order_key(x, mk), -1) for x in to_sort]
    if all(i >= 0 for i in idx):
        return [x for _, x in sorted(zip(idx, to_sort), key=lambda p: p[0])]
    # Go's sort.SliceStable with apimachinery's comparator, which calls an item that is
    # missing from ``order`` "less" than anything: an insertion sort moves it to the front.
    items = list(zip(idx, to_sort))
    for i in range(1, len(items)):
        j = i
        while j > 0:
            a, b = items[j][0], items[j - 1][0]
            if a >= 0 and b >= 0 and not a < b:
                break
            items[j], items[j - 1] = items[j - 1], items[j]
            j -= 1
    return [x for _, x in items]


def _normalize_order(patch_items: list, server_only: list, patch_order: list, server_order: list,
                     mk: str | None) -> list:
    """apimachinery's normalizeElementOrder + mergeSortedSlice.

    Patch items keep the patch's order, server-only items the live order; the two are
    interleaved by live position, and patch items that are new come first.
    """
    right = _normalize_slice_order(patch_items, patch_order, mk)
    left = _normalize_slice_order(server_only, server_order, mk)
    pos = _positions(server_order, mk)
    out = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = pos.get(_order_key(left[i], mk), -1)
            ri = pos.get(_order_key(right[j], mk), -1)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def apply_strategic_merge_patch(obj: dict, patch: object, group: str, kind: str) -> dict:
    """Apply a strategic merge patch (``application/strategic-merge-patch+json``).

    Follows apimachinery's ``StrategicMergeMapPatch``: maps merge recursively and ``null``
    deletes a key; lists merge by their ``patchMergeKey`` where the Go type says
    ``patchStrategy:"merge"`` (containers by name, container ports by containerPort,
    Service ports by port, finalizers as a set of scalars, ...) and are replaced
    otherwise. Directives: ``$patch: replace|delete|merge``, ``$retainKeys``,
    ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>``. Kinds without Go
    types (custom resources) answer 415, as the apiserver does.
    """
    if not has_strategic_schema(group, kind):
        raise PatchError(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            415,
        )
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal the strategic merge patch: expected a JSON object", 400)
    return _fresh_top(_smp_map(obj, patch, _SCHEMAS[(group, kind)]))


# --------------------------------------------------------------------------- field sets
#
# A field set is a Python set of paths; a path is a tuple of path elements spelled the
# way FieldsV1 spells them: "f:<field>", 'k:{"name":"nginx"}', 'v:"value"', "i:<index>".


@lru_cache(maxsize=16384)
def _scalar_pe(tag: str, hkey: tuple) -> str:
    return tag + _canon_json(hkey[1] if len(hkey) > 1 else None)


@lru_cache(maxsize=16384)
def _key_pe(key: tuple) -> str:
    return "k:" + _canon_json({name: (h[1] if len(h) > 1 else None) for name, h in key})


def _item_pe(t: _T, item: Any) -> str:
    if t.lt == "set":
        if isinstance(item, (dict, list)):
            raise _SchemaError("set list items must be scalars")
        return _scalar_pe("v:", _hkey(item))
    if not isinstance(item, dict):
        raise _SchemaError("associative list with keys may not have non-map elements")
    key = []
    for name in t.keys:
        v = item.get(name)
        if v is None:
            if name not in t.defaults:
                raise _SchemaError(f"associative list with keys had an element that lacks a key: {name}")
            v = t.defaults[name]
        if isinstance(v, (dict, list)):
            return "k:" + _canon_json({n: item.get(n, t.defaults.get(n)) for n in t.keys})
        key.append((name, _hkey(v)))
    return _key_pe(tuple(sorted(key)))


@lru_cache(maxsize=4096)
def _pe_string(pe: str) -> str:
    """One path element the way fieldpath.PathElement.String() prints it."""
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return "." + body
    if tag == "i:":
        return f"[{body}]"
    value = json.loads(body)
    if tag == "v:":
        return f"[={_value_string(value)}]"
    return "[" + ",".join(f"{k}={_value_string(value[k])}" for k in sorted(value)) + "]"


def _value_string(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return _canon_json(v)


def _path_string(path: tuple) -> str:
    return "".join(_pe_string(pe) for pe in path)


def _value_order(v: Any) -> tuple:
    if isinstance(v, bool):
        return (2, v)
    if isinstance(v, (int, float)):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    if isinstance(v, list):
        return (3, _canon_json(v))
    if isinstance(v, dict):
        return (4, _canon_json(v))
    return (5,)


@lru_cache(maxsize=4096)
def _pe_order(pe: str) -> tuple:
    """Sort key matching fieldpath.PathElement.Compare: fields, keys, values, indexes."""
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return (0, body)
    if tag == "k:":
        value = json.loads(body)
        return (1, tuple((k, _value_order(value[k])) for k in sorted(value)))
    if tag == "v:":
        return (2, _value_order(json.loads(body)))
    return (3, int(body))


def _normalize_pe(pe: str) -> str:
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return pe
    if tag in ("k:", "v:"):
        value = json.loads(body)
        if tag == "k:" and not isinstance(value, dict):
            raise ValueError(pe)
        return tag + _canon_json(value)
    if tag == "i:":
        return "i:%d" % int(body)
    raise ValueError(f"unknown path element {pe!r}")


def _trie(paths: Iterable[tuple]) -> dict:
    """Nested dicts of path elements; the key ``None`` marks a member of the set."""
    root: dict = {}
    for p in paths:
        node = root
        for pe in p:
            node = node.setdefault(pe, {})
        node[None] = True
    return root


def _fields_v1(paths: set) -> dict:
    def render(node: dict) -> dict:
        children = sorted((k for k in node if k is not None), key=_pe_order)
        out: dict = {}
        if None in node and children:
            out["."] = {}
        for k in children:
            out[k] = render(node[k])
        return out

    return render(_trie(paths))


def _parse_fields_v1(node: Any, prefix: tuple, out: set) -> None:
    if not isinstance(node, dict):
        raise ValueError("fieldsV1 must be a JSON object")
    if not node:
        if prefix:
            out.add(prefix)
        return
    for k, v in node.items():
        if k == ".":
            if prefix:
                out.add(prefix)
            continue
        _parse_fields_v1(v, prefix + (_normalize_pe(k),), out)


def _sorted_paths(paths: set) -> list[tuple]:
    """Set iteration order of structured-merge-diff: members first, then children, sorted."""
    out: list[tuple] = []

    def walk(node: dict, prefix: tuple) -> None:
        keys = sorted((k for k in node if k is not None), key=_pe_order)
        for k in keys:
            if None in node[k]:
                out.append(prefix + (k,))
        for k in keys:
            if len(node[k]) > (1 if None in node[k] else 0):
                walk(node[k], prefix + (k,))

    walk(_trie(paths), ())
    return out


def _to_set(v: Any, t: _T, path: tuple, out: set) -> None:
    """structured-merge-diff's ToFieldSet: the fields an applied configuration sets."""
    if isinstance(v, dict):
        if not _granular_map(t):
            out.add(path)
            return
        for key, val in v.items():
            ct, declared = _field(t, key)
            p = path + ("f:" + key,)
            _to_set(val, ct, p, out)
            if not declared or val is None or (isinstance(val, dict) and not val):
                out.add(p)
        return
    if isinstance(v, list):
        if _list_type(t) == "atomic":
            out.add(path)
            return
        seen = set()
        for item in v:
            try:
                pe = _item_pe(t, item)
            except _SchemaError as exc:
                raise _SchemaError(f"{_path_string(path)}: {exc}") from None
            if pe in seen:
                raise _SchemaError(f"{_path_string(path)}: duplicate entries for key {_pe_string(pe)}")
            seen.add(pe)
            p = path + (pe,)
            _to_set(item, t.elem, p, out)
            out.add(p)
        return
    if path:
        out.add(path)


def _index_items(t: _T, items: list, path: tuple) -> tuple[list, dict]:
    order, found = [], {}
    for item in items:
        try:
            pe = _item_pe(t, item)
        except _SchemaError as exc:
            raise _SchemaError(f"{_path_string(path)}: {exc}") from None
        if pe not in found:  # duplicates: the first one wins
            found[pe] = item
            order.append(pe)
    return order, found


def _compare(l: Any, r: Any, t: _T, path: tuple, added: set, modified: set, removed: set) -> None:
    """structured-merge-diff's Compare: which fields ``r`` added, modified or removed."""
    if l is r:
        return  # shared, unchanged subtree (results of this module share what they do not change)
    if isinstance(l, dict) or isinstance(r, dict):
        if (l is _MISSING or l is None or isinstance(l, dict)) and (r is _MISSING or r is None or isinstance(r, dict)) \
                and _granular_map(t):
            ld = l if isinstance(l, dict) else {}
            rd = r if isinstance(r, dict) else {}
            if ld or rd:
                for key, lv in ld.items():
                    _compare(lv, rd.get(key, _MISSING), _field(t, key)[0], path + ("f:" + key,), added, modified, removed)
                for key, rv in rd.items():
                    if key not in ld:
                        _compare(_MISSING, rv, _field(t, key)[0], path + ("f:" + key,), added, modified, removed)
                if l is _MISSING:
                    added.add(path)
                elif r is _MISSING:
                    removed.add(path)
                return
    elif isinstance(l, list) or isinstance(r, list):
        if (l is _MISSING or l is None or isinstance(l, list)) and (r is _MISSING or r is None or isinstance(r, list)) \
                and _list_type(t) != "atomic":
            ll = l if isinstance(l, list) else []
            rl = r if isinstance(r, list) else []
            if l is not _MISSING and r is not _MISSING and _eq(ll, rl):
                return  # equal lists: skip computing the item keys
            if ll or rl:
                l_order, l_items = _index_items(t, ll, path)
                r_order, r_items = _index_items(t, rl, path)
                for pe in r_order:
                    _compare(l_items.get(pe, _MISSING), r_items[pe], t.elem, path + (pe,), added, modified, removed)
                for pe in l_order:
                    if pe not in r_items:
                        _compare(l_items[pe], _MISSING, t.elem, path + (pe,), added, modified, removed)
                if l is _MISSING:
                    added.add(path)
                elif r is _MISSING:
                    removed.add(path)
                return
    if l is _MISSING:
        added.add(path)
    elif r is _MISSING:
        removed.add(path)
    elif not _eq(l, r):
        modified.add(path)


def _merge(l: Any, r: Any, t: _T) -> Any:
    """structured-merge-diff's merge of an applied configuration ``r`` into ``l``.

    A null in the configuration stays null in the result (so that nulling a field owned
    by someone else is a conflict, as in Kubernetes); :func:`_drop_nulls` removes them
    once ownership is settled, as the apiserver's typed round-trip does.
    """
    if r is None:
        if (isinstance(l, dict) and l and _granular_map(t)) or \
                (isinstance(l, list) and l and _list_type(t) != "atomic"):
            return l
        return None
    if isinstance(r, dict):
        if not _granular_map(t):
            return r
        ld = l if isinstance(l, dict) else {}
        out = dict(ld)
        for k, rv in r.items():
            out[k] = _merge(ld.get(k, _MISSING), rv, _field(t, k)[0])
        return out
    if isinstance(r, list):
        if _list_type(t) == "atomic":
            return r
        return _merge_list(l if isinstance(l, list) else [], r, t)
    return r


def _merge_list(ll: list, rl: list, t: _T) -> list:
    """Merge of associative lists and sets, with structured-merge-diff's item order."""
    l_order, l_items = _index_items(t, ll, ())
    r_order, r_items = _index_items(t, rl, ())
    is_set = t.lt == "set"

    def take(pe: str) -> None:
        rv = r_items.get(pe, _MISSING)
        if rv is _MISSING:
            out.append(l_items[pe])
            return
        v = rv if is_set else _merge(l_items.get(pe, _MISSING), rv, t.elem)
        if v is not None:
            out.append(v)

    shared = [pe for pe in r_order if pe in l_items]
    si = 0
    next_shared = shared[0] if shared else None
    out: list = []
    li = ri = 0
    nl, nr = len(l_order), len(r_order)
    while li < nl or ri < nr:
        if li < nl and ri < nr:
            pe = l_order[li]
            if pe == r_order[ri]:
                take(pe)
                li += 1
                ri += 1
                si += 1
                next_shared = shared[si] if si < len(shared) else None
                continue
            if pe in r_items and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < nl and l_order[li] not in r_items:
            take(l_order[li])
            li += 1
            continue
        if ri < nr:
            pe = r_order[ri]
            take(pe)
            ri += 1
            if next_shared is not None and next_shared == pe:
                si += 1
                next_shared = shared[si] if si < len(shared) else None
            continue
        li += 1  # an already merged item: never reached with well-formed input, but never loop
    return out


def _drop_nulls(v: Any) -> Any:
    """Remove null-valued keys, copying only the containers that hold one."""
    if isinstance(v, dict):
        out = None
        for k, x in v.items():
            nx = None if x is None else _drop_nulls(x)
            if nx is not x or x is None:
                if out is None:
                    out = dict(v)
                if x is None:
                    del out[k]
                else:
                    out[k] = nx
        return v if out is None else out
    if isinstance(v, list):
        new = [_drop_nulls(x) for x in v]
        return new if any(a is not b for a, b in zip(new, v)) else v
    return v


def _ensure_named(paths: set, root: _T) -> set:
    """fieldpath.Set.EnsureNamedFieldsAreMembers: declared struct fields on the way become members."""
    out = set(paths)

    def walk(node: dict, t: _T, prefix: tuple) -> None:
        for pe, child in node.items():
            if pe is None:
                continue
            p = prefix + (pe,)
            if pe[0] == "f":
                ct, declared = _field(t, pe[2:])
                if declared:
                    out.add(p)
            else:
                ct = _elem(t)
            walk(child, ct, p)

    walk(_trie(paths), root, ())
    return out


def _remove_paths(v: Any, t: _T, node: dict) -> Any:
    """structured-merge-diff's RemoveItems: drop the members of ``node`` with their subtrees."""
    if isinstance(v, dict):
        if not _granular_map(t):
            return v
        out = None
        for k, val in v.items():
            sub = node.get("f:" + k)
            if sub is None:
                continue
            if out is None:
                out = dict(v)
            if None in sub:
                del out[k]
                continue
            nv = _remove_paths(val, _field(t, k)[0], sub)
            if nv is _EMPTIED:
                del out[k]
            else:
                out[k] = nv
        if out is None:
            return v
        return out if out else _EMPTIED
    if isinstance(v, list) and v and _list_type(t) != "atomic":
        items: list = []
        changed = False
        for item in v:
            try:
                pe = _item_pe(t, item)
            except _SchemaError:
                items.append(item)
                continue
            sub = node.get(pe)
            if sub is None:
                items.append(item)
                continue
            changed = True
            if None in sub:
                continue
            nv = _remove_paths(item, t.elem, sub)
            items.append({} if nv is _EMPTIED else nv)
        if not changed:
            return v
        return items if items else _EMPTIED
    return v


# --------------------------------------------------------------------------- managedFields

# fieldmanager's stripMetaManager removes exactly these paths from every manager's set.
_STRIPPED = frozenset([
    ("f:apiVersion",), ("f:kind",), ("f:metadata",),
    ("f:metadata", "f:name"), ("f:metadata", "f:namespace"), ("f:metadata", "f:creationTimestamp"),
    ("f:metadata", "f:selfLink"), ("f:metadata", "f:uid"), ("f:metadata", "f:clusterName"),
    ("f:metadata", "f:generation"), ("f:metadata", "f:managedFields"), ("f:metadata", "f:resourceVersion"),
])


class _Entry:
    __slots__ = ("manager", "operation", "api_version", "time", "subresource", "paths", "source")

    def __init__(self, manager: str, operation: str, api_version: str, time: str | None,
                 subresource: str, paths: set, source: tuple | None = None):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.time = time
        self.subresource = subresource
        self.paths = paths
        self.source = source  # (decoded paths, fieldsV1 dict) to reuse when unchanged

    def identifier(self) -> str:
        """fieldmanager's BuildManagerIdentifier (appliers are not told apart by version)."""
        d = {"manager": self.manager, "operation": self.operation}
        if self.operation == "Update":
            d["apiVersion"] = self.api_version
        if self.subresource:
            d["subresource"] = self.subresource
        return json.dumps(d, separators=(",", ":"))

    def display(self) -> str:
        """fieldmanager's printManager, as used in conflict messages."""
        s = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            s += f" with subresource {json.dumps(self.subresource, ensure_ascii=False)}"
        if self.operation == "Update":
            s += f" using {self.api_version}"
        return s


def _entry_key(manager: str, operation: str, subresource: str, api_version: str) -> tuple:
    return (manager, operation, subresource, api_version if operation == "Update" else "")


def _decode_managed(mf: Any) -> dict[tuple, _Entry] | None:
    """Decode metadata.managedFields; None when it is malformed."""
    if mf is None:
        return {}
    if not isinstance(mf, list):
        return None
    out: dict[tuple, _Entry] = {}
    try:
        for e in mf:
            if not isinstance(e, dict):
                return None
            op = e.get("operation")
            api_version = e.get("apiVersion")
            if op not in ("Apply", "Update") or not api_version or e.get("fieldsType") != "FieldsV1":
                return None
            fields = e.get("fieldsV1") or {}
            parsed = _parse_cached(json.dumps(fields, separators=(",", ":")))
            manager = e.get("manager") or ""
            subresource = e.get("subresource") or ""
            out[_entry_key(manager, op, subresource, api_version)] = _Entry(
                manager, op, api_version, e.get("time"), subresource, set(parsed), (parsed, fields))
    except (ValueError, TypeError, AttributeError):
        return None
    return out


@lru_cache(maxsize=512)
def _parse_cached(fields_json: str) -> frozenset:
    paths: set = set()
    _parse_fields_v1(json.loads(fields_json), (), paths)
    return frozenset(paths)


def _time_seconds(t: str | None) -> float:
    if not t:
        return 0
    try:
        return int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp())
    except (ValueError, TypeError, AttributeError):
        return 0


def _encode_managed(managers: dict[tuple, _Entry]) -> list[dict]:
    entries = sorted(
        managers.values(),
        key=lambda e: (e.operation, _time_seconds(e.time), e.manager, e.api_version, e.subresource),
    )
    out = []
    for e in entries:
        d: dict = {"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version}
        if e.time:
            d["time"] = e.time
        d["fieldsType"] = "FieldsV1"
        if e.source is not None and e.paths == e.source[0]:
            d["fieldsV1"] = e.source[1]
        else:
            d["fieldsV1"] = _fields_v1(e.paths)
        if e.subresource:
            d["subresource"] = e.subresource
        out.append(d)
    return out


def _finish_managers(managers: dict[tuple, _Entry]) -> None:
    for key in list(managers):
        e = managers[key]
        e.paths -= _STRIPPED
        if not e.paths:
            del managers[key]


def _with_managed(obj: dict, managers: dict[tuple, _Entry]) -> dict:
    out = _fresh_top(obj)
    meta = out.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        out["metadata"] = meta
    if managers:
        meta["managedFields"] = _encode_managed(managers)
    else:
        meta.pop("managedFields", None)
    return out


def _without_managed(obj: dict) -> dict:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def _reset_prefixes(subresource: str) -> tuple[tuple, ...]:
    """Fields the strategy resets, which the apiserver leaves out of ownership."""
    return (("f:spec",),) if subresource == "status" else (("f:status",),)


def _drop_reset(paths: set, prefixes: tuple[tuple, ...]) -> set:
    if not paths:
        return paths
    heads = {x[0] for x in prefixes}  # reset fields are top-level fields
    return {p for p in paths if not p or p[0] not in heads}


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _diff(lhs: dict, rhs: dict, root: _T, reset: tuple[tuple, ...]) -> tuple[set, set, set]:
    added: set = set()
    modified: set = set()
    removed: set = set()
    _compare(lhs, rhs, root, (), added, modified, removed)
    return _drop_reset(added, reset), _drop_reset(modified, reset), _drop_reset(removed, reset)


def _track_update(managers: dict[tuple, _Entry], lhs: dict, rhs: dict, key: tuple, entry_args: tuple,
                  root: _T, reset: tuple[tuple, ...], now: str) -> None:
    """An Update operation: the writer takes every field it changed, nobody keeps removed ones."""
    added, modified, removed = _diff(lhs, rhs, root, reset)
    changed = (added | modified) - _STRIPPED
    for e in managers.values():
        if changed:
            e.paths -= changed
        if removed:
            e.paths -= removed
    if changed:
        e = managers.get(key)
        if e is None:
            e = managers[key] = _Entry(*entry_args, now, key[2], set())
        e.paths |= changed
        e.time = now


def _is_reset_request(mf: Any) -> bool:
    """An empty list, or a list of one empty entry, asks the apiserver to drop managedFields."""
    return isinstance(mf, list) and (not mf or (len(mf) == 1 and mf[0] == {}))


def record_update(old: dict | None, new: dict, *, manager: str, group: str, version: str, kind: str,
                  now: str, subresource: str = "") -> dict:
    """Record the ownership of a non-apply write (create, update, patch) in ``new``.

    The fields that differ between ``old`` and ``new`` go to ``manager`` with operation
    ``Update`` and are taken from every other manager, as the apiserver's field manager
    does; a later apply by someone else then conflicts on them. ``old=None`` is a create:
    everything ``new`` sets goes to ``manager``. Returns ``new`` with
    ``metadata.managedFields`` set (or removed when nobody owns anything).

    As in Kubernetes: managedFields sent in ``new`` replace the live ones when they are
    valid (an empty list, or ``[{}]``, clears them), except on subresources; an existing
    object without managedFields is not tracked by updates; failures never fail the
    write, they leave the object without managedFields.
    """
    api_version = _api_version(group, version)
    root = _schema(group, kind)
    managers: dict[tuple, _Entry] | None = None
    if subresource:
        managers = _decode_managed((old.get("metadata") or {}).get("managedFields")) if old else {}
    else:
        new_meta = new.get("metadata")
        new_mf = new_meta.get("managedFields") if isinstance(new_meta, dict) else None
        if _is_reset_request(new_mf):
            managers = {}
        else:
            managers = _decode_managed(new_mf)
            if not managers and old is not None:
                managers = _decode_managed((old.get("metadata") or {}).get("managedFields"))
    if managers is None:
        managers = {}
    new_body = _without_managed(new)
    if old is not None and not managers:
        return _with_managed(new_body, {})
    lhs = _without_managed(old) if old is not None else _zero_object(group, kind)
    key = _entry_key(manager, "Update", subresource, api_version)
    try:
        _track_update(managers, lhs, new_body, key, (manager, "Update", api_version), root,
                      _reset_prefixes(subresource), now)
    except _SchemaError:
        return _with_managed(new_body, {})
    _finish_managers(managers)
    return _with_managed(new_body, managers)


def _conflict_error(conflicts: list[tuple[_Entry, list[tuple]]]) -> ApplyConflict:
    pairs: list[tuple[str, str]] = []
    causes: list[dict[str, str]] = []
    flat: list[tuple[_Entry, str]] = []
    for e, paths in conflicts:
        for p in paths:
            ps = _path_string(p)
            pairs.append((e.manager, ps))
            causes.append({"reason": "FieldManagerConflict", "message": f"conflict with {e.display()}", "field": ps})
            flat.append((e, ps))
    if len(flat) == 1:
        e, ps = flat[0]
        message = f"Apply failed with 1 conflict: conflict with {e.display()}: {ps}"
    else:
        lines = []
        for e, paths in sorted(conflicts, key=lambda c: c[0].identifier()):
            lines.append(f"conflicts with {e.display()}:")
            lines.extend(f"- {_path_string(p)}" for p in paths)
        message = f"Apply failed with {len(flat)} conflicts: " + "\n".join(lines)
    return ApplyConflict(pairs, message, causes)


def server_side_apply(live: dict | None, applied: dict, *, manager: str, force: bool, group: str,
                      version: str, kind: str, now: str, subresource: str = "") -> dict:
    """Server-side apply of the configuration ``applied`` onto ``live`` (None: create).

    The configuration is the manager's full intent. It is merged into the live object
    (associative lists by their keys, sets as sets, atomic lists and structs replaced);
    the manager then owns exactly the fields it sets. Fields it owned before and no
    longer sets are removed, unless another manager owns them. Changing a field owned by
    another manager raises :class:`ApplyConflict` unless ``force`` is set, in which case
    ownership moves. Returns the new object with ``metadata.managedFields``.

    Errors, as the apiserver's: 400 for a configuration of another kind or version, or
    one that carries ``metadata.managedFields``; 422 for a configuration that does not fit
    the schema (e.g. two containers with the same name).
    """
    if not isinstance(applied, dict):
        raise PatchError("error decoding YAML: the apply configuration must be an object", 400)
    api_version = _api_version(group, version)
    if applied.get("apiVersion") != api_version or applied.get("kind") != kind:
        av = applied.get("apiVersion")
        g, _, v = av.rpartition("/") if isinstance(av, str) else ("", "", "")
        raise PatchError(f"invalid object type: {g}/{v}, Kind={applied.get('kind') or ''}", 400)
    meta = applied.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise PatchError("metadata.managedFields must be nil", 400)

    root = _schema(group, kind)
    reset = _reset_prefixes(subresource)
    managers: dict[tuple, _Entry] = {}
    live_body: dict | None = None
    if live is not None:
        managers = _decode_managed((live.get("metadata") or {}).get("managedFields")) or {}
        live_body = _without_managed(live)
    try:
        if live_body is not None and not managers:
            # Fields of an object nobody tracked yet belong to "before-first-apply".
            bfa = _entry_key("before-first-apply", "Update", subresource, api_version)
            _track_update(managers, _zero_object(group, kind), live_body, bfa,
                          ("before-first-apply", "Update", api_version), root, reset, now)

        base = live_body if live_body is not None else {}
        merged = _merge(base, applied, root)
        if merged is None:
            merged = {}
        applied_set: set = set()
        _to_set(applied, root, (), applied_set)
        applied_set = _drop_reset(applied_set, reset)

        key = _entry_key(manager, "Apply", subresource, api_version)
        previous = managers.get(key)
        entry = _Entry(manager, "Apply", api_version, previous.time if previous else None, subresource,
                       applied_set, previous.source if previous else None)
        managers[key] = entry

        if previous is not None and not previous.paths <= applied_set:
            owned: set = set()
            for e in managers.values():
                owned |= e.paths
            gone = _ensure_named(previous.paths, root) - _ensure_named(owned, root)
            if gone:
                merged = _remove_paths(merged, root, _trie(gone))
                if merged is _EMPTIED:
                    merged = {}

        others = [e for k, e in managers.items() if k != key and e.paths]
        if others:
            added, modified, removed = _diff(base, merged, root, reset)
            changed = added | modified
            conflicts = []
            for e in others:
                hit = e.paths & changed
                if hit:
                    conflicts.append((e, _sorted_paths(hit)))
            if conflicts and not force:
                raise _conflict_error(conflicts)
            for e in others:
                if changed:
                    e.paths -= changed
                if removed:
                    e.paths -= removed
    except _SchemaError as exc:
        raise PatchError(f"failed to create typed patch object ({group}/{version}, Kind={kind}): {exc}", 422) from None

    merged = _drop_nulls(merged)
    if live_body is None or previous is None or not _eq(base, merged):
        entry.time = now
    _finish_managers(managers)
    return _with_managed(merged, managers)
