"""`scale-agent get`, `apply` and `delete`: kubectl's three verbs, through the hub instead of a cluster.

    scale-agent get KIND[,KIND...] [NAME...] (--account A | --all-accounts) [-n NS | -A] [-l SEL] [-o FMT] [-w]
    scale-agent apply -f FILE [-f FILE...] --account A [-n NS] [--field-manager NAME] [--timeout S] [-o json|yaml]
    scale-agent delete (KIND NAME... | -f FILE | KIND -l SEL) --account A [-n NS] [--cascade C] [--grace-period N]

A platform engineer who knows kubectl should not have to learn anything new, so names, tables,
messages and exit codes are kubectl's. What differs is where the answers come from: `get` reads
the hub's real-time cache (`/api/v1/accounts/{account}/objects`, `/api/v1/watch`), and `apply`
and `delete` send operations to the hub (`POST /kubernetes/ops`), which routes them to the agent
serving the account and reports through a task (`GET /task/{id}`). The commands never talk to a
Kubernetes API server, so they need no kubeconfig, only the hub's address (`--hub`).

Like `scale-agent accounts`, this is standard library plus PyYAML (imported only when YAML is read
or written): a CLI must start fast and needs no event loop.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from .accounts_cli import DEFAULT_HUB
from .kube.printing import pod_ready, service_ports

__all__ = [
    "CliError", "HubError", "KindInfo", "TablePrinter", "add_parsers", "apply_output", "build_delete_operations",
    "build_deploy_operation", "delete_output", "human_duration", "kind_token", "list_document", "load_manifests",
    "main", "object_name", "parse_resource_args", "read_manifest_files", "resolve_kind", "table_columns",
    "task_error",
]

DEFAULT_TIMEOUT = 300.0
"""How long apply and delete wait for their task by default: a rollout of many manifests can take minutes."""
TASK_POLL_SECONDS = 20
"""The longest single `GET /task/{id}?waitSeconds=` (the hub answers as soon as the task ends)."""
WATCH_READ_TIMEOUT = 60.0
"""The hub sends a heartbeat every 15 s on an idle watch; this much silence means the hub is gone."""
ACCOUNT_QUERY_THREADS = 16
"""`--all-accounts` asks the hub once per account; in parallel, or hundreds of accounts take seconds."""


class CliError(Exception):
    """An error to print as is (already in kubectl's words) on stderr, exit status 1."""


UNKNOWN_KIND = "UnknownKind"  # the hub's reason when an account follows no kind of the name asked


class HubError(CliError):
    """The hub answered an error, or could not be reached; `status` is the HTTP status (0: unreachable)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


# --- kinds ---------------------------------------------------------------------------------------


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
for _kind, _group, _plural, _namespaced, _shorts in _BUILTIN_KINDS:
    _info = KindInfo(_kind, _group, _plural, _namespaced, known=True)
    for _alias in {_kind.lower(), _plural, *_shorts}:
        _ALIASES.setdefault(_alias, []).append(_info)
_BY_KIND = {(k.group, k.kind): k for infos in _ALIASES.values() for k in infos}


def _singular(word: str) -> str:
    """English plural to singular, for kinds kubectl would learn from discovery (we cannot)."""
    if word.endswith("ies") and len(word) > 3:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _plural(kind_lower: str) -> str:
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
        kind, resource = base, _plural(lower)
    else:
        kind = _singular(lower)
        resource = lower if kind != lower else _plural(lower)
    return KindInfo(kind, group or None, resource, None)


def kind_token(kind: str, group: str) -> str:
    """`deployment.apps`, `configmap`: the lowercase kind, then `.group` unless core (kubectl's form)."""
    return f"{kind.lower()}.{group}" if group else kind.lower()


def _group_of(obj: dict[str, Any]) -> str:
    api_version = str(obj.get("apiVersion") or "")
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def object_name(obj: dict[str, Any]) -> str:
    """`-o name`: `deployment.apps/nginx`, `configmap/settings`."""
    return f"{kind_token(str(obj.get('kind') or ''), _group_of(obj))}/{_meta(obj).get('name', '')}"


def _manifest_name(obj: dict[str, Any]) -> str:
    """The operations API's `manifestName`: `deployment.apps nginx`."""
    return f"{kind_token(str(obj.get('kind') or ''), _group_of(obj))} {_meta(obj).get('name', '')}"


@dataclass(frozen=True)
class ResourceArg:
    """One kind to read or delete, with the names asked for (none: all of them)."""

    kind: KindInfo
    names: tuple[str, ...] = ()


def parse_resource_args(args: Sequence[str]) -> list[ResourceArg]:
    """kubectl's argument forms: `KIND[,KIND...] [NAME...]` or `KIND/NAME...`, never both."""
    if not args:
        raise CliError("error: You must specify the type of resource to get. Use \"scale-agent get --help\" "
                       "for the accepted kinds")
    if any("/" in a for a in args):
        if not all("/" in a for a in args):
            raise CliError("error: there is no need to specify a resource type as a separate argument when "
                           "passing arguments in resource/name form (e.g. 'scale-agent get resource/<resource_name>' "
                           "instead of 'scale-agent get resource resource/<resource_name>')")
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


# --- columns -------------------------------------------------------------------------------------


def _meta(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("metadata") or {}


def _spec(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("spec") or {}


def _status(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("status") or {}


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def human_duration(seconds: float) -> str:
    """kubectl's AGE shorthand (apimachinery's duration.HumanDuration), so ages read the same."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: datetime) -> str:
    t = _parse_time(value)
    return "<unknown>" if t is None else human_duration((now - t).total_seconds())


def _age(o: dict[str, Any], now: datetime) -> str:
    return _since(_meta(o).get("creationTimestamp"), now)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _pod_status(o: dict[str, Any]) -> str:
    """kubectl's Pod STATUS: the most telling container state, not just the phase."""
    status = _status(o)
    reason = status.get("reason") or status.get("phase") or "Pending"
    init = status.get("initContainerStatuses") or []
    for i, c in enumerate(init):
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal")
                                                         else f"ExitCode:{term.get('exitCode')}"))
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(_spec(o).get('initContainers') or init)}"
        break
    else:
        running = False
        for c in reversed(status.get("containerStatuses") or []):
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                term = state["terminated"]
                reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal")
                                                else f"ExitCode:{term.get('exitCode')}")
            elif "running" in state and c.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if _meta(o).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_restarts(o: dict[str, Any], now: datetime) -> str:
    restarts, last = 0, None
    for c in _status(o).get("containerStatuses") or []:
        restarts += _int(c.get("restartCount"))
        finished = _parse_time(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished and (last is None or finished > last):
            last = finished
    return f"{restarts} ({human_duration((now - last).total_seconds())} ago)" if restarts and last else str(restarts)




def _readiness_gates(o: dict[str, Any]) -> str:
    gates = {g.get("conditionType") for g in _spec(o).get("readinessGates") or []}
    if not gates:
        return "<none>"
    met = sum(1 for c in _status(o).get("conditions") or [] if c.get("type") in gates and c.get("status") == "True")
    return f"{met}/{len(gates)}"


def _service_external_ip(o: dict[str, Any]) -> str:
    spec = _spec(o)
    kind = spec.get("type") or "ClusterIP"
    external = list(spec.get("externalIPs") or [])
    if kind == "ExternalName":
        return spec.get("externalName") or "<none>"
    if kind == "LoadBalancer":
        balancer = _status(o).get("loadBalancer") or {}
        ingress = [i.get("ip") or i.get("hostname") for i in balancer.get("ingress") or []]
        found = [x for x in ingress if x] + external
        return ",".join(found) if found else "<pending>"
    return ",".join(external) if external else "<none>"




def _job_status(o: dict[str, Any]) -> str:
    """kubectl's Job STATUS (1.30+): the final condition first, then transitional ones."""
    conditions = {c.get("type"): c.get("status") for c in _status(o).get("conditions") or []}
    for kind in ("Complete", "Failed"):
        if conditions.get(kind) == "True":
            return kind
    if _meta(o).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if conditions.get(kind) == "True":
            return kind
    return "Running"


def _job_completions(o: dict[str, Any]) -> str:
    spec, succeeded = _spec(o), _int(_status(o).get("succeeded"))
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism")
    if parallelism is not None and _int(parallelism) > 1:
        return f"{succeeded}/1 of {parallelism}"
    return f"{succeeded}/1"


def _job_duration(o: dict[str, Any], now: datetime) -> str:
    start = _parse_time(_status(o).get("startTime"))
    if start is None:
        return ""
    end = _parse_time(_status(o).get("completionTime")) or now
    return human_duration((end - start).total_seconds())


def _selector_text(selector: Any) -> str:
    """A structured selector as kubectl's wide output writes it (`app=web,tier in (a,b)`)."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op, values = e.get("operator", ""), ",".join(sorted(e.get("values") or []))
        parts.append({"In": f"{e.get('key')} in ({values})", "NotIn": f"{e.get('key')} notin ({values})",
                      "Exists": f"{e.get('key')}", "DoesNotExist": f"!{e.get('key')}"}.get(op, f"{e.get('key')} {op}"))
    return ",".join(parts) or "<none>"


def _containers(o: dict[str, Any]) -> list[dict[str, Any]]:
    template = _spec(o).get("template") or {}
    return (template.get("spec") or {}).get("containers") or []


def _containers_col(o: dict[str, Any]) -> str:
    return ",".join(str(c.get("name", "")) for c in _containers(o))


def _images_col(o: dict[str, Any]) -> str:
    return ",".join(str(c.get("image", "")) for c in _containers(o))


Cell = Callable[[dict[str, Any], datetime], str]
"""One column's value for an object, given the time ages are measured against."""

_NAME: tuple[str, Cell] = ("NAME", lambda o, now: str(_meta(o).get("name", "")))
_AGE: tuple[str, Cell] = ("AGE", _age)
_WORKLOAD_WIDE: list[tuple[str, Cell]] = [("CONTAINERS", lambda o, now: _containers_col(o)),
                                          ("IMAGES", lambda o, now: _images_col(o)),
                                          ("SELECTOR", lambda o, now: _selector_text(_spec(o).get("selector")))]

# (group, Kind) -> (columns, extra columns of -o wide), as kubectl's printers (pkg/printers/internalversion).
_COLUMNS: dict[tuple[str, str], tuple[list[tuple[str, Cell]], list[tuple[str, Cell]]]] = {
    ("apps", "Deployment"): ([
        _NAME,
        ("READY", lambda o, now: f"{_int(_status(o).get('readyReplicas'))}/{_int(_spec(o).get('replicas', 1))}"),
        ("UP-TO-DATE", lambda o, now: str(_int(_status(o).get("updatedReplicas")))),
        ("AVAILABLE", lambda o, now: str(_int(_status(o).get("availableReplicas")))),
        _AGE], _WORKLOAD_WIDE),
    ("apps", "ReplicaSet"): ([
        _NAME,
        ("DESIRED", lambda o, now: str(_int(_spec(o).get("replicas", 1)))),
        ("CURRENT", lambda o, now: str(_int(_status(o).get("replicas")))),
        ("READY", lambda o, now: str(_int(_status(o).get("readyReplicas")))),
        _AGE], _WORKLOAD_WIDE),
    ("apps", "StatefulSet"): ([
        _NAME,
        ("READY", lambda o, now: f"{_int(_status(o).get('readyReplicas'))}/{_int(_spec(o).get('replicas', 1))}"),
        _AGE], _WORKLOAD_WIDE[:2]),
    ("apps", "DaemonSet"): ([
        _NAME,
        ("DESIRED", lambda o, now: str(_int(_status(o).get("desiredNumberScheduled")))),
        ("CURRENT", lambda o, now: str(_int(_status(o).get("currentNumberScheduled")))),
        ("READY", lambda o, now: str(_int(_status(o).get("numberReady")))),
        ("UP-TO-DATE", lambda o, now: str(_int(_status(o).get("updatedNumberScheduled")))),
        ("AVAILABLE", lambda o, now: str(_int(_status(o).get("numberAvailable")))),
        ("NODE SELECTOR", lambda o, now: ",".join(
            f"{k}={v}" for k, v in sorted(((_spec(o).get("template") or {}).get("spec") or {})
                                          .get("nodeSelector", {}).items())) or "<none>"),
        _AGE], _WORKLOAD_WIDE),
    ("", "Pod"): ([
        _NAME,
        ("READY", lambda o, now: pod_ready(o)),
        ("STATUS", lambda o, now: _pod_status(o)),
        ("RESTARTS", _pod_restarts),
        _AGE], [
        ("IP", lambda o, now: _status(o).get("podIP") or "<none>"),
        ("NODE", lambda o, now: _spec(o).get("nodeName") or "<none>"),
        ("NOMINATED NODE", lambda o, now: _status(o).get("nominatedNodeName") or "<none>"),
        ("READINESS GATES", lambda o, now: _readiness_gates(o)),
    ]),
    ("batch", "Job"): ([
        _NAME,
        ("STATUS", lambda o, now: _job_status(o)),
        ("COMPLETIONS", lambda o, now: _job_completions(o)),
        ("DURATION", _job_duration),
        _AGE], [
        ("CONTAINERS", lambda o, now: _containers_col(o)),
        ("IMAGES", lambda o, now: _images_col(o)),
        ("SELECTOR", lambda o, now: _selector_text(_spec(o).get("selector"))),
    ]),
    ("", "Service"): ([
        _NAME,
        ("TYPE", lambda o, now: _spec(o).get("type") or "ClusterIP"),
        ("CLUSTER-IP", lambda o, now: _spec(o).get("clusterIP") or "<none>"),
        ("EXTERNAL-IP", lambda o, now: _service_external_ip(o)),
        ("PORT(S)", lambda o, now: service_ports(o)),
        _AGE], [
        ("SELECTOR", lambda o, now: ",".join(f"{k}={v}" for k, v in sorted((_spec(o).get("selector") or {}).items()))
         or "<none>"),
    ]),
    ("", "ConfigMap"): ([
        _NAME,
        ("DATA", lambda o, now: str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))),
        _AGE], []),
    ("", "Secret"): ([
        _NAME,
        ("TYPE", lambda o, now: str(o.get("type") or "Opaque")),
        # the hub holds Secrets as metadata only (docs/agent.md): their data is not counted
        _AGE], []),
    ("", "Namespace"): ([
        _NAME,
        ("STATUS", lambda o, now: _status(o).get("phase") or "Active"),
        _AGE], []),
}


