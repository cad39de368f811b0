"""Column values kubectl prints for common kinds, shared by kubesim's server-side Tables and
`scale-agent get`, so that both show an object the same way."""

from __future__ import annotations

from typing import Any

__all__ = ["pod_ready", "service_ports"]


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
