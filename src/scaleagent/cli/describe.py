"""`describe`'s text, as kubectl prints it: sections of `Key:<tab>value` lines aligned by Go's
tabwriter, Labels and Annotations one per line, kind-specific fields for the common kinds, and the
object's Events last. Pure functions over objects (the Events are given), tested without a hub."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..kube.printing import as_int, pod_status, since, spec_of, status_of
from .kinds import meta

__all__ = ["describe", "events_for", "pod_template_lines", "tabwrite"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def tabwrite(lines: Sequence[str], padding: int = 2) -> str:
    """Go's text/tabwriter (minwidth 0, padding 2, as kubectl's describe sets it): a cell ends at a
    tab, and a column is as wide as its widest cell among the consecutive lines that have it."""
    rows = [line.split("\t") for line in lines]
    out: list[str] = []

    def write(line0: int, line1: int, widths: list[int]) -> None:
        for row in rows[line0:line1]:
            cells = [c.ljust(widths[j]) if j < len(widths) else c for j, c in enumerate(row[:-1])]
            out.append(("".join(cells) + row[-1]).rstrip())

    def fmt(line0: int, line1: int, widths: list[int]) -> None:
        column = len(widths)
        this = line0
        while this < line1:
            if column >= len(rows[this]) - 1:
                this += 1
                continue
            write(line0, this, widths)
            line0 = this
            width = 0
            while this < line1 and column < len(rows[this]) - 1:
                width = max(width, len(rows[this][column]) + padding)
                this += 1
            fmt(line0, this, [*widths, width])
            line0 = this
        write(line0, line1, widths)

    fmt(0, len(rows), [])
    return "\n".join(out) + "\n"


class _Lines:
    """kubectl's PrefixWriter: lines at an indentation level (two spaces a level)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, level: int, text: str) -> None:
        self.lines.append("  " * level + text)

    def labels(self, level: int, title: str, values: dict[str, Any] | None, sep: str = "=") -> None:
        """`Labels:<tab>a=b` then `<tab>c=d` per further label (kubectl's printLabelsMultiline)."""
        items = sorted((values or {}).items())
        if title == "Annotations":
            items = [(k, v) for k, v in items if k != LAST_APPLIED]
        if not items:
            self.add(level, f"{title}:\t<none>")
            return
        for i, (k, v) in enumerate(items):
            text = f"{k}{sep}{v}" if sep == "=" else f"{k}: {v}"
            self.add(level, f"{title}:\t{text}" if i == 0 else f"\t{text}")


def _timestamp(value: Any) -> str:
    """RFC 1123 with the zone, as kubectl prints CreationTimestamp: `Tue, 24 Nov 2026 10:03:12 +0000`."""
    if not value:
        return "<unknown>"
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return t.strftime("%a, %d %b %Y %H:%M:%S %z")


def _header(w: _Lines, o: dict[str, Any], namespaced: bool = True) -> None:
    m = meta(o)
    w.add(0, f"Name:\t{m.get('name', '')}")
    if namespaced:
        w.add(0, f"Namespace:\t{m.get('namespace', '')}")
    w.labels(0, "Labels", m.get("labels"))
    w.labels(0, "Annotations", m.get("annotations"), sep=":")


def _selector(selector: dict[str, Any] | None) -> str:
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        values = ",".join(e.get("values") or [])
        parts.append(f"{e.get('key')} {str(e.get('operator', '')).lower()} ({values})")
    return ",".join(parts) or "<none>"