def table_columns(group: str, kind: str, *, wide: bool = False) -> list[tuple[str, Cell]]:
    """The columns kubectl prints for a kind; NAME and AGE for every kind it has no printer for."""
    columns, extra = _COLUMNS.get((group, kind), ([_NAME, _AGE], []))
    return columns + extra if wide else list(columns)


class TablePrinter:
    """kubectl's tables: columns padded to the widest cell plus three spaces, widths remembered.

    kubectl's tabwriter keeps the widths of what it printed (RememberWidths), so the rows `-w`
    prints later line up with the table above them unless a cell is wider; this does the same.
    """

    MIN_WIDTH = 6
    PADDING = 3

    def __init__(self, columns: Sequence[tuple[str, Cell]], out: TextIO, *, account: bool = False,
                 namespace: bool = False, name_prefix: bool = False, headers: bool = True) -> None:
        self.columns = list(columns)
        self.out = out
        self.account = account
        self.namespace = namespace
        self.name_prefix = name_prefix
        self.headers = headers
        self.widths: list[int] = []
        self.printed_header = False

    def header(self) -> list[str]:
        return (["ACCOUNT"] if self.account else []) + (["NAMESPACE"] if self.namespace else []) + [
            h for h, _ in self.columns]

    def cells(self, account: str, obj: dict[str, Any], now: datetime) -> list[str]:
        values = [fn(obj, now) for _, fn in self.columns]
        if self.name_prefix and self.columns and self.columns[0] is _NAME:
            values[0] = object_name(obj)
        return (([account] if self.account else []) + ([str(_meta(obj).get("namespace", ""))] if self.namespace else [])
                + values)

    def print_rows(self, rows: Iterable[tuple[str, dict[str, Any]]], now: datetime | None = None) -> None:
        """Print these rows (and the header before the first ones), aligned with all printed so far."""
        now = now or datetime.now(timezone.utc)
        lines = [self.cells(account, obj, now) for account, obj in rows]
        if self.headers and not self.printed_header and lines:
            lines.insert(0, self.header())
            self.printed_header = True
        if not lines:
            return
        n = len(lines[0])
        widths = [max(len(line[i]) for line in lines) for i in range(n)]
        self.widths = [max(w, self.widths[i] if i < len(self.widths) else 0) for i, w in enumerate(widths)]
        for line in lines:
            padded = [c.ljust(max(self.widths[i] + self.PADDING, self.MIN_WIDTH)) for i, c in enumerate(line[:-1])]
            self.out.write(("".join(padded) + line[-1]).rstrip() + "\n")
        self.out.flush()


