"""Field selectors with kube-apiserver semantics: ``k8s.io/apimachinery/pkg/fields`` plus the
per-kind field label conversion functions registered by the apiserver
(``pkg/apis/*/v1/conversion.go``) and the registry ``ToSelectableFields`` functions --
``parse_field_selector``, ``supported_fields`` and ``object_fields``. Only kubesim serves them;
error messages are the apiserver's own texts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..kube.errors import SelectorError
from ..kube.selectors import go_quote

__all__ = [
    "FieldSelector",
    "escape_field_value",
    "field_label_error",
    "object_fields",
    "parse_field_selector",
    "supported_fields",
    "unescape_field_value",
]


# --------------------------------------------------------------------------
# Field selectors (fields/selector.go)
# --------------------------------------------------------------------------


def escape_field_value(value: str) -> str:
    """``fields.EscapeValue``: backslash-escape ``\\``, ``,`` and ``=``."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_field_value(value: str) -> str:
    """``fields.UnescapeValue``; raises SelectorError on bad escapes.

    Recognised escapes are ``\\\\``, ``\\,`` and ``\\=``. An unescaped ``,`` or
    ``=`` in a value is an error; so is a trailing lone backslash. (``!`` needs
    no escaping: it is only special as part of the ``!=`` operator, and the
    first operator in a term wins.)
    """
    if not any(c in value for c in "\\,="):
        return value
    out = []
    in_slash = False
    for c in value:
        if in_slash:
            if c in "\\,=":
                out.append(c)
            else:
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            in_slash = False
            continue
        if c == "\\":
            in_slash = True
        elif c in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    if not text:
        return []
    terms = []
    start = 0
    in_slash = False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


_TERM_OPERATORS = ("!=", "==", "=")


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in _TERM_OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


class FieldSelector:
    """An immutable field selector: a conjunction of ``field=value`` / ``field!=value``.

    ``requirements`` is a list of ``(field, op, value)`` with op ``"="`` or
    ``"!="`` (``==`` is normalised to ``=``, as upstream) and the value
    unescaped. A field absent from the object's field set reads as ``""``.
    """

    __slots__ = ("_terms",)
    _terms: tuple[tuple[str, str, str], ...]

    def __init__(self, terms: Iterable[tuple[str, str, str]] = ()) -> None:
        object.__setattr__(self, "_terms", tuple((f, op, v) for f, op, v in terms))

    def __setattr__(self, name: str, value: Any) -> None:  # pragma: no cover - immutability guard
        raise AttributeError("FieldSelector is immutable")

    @classmethod
    def everything(cls) -> FieldSelector:
        return cls()

    @property
    def requirements(self) -> list[tuple[str, str, str]]:
        return list(self._terms)

    @property
    def empty(self) -> bool:
        return not self._terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        for f, op, v in self._terms:
            have = fields.get(f, "")
            if (have == v) != (op == "="):
                return False
        return True

    def requires_exact_match(self, field: str) -> str | None:
        """The value ``field`` must equal (``RequiresExactMatch``), else None."""
        for f, op, v in self._terms:
            if f == field and op == "=":
                return v
        return None

    def __str__(self) -> str:
        return ",".join(f"{f}{op}{escape_field_value(v)}" for f, op, v in self._terms)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._terms == other._terms

    def __hash__(self) -> int:
        return hash(self._terms)


def parse_field_selector(
    text: str,
    supported: Collection[str] | None,
    *,
    kind: str | None = None,
) -> FieldSelector:
    """``fields.ParseSelector`` followed by the apiserver's field label conversion.

    * Terms are split on unescaped commas, sorted, and each split at its first
      ``!=``, ``==`` or ``=``; a term with no operator raises
      ``invalid selector: '<text>'; can't understand '<term>'``. Empty terms
      (``a=b,``) are ignored. No whitespace trimming happens (upstream neither).
    * Values are unescaped (see ``unescape_field_value``).
    * Each field must be in ``supported`` (pass None to skip that check, i.e.
      plain ``fields.ParseSelector``), else the kind's conversion error, by
      default ``field label not supported: <field>``. Pass ``kind`` to get the
      exact per-kind text (see ``field_label_error``) and legacy aliases
      (Pod ``spec.host`` is rewritten to ``spec.nodeName``).
    """
    parts = sorted(_split_terms(text))
    terms: list[tuple[str, str, str]] = []
    for part in parts:
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        value = unescape_field_value(rhs)
        terms.append((lhs, "!=" if op == "!=" else "=", value))
    if supported is not None:
        aliases = _FIELD_ALIASES.get(kind or "", {})
        converted = []
        for f, op, v in terms:
            if f not in supported:
                raise SelectorError(field_label_error(kind, f))
            converted.append((aliases.get(f, f), op, v))
        terms = converted
    return FieldSelector(terms)