def _container(w: _Lines, level: int, c: dict[str, Any], status: dict[str, Any] | None, space: str = "") -> None:
    w.add(level, f"{space}{c.get('name', '')}:")
    if status is not None:
        w.add(level + 1, f"Container ID:\t{status.get('containerID', '')}")
    w.add(level + 1, f"Image:\t{c.get('image', '')}")
    if status is not None:
        w.add(level + 1, f"Image ID:\t{status.get('imageID', '')}")
    ports = c.get("ports") or []
    w.add(
        level + 1,
        "Port:\t" + (", ".join(f"{p.get('containerPort')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"),
    )
    w.add(
        level + 1,
        "Host Port:\t" + (", ".join(f"{p.get('hostPort', 0)}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"),
    )
    if c.get("command"):
        w.add(level + 1, "Command:")
        for part in c["command"]:
            w.add(level + 2, str(part))
    if c.get("args"):
        w.add(level + 1, "Args:")
        for part in c["args"]:
            w.add(level + 2, str(part))
    if status is not None:
        state = status.get("state") or {}
        for name, detail in state.items():
            w.add(level + 1, f"State:\t{name.capitalize()}")
            if detail.get("reason"):
                w.add(level + 2, f"Reason:\t{detail['reason']}")
            if detail.get("startedAt"):
                w.add(level + 2, f"Started:\t{_timestamp(detail['startedAt'])}")
        w.add(level + 1, f"Ready:\t{'True' if status.get('ready') else 'False'}")
        w.add(level + 1, f"Restart Count:\t{as_int(status.get('restartCount'))}")
    resources = c.get("resources") or {}
    for title in ("limits", "requests"):
        if resources.get(title):
            w.add(level + 1, f"{title.capitalize()}:")
            for k, v in sorted(resources[title].items()):
                w.add(level + 2, f"{k}:\t{v}")
    env = c.get("env") or []
    if not env and not c.get("envFrom"):
        w.add(level + 1, "Environment:\t<none>")
    else:
        w.add(level + 1, "Environment:")
        for e in env:
            value = e.get("value")
            if value is None and e.get("valueFrom"):
                ref = e["valueFrom"]
                source = next(iter(ref), "valueFrom")
                detail = ref.get(source) or {}
                value = f"<set to the key '{detail.get('key', '')}' of {source} '{detail.get('name', '')}'>"
            w.add(level + 2, f"{e.get('name', '')}:\t{value if value is not None else ''}")
    mounts = c.get("volumeMounts") or []
    if not mounts:
        w.add(level + 1, "Mounts:\t<none>")
    else:
        w.add(level + 1, "Mounts:")
        for mount in mounts:
            mode = "ro" if mount.get("readOnly") else "rw"
            w.add(level + 2, f"{mount.get('mountPath', '')} from {mount.get('name', '')} ({mode})")


def _volumes(w: _Lines, level: int, volumes: list[dict[str, Any]]) -> None:
    if not volumes:
        w.add(level, "Volumes:\t<none>")
        return
    w.add(level, "Volumes:")
    for v in volumes:
        w.add(level + 1, f"{v.get('name', '')}:")
        source = next((k for k in v if k != "name"), "")
        detail = v.get(source) or {}
        w.add(level + 2, f"Type:\t{source[:1].upper() + source[1:]}")
        for k, value in sorted(detail.items()) if isinstance(detail, dict) else []:
            if not isinstance(value, (dict, list)):
                w.add(level + 2, f"{k[:1].upper() + k[1:]}:\t{value}")


def pod_template_lines(template: dict[str, Any], level: int = 0) -> list[str]:
    """`Pod Template:` of a Deployment, ReplicaSet, Job... (also what `rollout history --revision` shows)."""
    w = _Lines()
    w.add(level, "Pod Template:")
    tmeta = template.get("metadata") or {}
    w.labels(level + 1, "Labels", tmeta.get("labels"))
    if tmeta.get("annotations"):
        w.labels(level + 1, "Annotations", tmeta.get("annotations"), sep=":")
    spec = template.get("spec") or {}
    if spec.get("serviceAccountName"):
        w.add(level + 1, f"Service Account:\t{spec['serviceAccountName']}")
    for title, key in (("Init Containers", "initContainers"), ("Containers", "containers")):
        if spec.get(key) or key == "containers":
            w.add(level + 1, f"{title}:")
            for c in spec.get(key) or []:
                _container(w, level + 1, c, None, space=" ")
    _volumes(w, level + 1, spec.get("volumes") or [])
    w.add(level + 1, "Node-Selectors:\t" + _pairs(spec.get("nodeSelector")))
    w.add(level + 1, "Tolerations:\t" + (_tolerations(spec.get("tolerations")) or "<none>"))
    return w.lines


def _pairs(values: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((values or {}).items())) or "<none>"


def _tolerations(tolerations: list[dict[str, Any]] | None) -> str:
    out = []
    for t in tolerations or []:
        text = str(t.get("key", ""))
        if t.get("value"):
            text += f"={t['value']}"
        if t.get("effect"):
            text += f":{t['effect']}"
        if t.get("operator") == "Exists" and not t.get("key"):
            text = f"op=Exists{':' + t['effect'] if t.get('effect') else ''}"
        if t.get("tolerationSeconds") is not None:
            text += f" for {t['tolerationSeconds']}s"
        out.append(text)
    return ", ".join(out)


def _conditions(w: _Lines, conditions: list[dict[str, Any]], reason: bool = True) -> None:
    if not conditions:
        return
    w.add(0, "Conditions:")
    if reason:
        w.add(1, "Type\tStatus\tReason")
        w.add(1, "----\t------\t------")
        for c in conditions:
            w.add(1, f"{c.get('type', '')}\t{c.get('status', '')}\t{c.get('reason', '')}")
    else:
        w.add(1, "Type\tStatus")
        for c in conditions:
            w.add(1, f"{c.get('type', '')}\t{c.get('status', '')}")


# --- per kind ------------------------------------------------------------------------------------


def _deployment(w: _Lines, o: dict[str, Any], related: Sequence[dict[str, Any]], now: datetime) -> None:
    spec, status = spec_of(o), status_of(o)
    w.add(0, f"CreationTimestamp:\t{_timestamp(meta(o).get('creationTimestamp'))}")
    w.add(0, f"Selector:\t{_selector(spec.get('selector'))}")
    replicas = as_int(spec.get("replicas", 1))
    w.add(
        0,
        f"Replicas:\t{replicas} desired | {as_int(status.get('updatedReplicas'))} updated | "
        f"{as_int(status.get('replicas'))} total | {as_int(status.get('availableReplicas'))} available | "
        f"{as_int(status.get('unavailableReplicas'))} unavailable",
    )
    strategy = spec.get("strategy") or {}
    w.add(0, f"StrategyType:\t{strategy.get('type', 'RollingUpdate')}")
    w.add(0, f"MinReadySeconds:\t{as_int(spec.get('minReadySeconds'))}")
    rolling = strategy.get("rollingUpdate")
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        rolling = rolling or {}
        w.add(
            0,
            f"RollingUpdateStrategy:\t{rolling.get('maxUnavailable', '25%')} max unavailable, "
            f"{rolling.get('maxSurge', '25%')} max surge",
        )
    w.lines += pod_template_lines(spec.get("template") or {})
    _conditions(w, status.get("conditions") or [])
    uid = meta(o).get("uid")
    owned = [
        rs
        for rs in related
        if rs.get("kind") == "ReplicaSet"
        and any(ref.get("uid") == uid for ref in meta(rs).get("ownerReferences") or [])
    ]
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    new = [rs for rs in owned if _same_template(rs, template_labels, o)]
    old = [rs for rs in owned if rs not in new and as_int(spec_of(rs).get("replicas")) > 0]

    def rs_text(rs: dict[str, Any]) -> str:
        return (
            f"{meta(rs).get('name', '')} ({as_int(status_of(rs).get('replicas'))}/"
            f"{as_int(spec_of(rs).get('replicas'))} replicas created)"
        )

    w.add(0, "OldReplicaSets:\t" + (", ".join(rs_text(rs) for rs in old) or "<none>"))
    w.add(0, "NewReplicaSet:\t" + (", ".join(rs_text(rs) for rs in new) or "<none>"))


def _same_template(rs: dict[str, Any], template_labels: dict[str, Any], deployment: dict[str, Any]) -> bool:
    """Whether a ReplicaSet is the Deployment's current one: the same revision annotation."""
    revision = (meta(deployment).get("annotations") or {}).get("deployment.kubernetes.io/revision")
    rs_revision = (meta(rs).get("annotations") or {}).get("deployment.kubernetes.io/revision")
    return revision is not None and revision == rs_revision


def _pod(w: _Lines, o: dict[str, Any], related: Sequence[dict[str, Any]], now: datetime) -> None:
    spec, status = spec_of(o), status_of(o)
    w.add(0, f"Name:\t{meta(o).get('name', '')}")
    w.add(0, f"Namespace:\t{meta(o).get('namespace', '')}")
    if spec.get("priority") is not None:
        w.add(0, f"Priority:\t{spec['priority']}")
    if spec.get("serviceAccountName"):
        w.add(0, f"Service Account:\t{spec['serviceAccountName']}")
    w.add(0, f"Node:\t{spec.get('nodeName') or '<none>'}{'/' + status['hostIP'] if status.get('hostIP') else ''}")
    if status.get("startTime"):
        w.add(0, f"Start Time:\t{_timestamp(status['startTime'])}")
    w.labels(0, "Labels", meta(o).get("labels"))
    w.labels(0, "Annotations", meta(o).get("annotations"), sep=":")
    w.add(0, f"Status:\t{pod_status(o) if meta(o).get('deletionTimestamp') else status.get('phase', 'Unknown')}")
    if status.get("reason"):
        w.add(0, f"Reason:\t{status['reason']}")
    w.add(0, f"IP:\t{status.get('podIP', '')}")
    ips = status.get("podIPs") or []
    if ips:
        w.add(0, "IPs:")
        for ip in ips:
            w.add(1, f"IP:\t{ip.get('ip', '')}")
    else:
        w.add(0, "IPs:\t<none>")
    owners = [r for r in meta(o).get("ownerReferences") or [] if r.get("controller")]
    if owners:
        w.add(0, f"Controlled By:\t{owners[0].get('kind', '')}/{owners[0].get('name', '')}")
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or []}
    init_statuses = {s.get("name"): s for s in status.get("initContainerStatuses") or []}
    if spec.get("initContainers"):
        w.add(0, "Init Containers:")
        for c in spec["initContainers"]:
            _container(w, 1, c, init_statuses.get(c.get("name"), {}))
    w.add(0, "Containers:")
    for c in spec.get("containers") or []:
        _container(w, 1, c, statuses.get(c.get("name"), {}))
    _conditions(w, status.get("conditions") or [], reason=False)
    _volumes(w, 0, spec.get("volumes") or [])
    w.add(0, f"QoS Class:\t{status.get('qosClass', '')}")
    w.add(0, "Node-Selectors:\t" + _pairs(spec.get("nodeSelector")))
    tolerations = _tolerations(spec.get("tolerations"))
    w.add(0, f"Tolerations:\t{tolerations or '<none>'}")


def _service(w: _Lines, o: dict[str, Any], related: Sequence[dict[str, Any]], now: datetime) -> None:
    spec, status = spec_of(o), status_of(o)
    w.add(0, "Selector:\t" + _pairs(spec.get("selector")))
    w.add(0, f"Type:\t{spec.get('type', 'ClusterIP')}")
    if spec.get("ipFamilyPolicy"):
        w.add(0, f"IP Family Policy:\t{spec['ipFamilyPolicy']}")
    if spec.get("ipFamilies"):
        w.add(0, f"IP Families:\t{','.join(spec['ipFamilies'])}")
    w.add(0, f"IP:\t{spec.get('clusterIP', '')}")
    if spec.get("clusterIPs"):
        w.add(0, f"IPs:\t{','.join(spec['clusterIPs'])}")
    for ing in (status.get("loadBalancer") or {}).get("ingress") or []:
        w.add(0, f"LoadBalancer Ingress:\t{ing.get('ip') or ing.get('hostname', '')}")
    endpoints = [e for e in related if e.get("kind") == "Endpoints" and meta(e).get("name") == meta(o).get("name")]
    for port in spec.get("ports") or []:
        name = port.get("name") or "<unset>"
        w.add(0, f"Port:\t{name}\t{port.get('port')}/{port.get('protocol', 'TCP')}")
        target = port.get("targetPort", port.get("port"))
        w.add(0, f"TargetPort:\t{target}/{port.get('protocol', 'TCP')}")
        if port.get("nodePort"):
            w.add(0, f"NodePort:\t{name}\t{port['nodePort']}/{port.get('protocol', 'TCP')}")
        w.add(0, f"Endpoints:\t{_endpoints(endpoints, port)}")
    w.add(0, f"Session Affinity:\t{spec.get('sessionAffinity', 'None')}")
    if spec.get("internalTrafficPolicy"):
        w.add(0, f"Internal Traffic Policy:\t{spec['internalTrafficPolicy']}")


def _endpoints(endpoints: Sequence[dict[str, Any]], port: dict[str, Any]) -> str:
    if not endpoints:
        return "<none>"
    out = []
    for subset in endpoints[0].get("subsets") or []:
        ports = [p for p in subset.get("ports") or [] if not port.get("name") or p.get("name") == port.get("name")]
        for address in subset.get("addresses") or []:
            for p in ports[:1]:
                out.append(f"{address.get('ip')}:{p.get('port')}")
    return ",".join(out) or "<none>"


def _configmap(w: _Lines, o: dict[str, Any], related: Sequence[dict[str, Any]], now: datetime) -> None:
    w.lines.append("")
    w.add(0, "Data")
    w.add(0, "====")
    for key, value in sorted((o.get("data") or {}).items()):
        w.add(0, f"{key}:")
        w.add(0, "----")
        w.lines += str(value).split("\n")
        w.lines.append("")
    w.lines.append("")
    w.add(0, "BinaryData")
    w.add(0, "====")
    for key, value in sorted((o.get("binaryData") or {}).items()):
        w.add(0, f"{key}: {len(str(value)) * 3 // 4} bytes")
    w.lines.append("")


def _generic(w: _Lines, o: dict[str, Any], related: Sequence[dict[str, Any]], now: datetime) -> None:
    """Kinds without their own describer: kubectl's generic one prints the fields as a tree."""
    w.add(0, f"API Version:\t{o.get('apiVersion', '')}")
    w.add(0, f"Kind:\t{o.get('kind', '')}")
    m = {k: v for k, v in meta(o).items() if k not in ("name", "namespace", "labels", "annotations", "managedFields")}
    w.add(0, "Metadata:")
    _tree(w, 1, m)
    for key, value in o.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if isinstance(value, (dict, list)):
            w.add(0, f"{_title(key)}:")
            _tree(w, 1, value)
        else:
            w.add(0, f"{_title(key)}:\t{value}")


def _title(key: str) -> str:
    """`creationTimestamp` -> `Creation Timestamp`, as kubectl's generic describer titles fields."""
    out = ""
    for i, c in enumerate(key):
        if c.isupper() and i and not key[i - 1].isupper():
            out += " "
        out += c
    return out[:1].upper() + out[1:]


def _tree(w: _Lines, level: int, value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                w.add(level, f"{_title(k)}:")
                _tree(w, level + 1, v)
            else:
                w.add(level, f"{_title(k)}:\t{v if not isinstance(v, (dict, list)) else ''}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                _tree(w, level, item)
            else:
                w.add(level, str(item))


Describer = Callable[[_Lines, dict[str, Any], Sequence[dict[str, Any]], datetime], None]

_DESCRIBERS: dict[tuple[str, str], Describer] = {
    ("apps", "Deployment"): _deployment,
    ("", "Pod"): _pod,
    ("", "Service"): _service,
    ("", "ConfigMap"): _configmap,
}


def events_for(obj: dict[str, Any], events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Events about an object (involvedObject, or events.k8s.io's `regarding`), oldest first."""
    m = meta(obj)
    uid, name, kind = m.get("uid"), m.get("name"), obj.get("kind")
    mine = []
    for e in events:
        ref = e.get("involvedObject") or e.get("regarding") or {}
        if uid and ref.get("uid"):
            if ref.get("uid") == uid:
                mine.append(e)
        elif ref.get("name") == name and ref.get("kind") == kind and ref.get("namespace", "") == m.get("namespace", ""):
            mine.append(e)
    return sorted(mine, key=_event_time)


def _event_time(e: dict[str, Any]) -> str:
    return str(
        e.get("lastTimestamp")
        or e.get("eventTime")
        or (e.get("series") or {}).get("lastObservedTime")
        or e.get("firstTimestamp")
        or meta(e).get("creationTimestamp")
        or ""
    )


def _event_age(e: dict[str, Any], now: datetime) -> str:
    last = _event_time(e)
    count = as_int(e.get("count") or (e.get("series") or {}).get("count"))
    age = since(last, now)
    if count > 1:
        first = e.get("firstTimestamp") or e.get("eventTime") or last
        return f"{age} (x{count} over {since(first, now)})"
    return age


def _events(w: _Lines, events: Sequence[dict[str, Any]], now: datetime) -> None:
    if not events:
        w.add(0, "Events:\t<none>")
        return
    w.add(0, "Events:")
    w.add(1, "Type\tReason\tAge\tFrom\tMessage")
    w.add(1, "----\t------\t----\t----\t-------")
    for e in events:
        source = e.get("source") or {}
        who = source.get("component") or e.get("reportingComponent") or e.get("reportingController") or ""
        if source.get("host"):
            who = f"{who}, {source['host']}"
        message = str(e.get("message") or e.get("note") or "").strip()
        w.add(1, f"{e.get('type', '')}\t{e.get('reason', '')}\t{_event_age(e, now)}\t{who}\t{message}")


def describe(
    obj: dict[str, Any],
    *,
    events: Sequence[dict[str, Any]] = (),
    related: Sequence[dict[str, Any]] = (),
    namespaced: bool = True,
    now: datetime | None = None,
) -> str:
    """kubectl describe's text for one object. `events` are the object's (events_for), `related`
    what its describer reads besides (a Deployment's ReplicaSets, a Service's Endpoints)."""
    now = now or datetime.now(UTC)
    w = _Lines()
    api_version = str(obj.get("apiVersion") or "")
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    describer = _DESCRIBERS.get((group, str(obj.get("kind") or "")), _generic)
    if describer is not _pod:  # a Pod's Labels come after its Node, as kubectl orders them
        _header(w, obj, namespaced and bool(meta(obj).get("namespace")))
    describer(w, obj, related, now)
    _events(w, events, now)
    return tabwrite(w.lines)
