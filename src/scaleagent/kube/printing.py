"""Column values kubectl prints for common kinds, shared by kubesim's server-side Tables and
`scale-agent get`, so that both show an object the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = [
    "as_int",
    "human_duration",
    "job_completions",
    "job_duration",
    "job_status",
    "meta_of",
    "parse_time",
    "pod_ready",
    "pod_restarts",
    "pod_status",
    "readiness_gates",
    "ready_replicas",
    "service_external_ip",
    "service_ports",
    "since",
    "spec_of",
    "status_of",
]


def parse_time(value: Any) -> datetime | None:
    """A Kubernetes Time or MicroTime (RFC 3339, `Z` or an offset); None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


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


def since(value: Any, now: datetime | None = None) -> str:
    """The age of a timestamp as kubectl prints it: `<unknown>` when absent, `<invalid>` when
    malformed or in the future."""
    if not value:
        return "<unknown>"
    t = parse_time(value)
    if t is None:
        return "<invalid>"
    return human_duration(((now or datetime.now(UTC)) - t).total_seconds())


def pod_ready(pod: dict[str, Any]) -> str:
    """READY of a Pod: ready containers / containers."""
    ready = sum(1 for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("ready"))
    return f"{ready}/{len((pod.get('spec') or {}).get('containers') or [])}"


def service_ports(service: dict[str, Any]) -> str:
    """PORT(S) of a Service: `80/TCP,30080:8080/TCP` (port, then nodePort when there is one)."""
    out = []
    for p in (service.get("spec") or {}).get("ports") or []:
        port = f"{p.get('port')}"
        if p.get("nodePort"):
            port += f":{p['nodePort']}"
        out.append(f"{port}/{p.get('protocol') or 'TCP'}")
    return ",".join(out) or "<none>"


def meta_of(o: dict[str, Any]) -> dict[str, Any]:
    """An object's metadata; empty when it has none (every helper here takes untrusted JSON)."""
    return o.get("metadata") or {}


def spec_of(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("spec") or {}


def status_of(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("status") or {}


def as_int(value: Any) -> int:
    """A count as kubectl shows it: 0 for what is absent or not a number."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def pod_status(o: dict[str, Any]) -> str:
    """kubectl's Pod STATUS: the most telling container state, not just the phase."""
    status = status_of(o)
    reason = status.get("reason") or status.get("phase") or "Pending"
    init = status.get("initContainerStatuses") or []
    for i, c in enumerate(init):
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (
                term.get("reason")
                or (f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}")
            )
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(spec_of(o).get('initContainers') or init)}"
        break
    else:
        running = False
        for c in reversed(status.get("containerStatuses") or []):
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                term = state["terminated"]
                reason = term.get("reason") or (
                    f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
                )
            elif "running" in state and c.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if meta_of(o).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def pod_restarts(o: dict[str, Any], now: datetime) -> str:
    restarts, last = 0, None
    for c in status_of(o).get("containerStatuses") or []:
        restarts += as_int(c.get("restartCount"))
        finished = parse_time(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished and (last is None or finished > last):
            last = finished
    return f"{restarts} ({human_duration((now - last).total_seconds())} ago)" if restarts and last else str(restarts)


def readiness_gates(o: dict[str, Any]) -> str:
    gates = {g.get("conditionType") for g in spec_of(o).get("readinessGates") or []}
    if not gates:
        return "<none>"
    met = sum(1 for c in status_of(o).get("conditions") or [] if c.get("type") in gates and c.get("status") == "True")
    return f"{met}/{len(gates)}"


def service_external_ip(o: dict[str, Any]) -> str:
    spec = spec_of(o)
    kind = spec.get("type") or "ClusterIP"
    external = list(spec.get("externalIPs") or [])
    if kind == "ExternalName":
        return spec.get("externalName") or "<none>"
    if kind == "LoadBalancer":
        balancer = status_of(o).get("loadBalancer") or {}
        ingress = [i.get("ip") or i.get("hostname") for i in balancer.get("ingress") or []]
        found = [x for x in ingress if x] + external
        return ",".join(found) if found else "<pending>"
    return ",".join(external) if external else "<none>"


def job_status(o: dict[str, Any]) -> str:
    """kubectl's Job STATUS (1.30+): the final condition first, then transitional ones."""
    conditions = {c.get("type"): c.get("status") for c in status_of(o).get("conditions") or []}
    for kind in ("Complete", "Failed"):
        if conditions.get(kind) == "True":
            return kind
    if meta_of(o).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if conditions.get(kind) == "True":
            return kind
    return "Running"


def job_completions(o: dict[str, Any]) -> str:
    spec, succeeded = spec_of(o), as_int(status_of(o).get("succeeded"))
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism")
    if parallelism is not None and as_int(parallelism) > 1:
        return f"{succeeded}/1 of {parallelism}"
    return f"{succeeded}/1"


def job_duration(o: dict[str, Any], now: datetime) -> str:
    start = parse_time(status_of(o).get("startTime"))
    if start is None:
        return ""
    end = parse_time(status_of(o).get("completionTime")) or now
    return human_duration((end - start).total_seconds())


def ready_replicas(o: dict[str, Any]) -> str:
    """READY of a Deployment or StatefulSet: ready replicas / desired replicas."""
    return f"{as_int(status_of(o).get('readyReplicas'))}/{as_int(spec_of(o).get('replicas', 1))}"
