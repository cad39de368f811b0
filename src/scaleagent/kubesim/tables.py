"""Server-side printing: the `meta.k8s.io/v1 Table` kubectl asks for with `as=Table`.

kubectl prints what the server sends, so the columns mirror kube-apiserver's printers for the
kinds people look at most; every other kind gets Name and Age, as custom resources do.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from ..kube.printing import pod_ready, service_ports

Column = tuple[str, str, str, Callable[[dict[str, Any]], Any]]  # name, type, description, value


def human_age(ts: str | None, now: datetime | None = None) -> str:
    """kubectl's duration shorthand (apimachinery duration.HumanDuration)."""
    if not ts:
        return "<unknown>"
    try:
        then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return "<invalid>"
    seconds = int(((now or datetime.now(timezone.utc)) - then).total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        h = hours % 24
        return f"{days}d{h}h" if h else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d"


def _name(o: dict[str, Any]) -> str:
    return o.get("metadata", {}).get("name", "")


def _age(o: dict[str, Any]) -> str:
    return human_age(o.get("metadata", {}).get("creationTimestamp"))


def _status(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("status") or {}


def _spec(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("spec") or {}




def _restarts(o: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount", 0)) for c in _status(o).get("containerStatuses") or [])




NAME: Column = ("Name", "string", "Name must be unique within a namespace.", _name)
AGE: Column = ("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", _age)

COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "Namespace"): [NAME, ("Status", "string", "The status of the namespace", lambda o: _status(o).get("phase", "")), AGE],
    ("", "Pod"): [
        NAME,
        ("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", pod_ready),
        ("Status", "string", "The aggregate status of the containers in this pod.",
         lambda o: "Terminating" if o["metadata"].get("deletionTimestamp") else _status(o).get("phase", "Pending")),
        ("Restarts", "string", "The number of times the containers in this pod have been restarted.", _restarts),
        AGE,
    ],
    ("", "ConfigMap"): [NAME, ("Data", "integer", "Number of data entries", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})), AGE],
    ("", "Secret"): [NAME, ("Type", "string", "The type of the secret", lambda o: o.get("type", "Opaque")),
                     ("Data", "string", "Number of data entries", lambda o: len(o.get("data") or {})), AGE],
    ("", "Service"): [
        NAME,
        ("Type", "string", "The type of the service", lambda o: _spec(o).get("type", "ClusterIP")),
        ("Cluster-IP", "string", "The cluster IP of the service", lambda o: _spec(o).get("clusterIP", "<none>")),
        ("External-IP", "string", "The external IP of the service", lambda o: "<none>"),
        ("Port(s)", "string", "The ports of the service", service_ports),
        AGE,
    ],
    ("apps", "Deployment"): [
        NAME,
        ("Ready", "string", "Number of the pod with ready state", lambda o: f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 1)}"),
        ("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
         lambda o: _status(o).get("updatedReplicas", 0)),
        ("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
         lambda o: _status(o).get("availableReplicas", 0)),
        AGE,
    ],
    ("apps", "ReplicaSet"): [
        NAME,
        ("Desired", "integer", "Number of desired pods.", lambda o: _spec(o).get("replicas", 1)),
        ("Current", "integer", "Number of actual replicas.", lambda o: _status(o).get("replicas", 0)),
        ("Ready", "integer", "Number of ready replicas.", lambda o: _status(o).get("readyReplicas", 0)),
        AGE,
    ],
    ("batch", "Job"): [
        NAME,
        ("Status", "string", "Status of the job.", lambda o: "Complete" if _status(o).get("succeeded") else "Running"),
        ("Completions", "string", "The completion status of the job.",
         lambda o: f"{_status(o).get('succeeded', 0)}/{_spec(o).get('completions', 1)}"),
        AGE,
    ],
}


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def columns_for(group: str, kind: str) -> list[Column]:
    return COLUMNS.get((group, kind), [NAME, AGE])


def table(group: str, kind: str, objs: list[dict[str, Any]], include_object: str = "Metadata",
          list_meta: dict[str, Any] | None = None, with_headers: bool = True) -> dict[str, Any]:
    cols = columns_for(group, kind)
    rows = []
    for o in objs:
        row: dict[str, Any] = {"cells": [c[3](o) for c in cols]}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = _partial(o)
        rows.append(row)
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}}
    out["columnDefinitions"] = (
        [{"name": c[0], "type": c[1], "format": "name" if c is NAME else "", "description": c[2], "priority": 0} for c in cols]
        if with_headers else []
    )
    out["rows"] = rows
    return out
