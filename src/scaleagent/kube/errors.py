"""Everything that can go wrong in Kubernetes access, in one place, so that callers (the agent's
accounts, the operation executor, the hub's kubeconfig references, the CLI) catch by meaning:

    KubeError                 talking to a cluster failed
    ├── ConnectionFailed      the API server could not be reached, or the connection broke
    ├── APIError             the API server answered an error: `status`, `reason`, `message`, `body`
    ├── UnknownKind          the cluster serves nothing of the kind a manifest or reference names
    └── OperationFailed      an operation failed: `code`, `reason`, `message` as a Kubernetes Status
    CredentialsError          a kubeconfig or in-cluster credentials cannot be resolved (no request made)
    SelectorError(ValueError) a label selector cannot be parsed, validated or converted

The reflector's signals, raised out of `Reflector.run()` for its owner to act on:

    Gone                      the resourceVersion held is too old (410): list again
    Forbidden                 this identity may not list or watch the kind: stop and report
    ClusterReplaced           the API server serves other storage than the version came from: list
                              every kind of the account again

They are separate roots on purpose: a caller that retries a KubeError must not retry a
credentials problem or swallow a reflector's signal.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "APIError",
    "ClusterReplaced",
    "ConnectionFailed",
    "CredentialsError",
    "Forbidden",
    "Gone",
    "KubeError",
    "OperationFailed",
    "SelectorError",
    "UnknownKind",
]


class KubeError(Exception):
    """Base for everything that can go wrong talking to a cluster."""


class ConnectionFailed(KubeError):
    """The API server could not be reached, or the connection broke; the message names the server."""


class APIError(KubeError):
    """The API server answered an error (a Kubernetes Status when it sent one)."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        # A Status may come without a reason (Kubernetes 1.20's 500s do): no "500 : ..." then.
        head = f"{status} {reason}" if reason else str(status)
        super().__init__(f"{head}: {message}" if message else head)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @classmethod
    def from_response(cls, status: int, raw: bytes) -> APIError:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "Status":
            return cls(
                int(body.get("code") or status), str(body.get("reason") or ""), str(body.get("message") or ""), body
            )
        text = raw[:200].decode(errors="replace").strip()
        return cls(status, {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}.get(status, "Error"), text, body)


class UnknownKind(KubeError):
    """The cluster does not serve what a manifest or reference names."""


class OperationFailed(KubeError):
    """A failure with a Kubernetes Status' code and reason, so that it travels like the API's own."""

    def __init__(self, code: int, reason: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


class CredentialsError(Exception):
    """The credentials cannot be resolved; the message says which file or setting and why."""


class SelectorError(ValueError):
    """A selector could not be parsed, validated or converted.

    ``str(err)`` is the message the apiserver puts in its 400 response, e.g.
    ``unable to parse requirement: <nil>: Invalid value: "a b": ...`` or
    ``field label not supported: spec.foo``.
    """


class Gone(Exception):
    """The resourceVersion we hold is too old: relist."""


class Forbidden(Exception):
    """This identity may not list or watch the kind: stop and report."""


class ClusterReplaced(Exception):
    """The API server now serves other storage than the one our resourceVersion came from (a
    cluster rebuilt or restored from a backup): resuming would silently miss objects, so every
    kind of the account must be listed again."""