# ---- per-kind field labels ------------------------------------------------

_META = ("metadata.name", "metadata.namespace")

# Labels accepted by each kind's registered field label conversion func
# (k8s.io/kubernetes/pkg/apis/<group>/<version>/conversion.go). Kinds without a
# registered func fall back to runtime.DefaultMetaV1FieldSelectorConversion.
_SUPPORTED: dict[str, frozenset[str]] = {
    "Pod": frozenset(
        _META
        + (
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            "spec.host",
        )
    ),
    # cluster-scoped: metadata.namespace is rejected (400), not just empty
    "Node": frozenset(("metadata.name", "spec.unschedulable")),
    "Namespace": frozenset(("metadata.name", "status.phase")),
    "ReplicationController": frozenset(_META + ("status.replicas",)),
    "Event": frozenset(
        _META
        + (
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        )
    ),
    "Secret": frozenset(_META + ("type",)),
    "Service": frozenset(_META + ("spec.clusterIP", "spec.type")),
    "Job": frozenset(_META + ("status.successful",)),
    "CertificateSigningRequest": frozenset(("metadata.name", "spec.signerName")),
    "ClusterTrustBundle": frozenset(("metadata.name", "spec.signerName")),
}

_FIELD_ALIASES: dict[str, dict[str, str]] = {
    # "for backwards compatibility with old v1 clients which send spec.host"
    "Pod": {"spec.host": "spec.nodeName"},
}

# Built-in kinds that register no conversion func: they accept exactly
# metadata.name and metadata.namespace (even when cluster-scoped) and reject
# anything else with DefaultMetaV1FieldSelectorConversion's message. Note the
# whole apps group is here: apps/v1 ReplicaSet does NOT accept status.replicas.
_DEFAULT_CONVERSION_KINDS = frozenset(
    {
        "ConfigMap",
        "Endpoints",
        "LimitRange",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "PodTemplate",
        "ResourceQuota",
        "ServiceAccount",
        "ComponentStatus",
        "Binding",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "ControllerRevision",
        "CronJob",
        "HorizontalPodAutoscaler",
        "Ingress",
        "IngressClass",
        "NetworkPolicy",
        "EndpointSlice",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "StorageClass",
        "VolumeAttachment",
        "CSIDriver",
        "CSINode",
        "CSIStorageCapacity",
        "PriorityClass",
        "RuntimeClass",
        "Lease",
        "CustomResourceDefinition",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "FlowSchema",
        "PriorityLevelConfiguration",
    }
)


def field_label_error(kind: str | None, label: str) -> str:
    """The apiserver's message for an unsupported field label of ``kind``.

    * kinds with a registered conversion func: ``field label not supported: <label>``
      (batch/v1 Job: ``field label "<label>" not supported for Job``);
    * built-in kinds without one: ``"<label>" is not a known field selector:
      only "metadata.name", "metadata.namespace"``;
    * None or any other kind (custom resources): ``field label not supported: <label>``,
      the apiextensions-apiserver text.
    """
    if kind == "Job":
        return f"field label {go_quote(label)} not supported for Job"
    if kind in _DEFAULT_CONVERSION_KINDS:
        return f'{go_quote(label)} is not a known field selector: only "metadata.name", "metadata.namespace"'
    return f"field label not supported: {label}"


