"""Events in two shapes: core `v1` and `events.k8s.io/v1`, over one storage.

A real apiserver stores every Event once, as a core Event, and serves it at both group-versions,
converting on each read and write (pkg/apis/events/v1/conversion.go): an Event created in one is
listed and watched in the other. A client that follows both would see each Event twice, which is
why both resources publish the same `storageVersionHash`. The conversion renames fields; the
`deprecated*` ones keep the core Event's legacy data readable from the new API.

    core v1              events.k8s.io/v1
    involvedObject       regarding
    message              note
    source               deprecatedSource
    firstTimestamp       deprecatedFirstTimestamp
    lastTimestamp        deprecatedLastTimestamp
    count                deprecatedCount
    reportingComponent   reportingController
    (same name)          eventTime, series, reportingInstance, action, reason, related, type

Fields are written in Go's struct order and with its omitempty rules, so either shape reads as a
real server's: a core Event always carries `source`, `firstTimestamp`, `lastTimestamp`,
`eventTime`, `reportingComponent` and `reportingInstance` (null or empty); an events.k8s.io one
always `eventTime`, `regarding`, `deprecatedSource` and the two deprecated timestamps.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

GROUP = "events.k8s.io"

# events.k8s.io field labels and the core Event fields they select (AddFieldLabelConversionsForEvent).
FIELD_LABELS = {
    "metadata.name": "metadata.name",
    "metadata.namespace": "metadata.namespace",
    "reason": "reason",
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "source": "source",
    "type": "type",
}

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_events_v1(group: str) -> bool:
    return group == GROUP


def to_events_v1(core: dict[str, Any]) -> dict[str, Any]:
    """A stored core Event as events.k8s.io/v1 serves it."""
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": f"{GROUP}/v1",
        "metadata": core.get("metadata", {}),
        "eventTime": core.get("eventTime"),
    }
    _copy(core, out, "series", "series")
    _copy(core, out, "reportingComponent", "reportingController")
    _copy(core, out, "reportingInstance", "reportingInstance")
    _copy(core, out, "action", "action")
    _copy(core, out, "reason", "reason")
    out["regarding"] = core.get("involvedObject") or {}
    _copy(core, out, "related", "related")
    _copy(core, out, "message", "note")
    _copy(core, out, "type", "type")
    out["deprecatedSource"] = core.get("source") or {}
    out["deprecatedFirstTimestamp"] = core.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = core.get("lastTimestamp")
    _copy(core, out, "count", "deprecatedCount")
    return out


def to_core(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as the core Event it is stored as."""
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": event.get("metadata", {}),
        "involvedObject": event.get("regarding") or {},
    }
    _copy(event, out, "reason", "reason")
    _copy(event, out, "note", "message")
    out["source"] = event.get("deprecatedSource") or {}
    out["firstTimestamp"] = event.get("deprecatedFirstTimestamp")
    out["lastTimestamp"] = event.get("deprecatedLastTimestamp")
    _copy(event, out, "deprecatedCount", "count")
    _copy(event, out, "type", "type")
    out["eventTime"] = event.get("eventTime")
    _copy(event, out, "series", "series")
    _copy(event, out, "action", "action")
    _copy(event, out, "related", "related")
    out["reportingComponent"] = event.get("reportingController") or ""
    out["reportingInstance"] = event.get("reportingInstance") or ""
    return out


def normalize_core(event: dict[str, Any]) -> dict[str, Any]:
    """A core Event with the fields Go always writes, in its order (as a real server answers it)."""
    return to_core(to_events_v1(event))


def _copy(src: dict[str, Any], dst: dict[str, Any], key: str, as_key: str) -> None:
    """omitempty: only a value that is not empty (nor zero) is written."""
    value = src.get(key)
    if value not in (None, "", 0, {}, []):
        dst[as_key] = value


def problems(event: dict[str, Any], group: str, old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Upstream's Event validation (pkg/apis/core/validation/events.go), on the core shape.

    Every Event gets the legacy checks; one written through events.k8s.io/v1 also the strict ones
    (eventTime, type, no deprecated fields on create; on update, what an Event says may not change).
    Field paths are the internal names, as upstream reports them (involvedObject, not regarding).
    """
    out: list[tuple[str, str]] = []
    ns = (event.get("metadata") or {}).get("namespace", "")
    ref_ns = (event.get("involvedObject") or {}).get("namespace") or ""
    reporting = event.get("reportingComponent") or ""
    if not event.get("eventTime"):
        if (not ref_ns and ns not in ("", "default")) or (ref_ns and ref_ns != ns):
            out.append(("involvedObject.namespace", f'Invalid value: "{ref_ns}": does not match event.namespace'))
    else:
        if not ref_ns and ns not in ("default", "kube-system"):
            out.append(("involvedObject.namespace", f'Invalid value: "{ref_ns}": does not match event.namespace'))
        if not reporting:
            out.append(("reportingController", "Required value"))
        elif (
            len(reporting) > 316
            or not _QUALIFIED_NAME.fullmatch(reporting.rsplit("/", 1)[-1])
            or ("/" in reporting and not _DNS1123_SUBDOMAIN.fullmatch(reporting.rsplit("/", 1)[0]))
        ):
            out.append(
                (
                    "reportingController",
                    f'Invalid value: "{reporting}": a qualified name must consist of '
                    "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and "
                    "'/' (e.g. 'example.com/MyName')",
                )
            )
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = event.get(field) or ""
            if not value:
                out.append((field, "Required value"))
            elif len(value) > limit:
                out.append((field, f'Invalid value: "": can have at most {limit} characters'))
        if len(event.get("message") or "") > 1024:
            out.append(("message", 'Invalid value: "": can have at most 1024 characters'))
    if group != GROUP:
        return out
    if old is None:
        series = event.get("series")
        if series is not None:
            if int(series.get("count") or 0) < 2:
                out.append(("series.count", 'Invalid value: "": should be at least 2'))
            if not series.get("lastObservedTime"):
                out.append(("series.lastObservedTime", "Required value"))
        if not event.get("eventTime"):
            out.append(("eventTime", "Required value"))
        if event.get("type") not in ("Normal", "Warning"):
            out.append(("type", f'Invalid value: "": has invalid value: {event.get("type") or ""}'))
        for field in ("firstTimestamp", "lastTimestamp", "count"):
            if event.get(field):
                out.append((field, 'Invalid value: "": needs to be unset'))
        if (event.get("source") or {}).get("component") or (event.get("source") or {}).get("host"):
            out.append(("source", 'Invalid value: "": needs to be unset'))
        return out
    before, after = normalize_core(old), normalize_core(event)
    for field in (
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    ):
        if after.get(field) != before.get(field):
            name = "reportingController" if field == "reportingComponent" else field
            value = after.get(field)
            shown = f'"{value}"' if isinstance(value, str) else orjson.dumps(value).decode()
            out.append((name, f"Invalid value: {shown}: field is immutable"))
    return out
