"""The admission checks and defaults a real apiserver applies, for the kinds clients rely on.

Only what changes client-visible behaviour is here: name rules, the Deployment selector contract,
defaults that controllers and printers read. Anything else is accepted as sent.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import StatusError, invalid
from .resources import ResourceType
from ..kube.selectors import SelectorError, label_selector_from_dict

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
            return ["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        return ["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    return []


def validate(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid with every problem found, as field validation does."""
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
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


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
                out.append(("spec.template.metadata.labels",
                            f"Invalid value: {labels!r}: `selector` does not match template `labels`"))
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
        out.append(("metadata.name", f'Invalid value: "{crd.get("metadata", {}).get("name")}": '
                                      f"must be spec.names.plural+\".\"+spec.group"))
    versions = spec.get("versions") or []
    if not versions:
        out.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        out.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        out.append(("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"'))
    return out


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    """The defaults clients read back: replicas, strategy, service ports, namespace finalizers."""
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
    elif key == ("", "Service") and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
    elif key == ("", "Namespace"):
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {})["phase"] = obj.get("status", {}).get("phase", "Active")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    elif key == ("batch", "Job") and isinstance(spec, dict):
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
    if key in (("", "Pod"),) and isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
    template_spec = ((spec or {}).get("template") or {}).get("spec") if isinstance(spec, dict) else None
    if isinstance(template_spec, dict):
        template_spec.setdefault("restartPolicy", "Always" if rt.group == "apps" else template_spec.get("restartPolicy", "Never"))


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
    for key in ("job-name", "batch.kubernetes.io/job-name"):
        labels.setdefault(key, meta["name"])
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        labels.setdefault(key, meta["uid"])
    selector = spec["selector"] = spec.get("selector") or {}
    match = selector["matchLabels"] = selector.get("matchLabels") or {}
    match.setdefault("batch.kubernetes.io/controller-uid", meta["uid"])


def check_type(obj: Any, what: str = "body") -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise StatusError(400, f"the {what} must be a JSON object, not {type(obj).__name__}")
    return obj