def supported_fields(kind: str, *, namespaced: bool = True) -> frozenset[str]:
    """Field labels the apiserver accepts in ``?fieldSelector=`` for ``kind``.

    Includes legacy aliases (Pod ``spec.host``) and labels that are accepted
    but never populated (Pod ``status.podIPs`` -- upstream accepts it, then
    matches it against ""). Unknown kinds are treated as custom resources:
    ``metadata.name`` plus ``metadata.namespace`` when ``namespaced``.
    """
    if kind in _SUPPORTED:
        return _SUPPORTED[kind]
    if kind in _DEFAULT_CONVERSION_KINDS or namespaced:
        return frozenset(_META)
    return frozenset(("metadata.name",))


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _s(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _i(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "0"
    try:
        return str(int(v))
    except (TypeError, ValueError):
        return "0"


def object_fields(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    """The field set the registry exposes for matching (``ToSelectableFields``).

    Always ``metadata.name`` and ``metadata.namespace`` ("" when absent, which
    is what a missing key reads as anyway), plus per kind:

    * Pod: spec.nodeName, spec.restartPolicy, spec.schedulerName,
      spec.serviceAccountName, spec.hostNetwork ("true"/"false"), status.phase,
      status.podIP (first of status.podIPs), status.nominatedNodeName -- and
      spec.host mirroring spec.nodeName so the legacy alias also works when the
      selector was parsed without ``kind``;
    * Node: spec.unschedulable ("true"/"false");
    * Namespace: status.phase;  Secret: type;  Service: spec.clusterIP, spec.type;
    * ReplicationController and ReplicaSet: status.replicas (decimal; note the
      apiserver rejects this label for apps/v1 ReplicaSet before matching);
    * Job: status.successful (from status.succeeded);
    * Event: involvedObject.{kind,namespace,name,uid,apiVersion,resourceVersion,
      fieldPath}, reason, reportingComponent (reportingController), source
      (source.component, falling back to reportingController), type -- read
      from either the core/v1 or the events.k8s.io/v1 shape;
    * CertificateSigningRequest / ClusterTrustBundle: spec.signerName.
    """
    meta = obj.get("metadata") or {}
    out = {"metadata.name": _s(meta.get("name")), "metadata.namespace": _s(meta.get("namespace"))}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == "Pod":
        pod_ips = status.get("podIPs") or []
        pod_ip = _s(_get(pod_ips[0], "ip")) if pod_ips else _s(status.get("podIP"))
        out.update(
            {
                "spec.nodeName": _s(spec.get("nodeName")),
                "spec.host": _s(spec.get("nodeName")),
                "spec.restartPolicy": _s(spec.get("restartPolicy")),
                "spec.schedulerName": _s(spec.get("schedulerName")),
                "spec.serviceAccountName": _s(spec.get("serviceAccountName")),
                "spec.hostNetwork": "true" if spec.get("hostNetwork") is True else "false",
                "status.phase": _s(status.get("phase")),
                "status.podIP": pod_ip,
                "status.nominatedNodeName": _s(status.get("nominatedNodeName")),
            }
        )
    elif kind == "Node":
        out["spec.unschedulable"] = "true" if spec.get("unschedulable") is True else "false"
    elif kind == "Namespace":
        out["status.phase"] = _s(status.get("phase"))
    elif kind == "Secret":
        out["type"] = _s(obj.get("type"))
    elif kind == "Service":
        out["spec.clusterIP"] = _s(spec.get("clusterIP"))
        out["spec.type"] = _s(spec.get("type"))
    elif kind in ("ReplicationController", "ReplicaSet"):
        out["status.replicas"] = _i(status.get("replicas"))
    elif kind == "Job":
        out["status.successful"] = _i(status.get("succeeded"))
    elif kind in ("CertificateSigningRequest", "ClusterTrustBundle"):
        out["spec.signerName"] = _s(spec.get("signerName"))
    elif kind == "Event":
        if "regarding" in obj or str(obj.get("apiVersion", "")).startswith("events.k8s.io/"):
            ref = obj.get("regarding") or {}
            reporting = _s(obj.get("reportingController"))
            source = _s(_get(obj, "deprecatedSource", "component")) or reporting
        else:
            ref = obj.get("involvedObject") or {}
            reporting = _s(obj.get("reportingComponent"))
            source = _s(_get(obj, "source", "component")) or reporting
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            out[f"involvedObject.{f}"] = _s(ref.get(f))
        out["reason"] = _s(obj.get("reason"))
        out["reportingComponent"] = reporting
        out["source"] = source
        out["type"] = _s(obj.get("type"))
    return out
