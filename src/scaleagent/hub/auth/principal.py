"""The authenticated caller of an HTTP request, as every part of the hub sees it."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["ANONYMOUS", "CURRENT", "UNAUTHENTICATED", "Principal"]


@dataclass(frozen=True)
class Principal:
    """A user or system that proved who it is (or the anonymous caller of an open hub).

    `groups` are lowercased and stripped, as account permissions are, so that comparing them is
    plain set membership. `method` says how the caller proved itself (for the audit log):
    `tokenReview`, `staticToken`, `clientCertificate`, `anonymous`, or `replica` for a request
    another hub replica forwarded on the caller's behalf.
    """

    name: str
    groups: frozenset[str] = field(default_factory=frozenset)
    method: str = "anonymous"
    admin: bool = False

    def document(self) -> dict[str, object]:
        """The JSON shape replicas pass along with a forwarded request, and the audit log shows."""
        return {"name": self.name, "groups": sorted(self.groups), "method": self.method, "admin": self.admin}


ANONYMOUS = Principal("anonymous", frozenset(), "anonymous", admin=True)
"""Who calls a hub without authentication: with `auth.anonymous` (or on loopback with no login
configured), anyone who reaches the port may do anything, as before authentication existed."""

UNAUTHENTICATED = Principal("anonymous", frozenset(), "anonymous", admin=False)
"""Who calls a path open without a login (`/health`, `/docs`...) on a hub with logins, sending no
valid credential: no role at all."""


CURRENT: ContextVar[Principal | None] = ContextVar("scale_agent_principal", default=None)
"""The caller of the HTTP request being served: work started for it (a task's operations, a
request forwarded to another replica) carries it along, since asyncio tasks copy the context."""
