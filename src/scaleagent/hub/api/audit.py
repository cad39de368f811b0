"""The audit log: one JSON line per write on the HTTP API (any POST, PUT, PATCH or DELETE), allowed
or refused, on the logger `scaleagent.audit`: who (as the hub took them), from where, what, and
the outcome. Bodies and credentials are never in it (a body may hold a kubeconfig or a Secret's
values); routes add what they know (`security.audit(request, ...)`: accounts, the task's id)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.types import Scope

from ..auth.principal import Principal

__all__ = ["WRITES", "audit_line", "audit_refusal"]

log = logging.getLogger("scaleagent.audit")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def audit_line(scope: Scope, principal: Principal | None, status: int, what: dict[str, Any]) -> None:
    client = scope.get("client")
    who: dict[str, Any] = (
        {"user": principal.name, "groups": sorted(principal.groups), "method": principal.method}
        if principal is not None
        else {"user": None}
    )
    line = {
        "audit": f"{scope.get('method')} {scope.get('path')}",
        **who,
        "client": client[0] if client else "",
        "status": status,
        **what,
    }
    log.info("%s", orjson.dumps(line, default=str).decode())


def audit_refusal(scope: Scope, status: int, message: str) -> None:
    """A write refused before the caller was known (no login, a bad one, a foreign Host or Origin)."""
    audit_line(scope, None, status, {"error": message})
