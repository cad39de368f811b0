"""Server-side printing: the `meta.k8s.io/v1 Table` kubectl asks for with `as=Table`.

kubectl prints what the server sends, so the columns mirror kube-apiserver's printers for the
kinds people look at most; every other kind gets Name and Age, as custom resources do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..kube.printing import (
    job_completions,
    job_status,
    pod_ready,
    pod_restarts,
    pod_status,
    ready_replicas,
    service_external_ip,
    service_ports,
    since,
    spec_of,
    status_of,
)
from . import events

# name, type, description, value, and optionally the priority (1: shown by `kubectl get -o wide` only)
Column = tuple[Any, ...]


def human_age(ts: str | None, now: datetime | None = None) -> str:
    """kubectl's duration shorthand (apimachinery duration.HumanDuration), for a Time or MicroTime."""
    return since(ts, now)


def _name(o: dict[str, Any]) -> str:
    return o.get("metadata", {}).get("name", "")


def _age(o: dict[str, Any]) -> str:
    return human_age(o.get("metadata", {}).get("creationTimestamp"))


def _event_first(o: dict[str, Any]) -> str:
    return human_age(o.get("firstTimestamp") or o.get("eventTime"))


def _event_last(o: dict[str, Any]) -> str:
    """printEvent: the series' last observation, else lastTimestamp, else when it was first seen."""
    if o.get("series"):
        return human_age((o["series"] or {}).get("lastObservedTime"))
    return human_age(o["lastTimestamp"]) if o.get("lastTimestamp") else _event_first(o)


def _event_count(o: dict[str, Any]) -> int:
    if o.get("series"):
        return int((o["series"] or {}).get("count") or 0)
    return int(o.get("count") or 0) or 1  # singleton events have no count in the new API


def _event_object(o: dict[str, Any]) -> str:
    ref = o.get("involvedObject") or {}
    kind = str(ref.get("kind") or "").lower()
    return f"{kind}/{ref['name']}" if ref.get("name") else kind


def _event_source(o: dict[str, Any]) -> str:
    source = o.get("source") or {}
    component = source.get("component") or o.get("reportingComponent") or ""
    instance = source.get("host") or o.get("reportingInstance") or ""
    if not component:
        return "<unknown>"
    return f"{component}, {instance}" if instance else component


def _component_condition(o: dict[str, Any], field: str) -> str:
    healthy: dict[str, Any] = next((c for c in o.get("conditions") or [] if c.get("type") == "Healthy"), {})
    if field == "status":
        return "Healthy" if healthy.get("status") == "True" else "Unhealthy"
    return healthy.get(field, "")


NAME: Column = ("Name", "string", "Name must be unique within a namespace.", _name)
AGE: Column = (
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    _age,
)

COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "Namespace"): [
        NAME,
        ("Status", "string", "The status of the namespace", lambda o: status_of(o).get("phase", "")),
        AGE,
    ],
    ("", "Pod"): [
        NAME,
        ("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", pod_ready),
        ("Status", "string", "The aggregate status of the containers in this pod.", pod_status),
        (
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted.",
            lambda o: pod_restarts(o, datetime.now(UTC)),
        ),
        AGE,
    ],
    ("", "ConfigMap"): [
        NAME,
        (
            "Data",
            "string",
            "Number of data entries",
            lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
        ),
        AGE,
    ],
    ("", "ComponentStatus"): [
        NAME,
        ("Status", "string", "Status of the condition for a component.", lambda o: _component_condition(o, "status")),
        (
            "Message",
            "string",
            "Message about the condition for a component.",
            lambda o: _component_condition(o, "message"),
        ),
        ("Error", "string", "Condition error code for a component.", lambda o: _component_condition(o, "error")),
    ],
    ("", "ServiceAccount"): [
        NAME,
        (
            "Secrets",
            "string",
            "Secrets is a list of the secrets in the same namespace "
            "that pods running using this ServiceAccount are allowed to use.",
            lambda o: len(o.get("secrets") or []),
        ),
        AGE,
    ],
    ("", "Event"): [
        (
            "Last Seen",
            "string",
            "The time at which the most recent occurrence of this event was recorded.",
            _event_last,
        ),
        (
            "Type",
            "string",
            "Type of this event (Normal, Warning), new types could be added in the future",
            lambda o: o.get("type", ""),
        ),
        (
            "Reason",
            "string",
            "This should be a short, machine understandable string that gives the reason for the "
            "transition into the object's current status.",
            lambda o: o.get("reason", ""),
        ),
        ("Object", "string", "The object that this event is about.", _event_object),
        (
            "Subobject",
            "string",
            "The field of the object the event is about.",
            lambda o: (o.get("involvedObject") or {}).get("fieldPath", ""),
            1,
        ),
        ("Source", "string", "The component reporting this event.", _event_source, 1),
        (
            "Message",
            "string",
            "A human-readable description of the status of this operation.",
            lambda o: (o.get("message") or "").strip(),
        ),
        ("First Seen", "string", "The time at which the event was first recorded.", _event_first, 1),
        ("Count", "string", "The number of times this event has occurred.", _event_count, 1),
        ("Name", "string", "Name must be unique within a namespace.", _name, 1),
    ],
    ("", "Secret"): [
        NAME,
        ("Type", "string", "The type of the secret", lambda o: o.get("type", "Opaque")),
        ("Data", "string", "Number of data entries", lambda o: len(o.get("data") or {})),
        AGE,
    ],
    ("", "Service"): [
        NAME,
        ("Type", "string", "The type of the service", lambda o: spec_of(o).get("type", "ClusterIP")),
        ("Cluster-IP", "string", "The cluster IP of the service", lambda o: spec_of(o).get("clusterIP", "<none>")),
        ("External-IP", "string", "The external IP of the service", service_external_ip),
        ("Port(s)", "string", "The ports of the service", service_ports),
        AGE,
    ],
    ("apps", "Deployment"): [
        NAME,
        (
            "Ready",
            "string",
            "Number of the pod with ready state",
            ready_replicas,
        ),
        (
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            lambda o: status_of(o).get("updatedReplicas", 0),
        ),
        (
            "Available",
            "string",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            lambda o: status_of(o).get("availableReplicas", 0),
        ),
        AGE,
    ],
    ("apps", "ReplicaSet"): [
        NAME,
        ("Desired", "integer", "Number of desired pods.", lambda o: spec_of(o).get("replicas", 1)),
        ("Current", "integer", "Number of actual replicas.", lambda o: status_of(o).get("replicas", 0)),
        ("Ready", "integer", "Number of ready replicas.", lambda o: status_of(o).get("readyReplicas", 0)),
        AGE,
    ],
    ("batch", "Job"): [
        NAME,
        ("Status", "string", "Status of the job.", job_status),
        ("Completions", "string", "The completion status of the job.", job_completions),
        AGE,
    ],
}


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def columns_for(group: str, kind: str) -> list[Column]:
    if (group, kind) == (events.GROUP, "Event"):  # printed from the internal (core) Event, as upstream
        return COLUMNS[("", "Event")]
    return COLUMNS.get((group, kind), [NAME, AGE])


def table(
    group: str,
    kind: str,
    objs: list[dict[str, Any]],
    include_object: str = "Metadata",
    list_meta: dict[str, Any] | None = None,
    with_headers: bool = True,
) -> dict[str, Any]:
    cols = columns_for(group, kind)
    rows = []
    for o in objs:
        printed = events.to_core(o) if (group, kind) == (events.GROUP, "Event") else o
        row: dict[str, Any] = {"cells": [c[3](printed) for c in cols]}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = _partial(o)
        else:
            row["object"] = None  # a RawExtension in Go: written even when empty
        rows.append(row)
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}}
    out["columnDefinitions"] = (
        [
            {
                "name": c[0],
                "type": c[1],
                "format": "name" if c[0] == "Name" else "",
                "description": c[2],
                "priority": c[4] if len(c) > 4 else 0,
            }
            for c in cols
        ]
        if with_headers
        else []
    )
    out["rows"] = rows
    return out
