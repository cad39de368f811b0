"""The admission checks and defaults a real apiserver applies, for the kinds clients rely on.

Only what changes client-visible behaviour is here: name rules, the Deployment selector contract,
defaults that controllers and printers read. Anything else is accepted as sent.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from ..kube.errors import SelectorError
from ..kube.selectors import label_selector_from_dict
from . import events
from .errors import StatusError, invalid
from .resources import ResourceType

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

# Kinds whose names must be DNS-1123 labels rather than subdomains.
_LABEL_NAMED = {("", "Namespace"), ("", "Service")}
# RBAC objects accept any path segment name (e.g. "system:discovery").
_PATH_NAMED = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def name_problems(rt: ResourceType, name: str) -> list[str]:
    if rt.kind in _PATH_NAMED and rt.group == "rbac.authorization.k8s.io":
        if name in (".", "..") or "/" in name or "%" in name:
            return ['may not contain "/" or "%" or be "." or ".."']
        return []
    if (rt.group, rt.kind) in _LABEL_NAMED:
        if len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
            return [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        return [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ]
    return []


def validate(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise 422 Invalid with every problem found, as field validation does (`old`: on update)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    causes: list[tuple[str, str]] = []
    for problem in name_problems(rt, name):
        causes.append(("metadata.name", f'Invalid value: "{name}": {problem}'))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
            causes.append((f"metadata.{field}", "Invalid value: must be a map of string to string"))
    spec = obj.get("spec")
    if rt.group == "apps" and rt.kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        causes += _workload_problems(spec)
    if rt.group == "apiextensions.k8s.io":
        causes += _crd_problems(obj)
    if rt.kind == "Event" and rt.group in ("", events.GROUP):
        shape = events.to_core if rt.group == events.GROUP else events.normalize_core
        causes += events.problems(shape(obj), rt.group, None if old is None else shape(old))
    if causes:  # an events.k8s.io Event is validated as the core Event it is stored as
        raise invalid("" if rt.group == events.GROUP else rt.group, rt.kind, name, causes)


def _workload_problems(spec: Any) -> list[tuple[str, str]]:
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    out: list[tuple[str, str]] = []
    sel = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not sel:
        out.append(("spec.selector", "Required value"))
    else:
        try:
            selector = label_selector_from_dict(sel)
        except SelectorError as e:
            out.append(("spec.selector", f"Invalid value: {e}"))
        else:
            if selector.empty:
                out.append(("spec.selector", "Invalid value: empty selector is invalid for deployment"))
            elif not selector.matches(labels):
                out.append(
                    (
                        "spec.template.metadata.labels",
                        f"Invalid value: {labels!r}: `selector` does not match template `labels`",
                    )
                )
    containers = ((template.get("spec") or {}).get("containers")) or []
    if not containers:
        out.append(("spec.template.spec.containers", "Required value"))
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            out.append((f"spec.template.spec.containers[{i}].name", "Required value"))
        if isinstance(c, dict) and not c.get("image"):
            out.append((f"spec.template.spec.containers[{i}].image", "Required value"))
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        out.append(("spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0"))
    return out


def _crd_problems(crd: dict[str, Any]) -> list[tuple[str, str]]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out: list[tuple[str, str]] = []
    group, plural = spec.get("group", ""), names.get("plural", "")
    if not group or "." not in group:
        out.append(("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot'))
    if not plural:
        out.append(("spec.names.plural", "Required value"))
    if not names.get("kind"):
        out.append(("spec.names.kind", "Required value"))
    if crd.get("metadata", {}).get("name") != f"{plural}.{group}":
        out.append(
            (
                "metadata.name",
                f'Invalid value: "{crd.get("metadata", {}).get("name")}": must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        out.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        out.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        out.append(
            ("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"')
        )
    return out


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    """The defaults a real apiserver writes into what it stores (pkg/apis/*/v1/defaults.go), for
    the fields clients read back: a client that compares what it sent with what it lists must see
    them here as on a real cluster (pod specs and templates, Service IP families, Secret data...)."""
    spec = obj.get("spec")
    key = (rt.group, rt.kind)
    if key == ("apps", "Deployment") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            strategy.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})
    elif key == ("apps", "ReplicaSet") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
    elif key == ("apps", "StatefulSet") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"partition": 0})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    elif key == ("apps", "DaemonSet") and isinstance(spec, dict):
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"maxUnavailable": 1, "maxSurge": 0})
        spec.setdefault("revisionHistoryLimit", 10)
    elif key == ("", "ReplicationController") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if labels:
            spec.setdefault("selector", dict(labels))
            if not (obj.get("metadata") or {}).get("labels"):
                obj.setdefault("metadata", {})["labels"] = dict(labels)
    elif key == ("batch", "CronJob") and isinstance(spec, dict):
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_spec = (spec.get("jobTemplate") or {}).get("spec")
        if isinstance(job_spec, dict):
            _template_defaults(job_spec.get("template"), "Never")
    elif key == ("", "Service") and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
        if spec["type"] != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
    elif key == ("", "Endpoints"):
        for subset in obj.get("subsets") or []:
            for p in (subset.get("ports") or []) if isinstance(subset, dict) else []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")  # SetDefaults_EndpointPort
    elif key == ("", "Namespace"):
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {})["phase"] = obj.get("status", {}).get("phase", "Active")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    elif key == ("batch", "Job") and isinstance(spec, dict):
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if template_labels and not (obj.get("metadata") or {}).get("labels"):
            obj.setdefault("metadata", {})["labels"] = dict(template_labels)
    elif key == ("", "Secret"):
        # The v1 conversion merges stringData into data (base64), stringData winning; it is never stored.
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            data = obj["data"] = dict(obj.get("data") or {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        obj.setdefault("type", "Opaque")
    elif key == ("", "PersistentVolumeClaim") and isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
        status = obj.get("status")
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")
    elif key == ("", "PersistentVolume") and isinstance(spec, dict):
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        status = obj.get("status")
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")
    elif key == ("storage.k8s.io", "StorageClass"):
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
    elif key == ("networking.k8s.io", "NetworkPolicy") and isinstance(spec, dict):
        if "policyTypes" not in spec:
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    elif key == ("", "Event"):
        normalized = events.normalize_core(obj)
        obj.clear()
        obj.update(normalized)
    if key == ("", "Pod") and isinstance(spec, dict):
        _pod_spec_defaults(spec, "Always")
        spec.setdefault("enableServiceLinks", True)
    if key == ("", "PodTemplate"):
        _template_defaults(obj.get("template"), "Always")
    template = (spec or {}).get("template") if isinstance(spec, dict) else None
    if isinstance(template, dict):
        _template_defaults(template, "Always" if rt.group in ("apps", "") else "Never")


def _template_defaults(template: Any, restart_policy: str) -> None:
    """A pod template gets the pod spec's defaults, and Go's zero creationTimestamp (null)."""
    if not isinstance(template, dict):
        return
    meta = template.get("metadata")
    if isinstance(meta, dict) or meta is None:
        template["metadata"] = {"creationTimestamp": None, **(meta or {})}
    if isinstance(template.get("spec"), dict):
        _pod_spec_defaults(template["spec"], restart_policy)


def _pod_spec_defaults(spec: dict[str, Any], restart_policy: str) -> None:
    """SetDefaults_PodSpec and SetDefaults_Container (core/v1), the fields every pod shows."""
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class (pkg/apis/core/helper/qos): Guaranteed when every container limits cpu
    and memory and requests no differently, BestEffort when none asks for anything, else Burstable."""
    containers = [c for f in ("initContainers", "containers") for c in spec.get(f) or [] if isinstance(c, dict)]
    requested = limited = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        requested = requested or any(k in ("cpu", "memory") for k in {**requests, **limits})
        limited = limited or bool(limits)
        if not all(k in limits for k in ("cpu", "memory")) or any(
            str(requests.get(k, limits[k])) != str(limits[k]) for k in ("cpu", "memory")
        ):
            guaranteed = False
    if not requested:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def admit_pod(spec: dict[str, Any], namespace_random: str) -> None:
    """What the default admission plugins add to a pod at creation (ServiceAccount, Priority,
    DefaultTolerationSeconds): its service account and the projected volume of its API token,
    its priority, and the tolerations of unreachable and not-ready nodes."""
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = sa
    if spec.get("automountServiceAccountToken") is not False:
        volume = f"kube-api-access-{namespace_random}"
        mounts_at = "/var/run/secrets/kubernetes.io/serviceaccount"
        volumes = spec.setdefault("volumes", [])
        if not any(isinstance(v, dict) and v.get("name", "").startswith("kube-api-access-") for v in volumes):
            volumes.append(
                {
                    "name": volume,
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            )
            for field in ("initContainers", "containers"):
                for c in spec.get(field) or []:
                    if isinstance(c, dict) and not any(
                        m.get("mountPath") == mounts_at for m in c.get("volumeMounts") or [] if isinstance(m, dict)
                    ):
                        c.setdefault("volumeMounts", []).append(
                            {"name": volume, "readOnly": True, "mountPath": mounts_at}
                        )
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(
            isinstance(t, dict)
            and t.get("key") in (taint, None, "")
            and t.get("operator") == "Exists"
            and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            tolerations.append({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def prepare_for_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """What strategies set at create only, once the uid exists.

    A Job (unless spec.manualSelector) gets the job-name and controller-uid labels on its pod
    template and a selector on its controller uid, as the job strategy's generateSelector does.
    """
    spec = obj.get("spec")
    if (rt.group, rt.kind) != ("batch", "Job") or not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    template = spec["template"] = spec.get("template") or {}
    template_meta = template["metadata"] = template.get("metadata") or {}
    labels = template_meta["labels"] = template_meta.get("labels") or {}
    if labels and not meta.get("labels"):  # SetDefaults_Job, as the request is decoded
        meta["labels"] = dict(labels)
    for key in ("job-name", "batch.kubernetes.io/job-name"):
        labels.setdefault(key, meta["name"])
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        labels.setdefault(key, meta["uid"])
    selector = spec["selector"] = spec.get("selector") or {}
    match = selector["matchLabels"] = selector.get("matchLabels") or {}
    match.setdefault("batch.kubernetes.io/controller-uid", meta["uid"])
    if not meta.get("labels"):  # SetDefaults_Job again, as a real server reads the Job back from storage
        meta["labels"] = dict(labels)


def check_type(obj: Any, what: str = "body") -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise StatusError(400, f"the {what} must be a JSON object, not {type(obj).__name__}")
    return obj
