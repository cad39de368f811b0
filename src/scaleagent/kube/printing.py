"""Column values kubectl prints for common kinds, shared by kubesim's server-side Tables and
`scale-agent get`, so that both show an object the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["human_duration", "parse_time", "pod_ready", "since", "service_ports"]


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