def list_document(items: list[dict[str, Any]]) -> dict[str, Any]:
    """kubectl's shape for several objects in -o json/yaml."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def _dump(doc: Any, fmt: str, out: TextIO) -> None:
    """kubectl's JSON (4-space indent, the server's field order) or YAML (sorted keys, no wrapping)."""
    if fmt == "json":
        out.write(json.dumps(doc, indent=4, ensure_ascii=False) + "\n")
    else:
        import yaml

        out.write(yaml.dump(doc, Dumper=_yaml_dumper(), sort_keys=True, default_flow_style=False,
                            allow_unicode=True, width=1 << 30))
    out.flush()


def _dump_one(obj: dict[str, Any], fmt: str, out: TextIO) -> None:
    """One object of a stream (`-w`): YAML documents are separated by `---`, as kubectl does."""
    if fmt == "yaml":
        out.write("---\n")
    _dump(obj, fmt, out)


def _yaml_dumper() -> Any:
    import yaml

    return getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# --- manifest files ------------------------------------------------------------------------------


def _yaml_loader() -> Any:
    """A safe loader that keeps timestamps as strings: objects go back out as JSON, as kubectl sends them."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in base.yaml_implicit_resolvers.items()}
    return Loader


def load_manifests(text: str, source: str) -> list[dict[str, Any]]:
    """The objects in one YAML/JSON file's text: `---` documents, `List` items, empty documents skipped.

    Errors name the file and line (kubectl's `error parsing FILE`), or the document that is not a
    Kubernetes object, so a user of a 40-document file knows where to look.
    """
    import yaml

    try:
        docs = list(yaml.load_all(text, Loader=_yaml_loader()))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(p for p in (e.context, e.problem) if p) or str(e)
        raise CliError(f"error: error parsing {source}: {where}{problem}") from None
    except yaml.YAMLError as e:
        raise CliError(f"error: error parsing {source}: {e}") from None
    objects: list[dict[str, Any]] = []
    for n, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f'"{source}"' + (f" (document {n})" if len(docs) > 1 else "")
        if not isinstance(doc, dict):
            raise CliError(f"error: error validating {where}: not a Kubernetes object (a mapping with apiVersion "
                           f"and kind), got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            for i, item in enumerate(doc["items"]):
                objects.append(_check_object(item, f"{where} item {i}"))
        else:
            objects.append(_check_object(doc, where))
    return objects


def _check_object(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise CliError(f"error: error validating {where}: not a Kubernetes object, got {type(obj).__name__}")
    missing = [f"{key} not set" for key in ("apiVersion", "kind") if not obj.get(key)]
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        missing.append("metadata.name not set")
    if missing:
        raise CliError(f"error: error validating {where}: error validating data: [{', '.join(missing)}]")
    return obj


def read_manifest_files(paths: Sequence[str], stdin: TextIO | None = None, verb: str = "apply"
                        ) -> list[dict[str, Any]]:
    """Every object of every -f: files, `-` (stdin), or directories (their .yaml/.yml/.json files)."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        if path == "-":
            objects += load_manifests((stdin or sys.stdin).read(), "STDIN")
            continue
        p = Path(path)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".yaml", ".yml", ".json"))
        elif p.exists():
            files = [p]
        else:
            raise CliError(f'error: the path "{path}" does not exist')
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise CliError(f'error: cannot read "{f}": {e}') from None
            objects += load_manifests(text, str(f))
    if not objects:
        raise CliError(f"error: no objects passed to {verb}")
    return objects


def _check_namespaces(objects: Sequence[dict[str, Any]], namespace: str | None) -> None:
    """kubectl refuses -n that contradicts a manifest's own namespace, rather than move it silently."""
    if not namespace:
        return
    for obj in objects:
        own = _meta(obj).get("namespace")
        if own and own != namespace:
            raise CliError(f'error: the namespace from the provided object "{own}" does not match the namespace '
                           f'"{namespace}". You must pass \'--namespace={own}\' to perform this operation.')


# --- operations ----------------------------------------------------------------------------------


def build_deploy_operation(account: str, manifests: Sequence[dict[str, Any]], *, namespace: str | None = None,
                           field_manager: str | None = None) -> list[dict[str, Any]]:
    """The `POST /kubernetes/ops` body of `apply`: one deployManifest with every object, so the hub
    applies them as one task, in order, and reports what it applied if one fails."""
    description: dict[str, Any] = {"account": account, "manifests": list(manifests)}
    if namespace:
        description["namespaceOverride"] = namespace
    if field_manager:
        description["fieldManager"] = field_manager
    return [{"deployManifest": description}]


_CASCADE = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}


def _delete_options(cascade: str, grace_period: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"propagationPolicy": _CASCADE[cascade]}
    if grace_period is not None and grace_period >= 0:
        options["gracePeriodSeconds"] = grace_period
    return options


@dataclass(frozen=True)
class DeleteTarget:
    """One object to delete: `manifestName` (`deployment.apps nginx`) and its namespace ('' cluster-scoped)."""

    manifest_name: str
    location: str


def build_delete_operations(account: str, *, targets: Sequence[DeleteTarget] = (), kind: KindInfo | None = None,
                            selector: str | None = None, location: str = "", cascade: str = "background",
                            grace_period: int | None = None) -> list[dict[str, Any]]:
    """The `POST /kubernetes/ops` body of `delete`: one deleteManifest per object, or one by selector."""
    options = _delete_options(cascade, grace_period)
    if selector is not None:
        if kind is None:
            raise CliError("error: a label selector needs a resource type")
        return [{"deleteManifest": {"account": account, "kinds": [kind.token], "labelSelector": selector,
                                    "location": location, "options": options}}]
    return [{"deleteManifest": {"account": account, "manifestName": t.manifest_name, "location": t.location,
                                "options": dict(options)}} for t in targets]


def task_error(task: dict[str, Any]) -> str | None:
    """Why the task failed (its exception's message, else its last status), or None if it did not."""
    status = task.get("status") or {}
    if task.get("state") != "failed" and not status.get("failed"):
        return None
    exception = task.get("exception") or {}
    return str(exception.get("message") or status.get("status") or f"task {task.get('id', '')} failed")


def _applied(task: dict[str, Any]) -> list[dict[str, Any]]:
    applied: list[dict[str, Any]] = []
    for result in task.get("resultObjects") or []:
        skip = {result.get("failedManifest"), *(result.get("notApplied") or [])} - {None}
        skip_lower = {str(s).lower() for s in skip}
        for obj in result.get("manifests") or []:
            kind = str(obj.get("kind") or "").lower()
            name = _meta(obj).get("name", "")
            if {f"{kind} {name}", _manifest_name(obj).lower()} & skip_lower:
                continue
            applied.append(obj)
    return applied


def apply_output(task: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """A deployManifest task as `kubectl apply --server-side` reports it: the objects applied, a
    `deployment.apps/nginx serverside-applied` line for each, and the error if the task failed."""
    applied = _applied(task)
    return applied, [f"{object_name(o)} serverside-applied" for o in applied], task_error(task)


def delete_output(task: dict[str, Any]) -> tuple[list[str], list[str], str | None]:
    """A deleteManifest task as `kubectl delete` reports it: `deployment.apps "nginx" deleted` per
    object; kubectl's NotFound error per object that was already gone (the operation does not fail
    for those, kubectl does); and the error if the task failed."""
    lines, not_found = [], []
    for result in task.get("resultObjects") or []:
        for d in result.get("deletedManifests") or []:
            lines.append(f'{kind_token(str(d.get("kind") or ""), _group_of(d))} "{d.get("name", "")}" deleted')
        for d in result.get("alreadyGone") or []:
            kind, group = str(d.get("kind") or ""), _group_of(d)
            known = _BY_KIND.get((group, kind))
            resource = known.resource if known else _plural(kind.lower())
            not_found.append(f'Error from server (NotFound): {resource}{"." + group if group else ""} '
                             f'"{d.get("name", "")}" not found')
    return lines, not_found, task_error(task)


# --- the hub -------------------------------------------------------------------------------------


def _url(hub: str, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    return hub.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")


def _open(hub: str, method: str, path: str, *, body: Any = None, params: Sequence[tuple[str, str]] = (),
          timeout: float = 60.0, accept: str = "application/json") -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(_url(hub, path, params), data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": accept})
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        raw = e.read()
        reason = ""
        try:
            body = json.loads(raw)
            message = body["error"]
            reason = str(body.get("reason") or "")
        except (ValueError, KeyError, TypeError, AttributeError):
            message = raw[:300].decode(errors="replace").strip() or str(e.reason)
        if message in ("Not Found", "Method Not Allowed") or not isinstance(message, str):
            # a route this hub does not have (an older hub, or --hub naming something else)
            message = f"the hub answered {e.code} {message} to {method} {path}"
        raise HubError(f"error: {message}", e.code, reason) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise HubError(f"error: cannot reach the hub at {hub}: {reason} (is it running? see --hub)") from None


def _request(hub: str, method: str, path: str, *, body: Any = None, params: Sequence[tuple[str, str]] = (),
             timeout: float = 60.0) -> Any:
    with _open(hub, method, path, body=body, params=params, timeout=timeout) as response:
        try:
            return json.loads(response.read() or b"null")
        except ValueError:
            raise HubError(f"error: {method} {path}: the hub answered something that is not JSON") from None
        except (OSError, socket.timeout) as e:
            raise HubError(f"error: {method} {path}: {e}") from None


def _run_task(hub: str, operations: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Send the operations and wait for their task to end (or the timeout), as one CLI command does."""
    answer = _request(hub, "POST", "/kubernetes/ops", body=operations)
    if not isinstance(answer, dict) or not answer.get("id"):
        raise CliError(f"error: POST /kubernetes/ops: unexpected answer {str(answer)[:300]}")
    task_id = str(answer["id"])
    path = str(answer.get("resourceUri") or f"/task/{urllib.parse.quote(task_id, safe='')}")
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0, min(TASK_POLL_SECONDS, int(remaining)))
        task = _request(hub, "GET", path, params=[("waitSeconds", str(wait))], timeout=wait + 60)
        status = task.get("status") or {}
        if task.get("state") in ("completed", "failed") or status.get("completed") or status.get("failed"):
            return task
        if time.monotonic() >= deadline:
            raise CliError(f"error: timed out after {timeout:g}s waiting for task {task_id} "
                           f"(it may still finish: GET {path}); last status: {status.get('status', '')}")


def _accounts(args: argparse.Namespace) -> list[str]:
    if not args.all_accounts:
        return [args.account]
    return [a["name"] for a in _request(args.hub, "GET", "/api/v1/accounts")]


def _query(hub: str, account: str, kind: KindInfo, *, namespace: str | None, name: str | None,
           selector: str | None, tolerate_missing_account: bool) -> list[dict[str, Any]]:
    params = [("kind", kind.query)]
    if namespace is not None and kind.namespaced is not False:
        params.append(("namespace", namespace))
    if name is not None:
        params.append(("name", name))
    if selector:
        params.append(("labelSelector", selector))
    try:
        doc = _request(hub, "GET", f"/api/v1/accounts/{urllib.parse.quote(account, safe='')}/objects", params=params)
    except HubError as e:
        if tolerate_missing_account and e.status == 404 and e.reason != UNKNOWN_KIND:
            return []  # an account gone since --all-accounts listed them
        raise
    items = doc.get("items") or []
    if kind.group is not None:  # the hub's bare core kinds ("Event") match every group
        items = [o for o in items if _group_of(o) == kind.group]
    return items


# --- get -----------------------------------------------------------------------------------------


Row = tuple[str, dict[str, Any]]
"""(account, object): what a table row shows."""


def _fetch(args: argparse.Namespace, accounts: list[str], target: ResourceArg) -> tuple[list[Row], list[str]]:
    """Rows for one kind and its names, and the names found nowhere.

    A listing is sorted by account, namespace and name (what kubectl shows, the API server's key
    order); names asked for come in the order asked, as kubectl prints them.
    """
    from concurrent.futures import ThreadPoolExecutor

    names: Sequence[str | None] = target.names or [None]
    jobs = [(account, name) for account in accounts for name in names]

    unknown: list[HubError] = []

    def one(job: tuple[str, str | None]) -> list[Row]:
        account, name = job
        try:
            return [(account, o) for o in _query(args.hub, account, target.kind, namespace=args.namespace, name=name,
                                                 selector=args.selector, tolerate_missing_account=args.all_accounts)]
        except HubError as e:
            if e.reason != UNKNOWN_KIND:
                raise
            unknown.append(e)  # this account does not follow the kind; another may
            return []

    if len(jobs) > 1:
        with ThreadPoolExecutor(min(ACCOUNT_QUERY_THREADS, len(jobs))) as pool:
            results = list(pool.map(one, jobs))
    else:
        results = [one(j) for j in jobs]
    if unknown and len(unknown) == len(jobs):
        # No account follows it: kubectl's answer for a kind the server does not serve.
        raise CliError(f'error: the server doesn\'t have a resource type "{target.kind.resource_ref}"')
    unique: dict[tuple[str, str, str, str, str], Row] = {}  # a name asked twice is shown once
    for found in results:
        for account, obj in found:
            unique.setdefault(_object_key(account, obj), (account, obj))
    order = {name: i for i, name in reversed(list(enumerate(target.names)))}

    def key(row: Row) -> tuple[str, int, str, str]:
        account, obj = row
        name = str(_meta(obj).get("name", ""))
        return account, order.get(name, 0), str(_meta(obj).get("namespace", "")), name

    rows = sorted(unique.values(), key=key)
    found_names = {_meta(o).get("name") for _, o in rows}
    return rows, [name for name in dict.fromkeys(target.names) if name not in found_names]


def _no_resources(args: argparse.Namespace) -> str:
    if args.namespace is not None:
        return f"No resources found in {args.namespace} namespace."
    return "No resources found"


def _printer(args: argparse.Namespace, group: str, kind: str, namespaced: bool, out: TextIO, *,
             name_prefix: bool) -> TablePrinter:
    return TablePrinter(table_columns(group, kind, wide=args.output == "wide"), out, account=args.all_accounts,
                        namespace=args.namespace is None and namespaced, name_prefix=name_prefix,
                        headers=not args.no_headers)


def _get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.all_namespaces:
        args.namespace = None
    if args.selector:
        _check_selector(args.selector)
    targets = parse_resource_args(args.resources)
    if args.watch and len(targets) > 1:
        raise CliError("error: you may only specify a single resource type with --watch")
    accounts = _accounts(args)
    stream = _open_watch(args, targets[0].kind) if args.watch else None
    try:
        rows_by_target, missing = [], []
        for target in targets:
            rows, not_found = _fetch(args, accounts, target)
            rows_by_target.append((target, rows))
            missing += [(target.kind, n) for n in not_found]
        seen = _print_get(args, rows_by_target, out, err)
        for kind, name in missing:
            err.write(f'Error from server (NotFound): {kind.resource_ref} "{name}" not found\n')
        if stream is None:
            return 1 if missing else 0
        _follow(args, targets[0], stream, seen, out)
        return 0
    finally:
        if stream is not None:
            stream.close()


def _single(rows_by_target: list[tuple[ResourceArg, list[Row]]]) -> bool:
    """kubectl prints an object as itself (not a List) when one name was asked for and one found."""
    names = [n for t, _ in rows_by_target for n in t.names]
    return len(names) == 1 and sum(len(rows) for _, rows in rows_by_target) == 1


class _WatchState:
    """What `-w` needs from the first listing: the printer, and the resourceVersion shown per object."""

    def __init__(self) -> None:
        self.printer: TablePrinter | None = None
        self.versions: dict[tuple[str, str, str, str, str], str] = {}


def _object_key(account: str, obj: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return (account, _group_of(obj), str(obj.get("kind", "")), str(_meta(obj).get("namespace", "")),
            str(_meta(obj).get("name", "")))


def _print_get(args: argparse.Namespace, rows_by_target: list[tuple[ResourceArg, list[Row]]],
               out: TextIO, err: TextIO) -> _WatchState:
    state = _WatchState()
    all_rows = [row for _, rows in rows_by_target for row in rows]
    for account, obj in all_rows:
        state.versions[_object_key(account, obj)] = str(_meta(obj).get("resourceVersion", ""))
    if args.output in ("json", "yaml"):
        objects = [o for _, o in all_rows]
        if args.watch:  # a stream of objects follows: kubectl prints each as itself
            for obj in objects:
                _dump_one(obj, args.output, out)
        else:
            _dump(objects[0] if _single(rows_by_target) else list_document(objects), args.output, out)
        return state
    if args.output == "name":
        for _, obj in all_rows:
            out.write(object_name(obj) + "\n")
        out.flush()
        if not all_rows and not any(t.names for t, _ in rows_by_target):
            err.write(_no_resources(args) + "\n")
        return state
    # tables: one per kind found (kubectl prints a blank line between them, and kind/name names)
    by_kind: dict[tuple[str, str], list[Row]] = {}
    for account, obj in all_rows:
        by_kind.setdefault((_group_of(obj), str(obj.get("kind", ""))), []).append((account, obj))
    several = len(rows_by_target) > 1 or len(by_kind) > 1
    for i, ((group, kind), rows) in enumerate(by_kind.items()):
        if i:
            out.write("\n")
        namespaced = any(_meta(o).get("namespace") for _, o in rows)
        printer = _printer(args, group, kind, namespaced, out, name_prefix=several)
        printer.print_rows(rows)
        state.printer = printer
    if not all_rows and not any(t.names for t, _ in rows_by_target):
        err.write(_no_resources(args) + "\n")
        err.flush()
    return state


def _check_selector(selector: str) -> None:
    from .kube.selectors import SelectorError, parse_label_selector

    try:
        parse_label_selector(selector)
    except SelectorError as e:
        raise CliError(f"error: invalid label selector {selector!r}: {e}") from None


# --- get -w --------------------------------------------------------------------------------------


def _open_watch(args: argparse.Namespace, kind: KindInfo) -> Any:
    """Open the hub's watch before listing, so no change between the listing and the watch is lost."""
    params = [("kind", kind.query.lower())]
    if not args.all_accounts:
        params.append(("account", args.account))
    if args.namespace is not None and kind.namespaced is not False:
        params.append(("namespace", args.namespace))
    return _open(args.hub, "GET", "/api/v1/watch", params=params, timeout=WATCH_READ_TIMEOUT,
                 accept="text/event-stream")


def sse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(event, data) of a Server-Sent Events stream; comments (heartbeats) are skipped."""
    event, data = "message", []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)


def _newer(rv: str, shown: str | None) -> bool:
    """Whether a change is newer than what is on screen (resourceVersions compare as integers when they are)."""
    if shown is None:
        return True
    if rv.isdigit() and shown.isdigit():
        return int(rv) > int(shown)
    return rv != shown


def watch_rows(events: Iterable[tuple[str, str]], target: ResourceArg, selector: Any,
               versions: dict[tuple[str, str, str, str, str], str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (account, object) rows `-w` prints: the changes that pass the filters the hub's watch
    does not apply (names, label selector, group), newer than what was already shown."""
    for event, data in events:
        if event == "error":
            try:
                message = json.loads(data).get("message", data)
            except ValueError:
                message = data
            raise CliError(f"error: the hub ended the watch: {message}")
        try:
            change = json.loads(data)
        except ValueError:
            continue
        obj = change.get("object")
        if not isinstance(obj, dict):
            continue
        if target.names and _meta(obj).get("name") not in target.names:
            continue
        if target.kind.group is not None and _group_of(obj) != target.kind.group:
            continue
        if selector is not None and not selector.matches(_meta(obj).get("labels") or {}):
            continue
        account = str(change.get("account", ""))
        key = _object_key(account, obj)
        rv = str(change.get("resourceVersion") or _meta(obj).get("resourceVersion", ""))
        if change.get("type") != "DELETED" and not _newer(rv, versions.get(key)):
            continue  # already in the listing printed before the watch
        versions[key] = rv
        yield account, obj


def _follow(args: argparse.Namespace, target: ResourceArg, stream: Any, state: _WatchState, out: TextIO) -> None:
    selector = None
    if args.selector:
        from .kube.selectors import parse_label_selector

        selector = parse_label_selector(args.selector)
    try:
        for account, obj in watch_rows(sse_events(stream), target, selector, state.versions):
            if args.output in ("json", "yaml"):
                _dump_one(obj, args.output, out)
            elif args.output == "name":
                out.write(object_name(obj) + "\n")
                out.flush()
            else:
                if state.printer is None:
                    state.printer = _printer(args, _group_of(obj), str(obj.get("kind", "")),
                                             bool(_meta(obj).get("namespace")) or target.kind.namespaced is True,
                                             out, name_prefix=False)
                state.printer.print_rows([(account, obj)])
    except (socket.timeout, TimeoutError):
        raise CliError(f"error: no news from the hub for {WATCH_READ_TIMEOUT:g}s (it sends a heartbeat every "
                       f"15s): the watch is lost") from None
    except OSError as e:
        raise CliError(f"error: the watch was cut: {e}") from None
    raise CliError("error: the hub closed the watch")


# --- apply and delete ----------------------------------------------------------------------------


def _apply(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    manifests = read_manifest_files(args.filename)
    _check_namespaces(manifests, args.namespace)
    body = build_deploy_operation(args.account, manifests, namespace=args.namespace, field_manager=args.field_manager)
    task = _run_task(args.hub, body, args.timeout)
    applied, lines, error = apply_output(task)
    if args.output in ("json", "yaml"):
        if applied:
            _dump(applied[0] if len(applied) == 1 else list_document(applied), args.output, out)
    else:
        for line in lines:
            out.write(line + "\n")
    out.flush()
    if error is not None:
        err.write(f"error: {error}\n")
        return 1
    return 0


def _location(args: argparse.Namespace, kind: KindInfo, own_namespace: str | None) -> str:
    """Where to delete: the object's namespace, -n, or kubectl's `default`; '' for cluster-scoped kinds.

    A kind the table does not know may be cluster-scoped: it gets a namespace all the same, which
    the agent ignores for cluster-scoped kinds (docs/operations.md), as the API server does.
    """
    if kind.namespaced is False:
        return ""
    return own_namespace or args.namespace or "default"


def _delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.selector:
        _check_selector(args.selector)
    if args.filename and args.resources:
        raise CliError("error: a resource cannot be given both by arguments and with -f")
    if args.filename and args.selector:
        raise CliError("error: -l cannot be combined with -f")
    if args.filename:
        objects = read_manifest_files(args.filename, verb="delete")
        _check_namespaces(objects, args.namespace)
        targets = []
        for obj in objects:
            kind = _BY_KIND.get((_group_of(obj), str(obj["kind"]))) or KindInfo(
                str(obj["kind"]), _group_of(obj), _plural(str(obj["kind"]).lower()), None)
            targets.append(DeleteTarget(_manifest_name(obj), _location(args, kind, _meta(obj).get("namespace"))))
        body = build_delete_operations(args.account, targets=targets, cascade=args.cascade,
                                       grace_period=args.grace_period)
    elif not args.resources:
        raise CliError("error: You must provide one or more resources by argument or filename.")
    else:
        resources = parse_resource_args(args.resources)
        if args.selector:
            if any(r.names for r in resources):
                raise CliError("error: name cannot be provided when a selector is specified")
            body = []
            for r in resources:
                location = _location(args, r.kind, None)
                body += build_delete_operations(args.account, kind=r.kind, selector=args.selector, location=location,
                                                cascade=args.cascade, grace_period=args.grace_period)
        else:
            if not all(r.names for r in resources):
                raise CliError("error: resource(s) were provided, but no name was specified")
            targets = [DeleteTarget(f"{r.kind.token} {name}", _location(args, r.kind, None))
                       for r in resources for name in r.names]
            body = build_delete_operations(args.account, targets=targets, cascade=args.cascade,
                                           grace_period=args.grace_period)
    task = _run_task(args.hub, body, args.timeout)
    lines, not_found, error = delete_output(task)
    for line in lines:
        out.write(line + "\n")
    out.flush()
    for line in not_found:
        err.write(line + "\n")
    if error is not None:
        err.write(f"error: {error}\n")
    return 1 if error is not None or not_found else 0


# --- command line --------------------------------------------------------------------------------


def _run(command: Callable[[argparse.Namespace, TextIO, TextIO], int]) -> Callable[[argparse.Namespace], int]:
    """Errors become their message on stderr and exit status 1; Ctrl-C (how -w ends) exits 0."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args, sys.stdout, sys.stderr)
        except CliError as e:
            sys.stdout.flush()
            print(e, file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:  # `scale-agent get ... | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    return run


def _non_negative(value: str) -> float:
    seconds = float(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return seconds


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `get`, `apply` and `delete` on the `scale-agent` parser."""
    hub = argparse.ArgumentParser(add_help=False)
    hub.add_argument("--hub", default=DEFAULT_HUB, metavar="URL", help=f"the hub's HTTP API (default {DEFAULT_HUB})")

    p = sub.add_parser("get", parents=[hub], usage="scale-agent get KIND[,KIND...] [NAME...] | KIND/NAME... "
                       "(--account A | --all-accounts) [-n NS | -A] [-l SELECTOR] [-o yaml|json|wide|name] [-w]",
                       help="show objects from the hub's cache, like kubectl get",
                       description="Objects of one or all accounts, from the hub's real-time cache (docs/cli.md).")
    p.add_argument("resources", nargs="*", metavar="KIND [NAME...]",
                   help="a kind (deployment, deploy, Deployment.apps, pods, svc, ...), several separated by commas, "
                        "then names; or KIND/NAME...")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--account", help="the account (cluster) to read")
    which.add_argument("--all-accounts", action="store_true", help="every account the hub knows (adds ACCOUNT)")
    p.add_argument("-n", "--namespace", help="only this namespace (default: all namespaces)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces (the default here)")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="label selector: app=web, 'tier in (a,b)', !canary")
    p.add_argument("-o", "--output", choices=["yaml", "json", "wide", "name"], help="output format (default: a table)")
    p.add_argument("-w", "--watch", action="store_true", help="after the list, print a row per change (Ctrl-C stops)")
    p.add_argument("--no-headers", action="store_true", help="tables without their header line")
    p.set_defaults(func=_run(_get))

    p = sub.add_parser("apply", parents=[hub], usage="scale-agent apply -f FILE [-f FILE...] --account A [-n NS] "
                       "[--field-manager NAME] [--timeout SECONDS] [-o json|yaml]",
                       help="apply manifests to an account through the hub (server-side)",
                       description="Send manifests to an account's agent as one deployManifest operation and wait "
                                   "for it (docs/cli.md).")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="YAML or JSON file, directory, or - for stdin (repeatable)")
    p.add_argument("--account", required=True, help="the account (cluster) to apply to")
    p.add_argument("-n", "--namespace", help="namespace for manifests that do not name one")
    p.add_argument("--field-manager", default="scale-agent", metavar="NAME",
                   help="server-side apply field manager (default scale-agent)")
    p.add_argument("--timeout", type=_non_negative, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long to wait for the operation (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("-o", "--output", choices=["json", "yaml"], help="print the applied objects instead")
    p.set_defaults(func=_run(_apply))

    p = sub.add_parser("delete", parents=[hub], usage="scale-agent delete (KIND NAME... | KIND/NAME... | -f FILE | "
                       "KIND -l SELECTOR) --account A [-n NS] [--cascade background|foreground|orphan] "
                       "[--grace-period N] [--timeout SECONDS]", help="delete objects of an account through the hub",
                       description="Delete objects by kind and name, by file, or by label selector, as "
                                   "deleteManifest operations (docs/cli.md).")
    p.add_argument("resources", nargs="*", metavar="KIND [NAME...]", help="a kind and names, or KIND/NAME...")
    p.add_argument("-f", "--filename", action="append", metavar="FILE",
                   help="delete the objects this file describes (repeatable, - for stdin)")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="delete every object of KIND matching this selector")
    p.add_argument("--account", required=True, help="the account (cluster) to delete from")
    p.add_argument("-n", "--namespace", help="namespace (default: the object's own, else default)")
    p.add_argument("--cascade", choices=sorted(_CASCADE), default="background",
                   help="what happens to dependents (default background)")
    p.add_argument("--grace-period", type=int, metavar="N",
                   help="seconds for the objects to terminate (default: each object's own)")
    p.add_argument("--timeout", type=_non_negative, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long to wait for the operation (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(func=_run(_delete))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m scaleagent.manifest_cli get ...`: the commands without the `scale-agent` entry point."""
    parser = argparse.ArgumentParser(prog="scale-agent")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
