"""Kubernetes `Status` errors.

Every failure kubesim answers is a `meta/v1 Status` with the code and reason a real apiserver
would use, because clients (client-go's reflector, the Python client, kubectl) branch on them.
"""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    504: "Timeout",
}


class StatusError(Exception):
    """An API error that becomes a `Status` body with the same HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.metadata = metadata

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details, self.metadata)


def status_body(
    code: int,
    message: str,
    reason: str = "",
    details: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": metadata or {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    if code < 400:
        body.pop("message")
        if not reason:
            body.pop("reason")
    return body


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> StatusError:
    return StatusError(
        404,
        f'{_qualified(group, plural)} "{name}" not found',
        details={"name": name, "group": group, "kind": plural},
    )


def already_exists(group: str, plural: str, name: str) -> StatusError:
    return StatusError(
        409,
        f'{_qualified(group, plural)} "{name}" already exists',
        reason="AlreadyExists",
        details={"name": name, "group": group, "kind": plural},
    )


def conflict(group: str, plural: str, name: str, why: str) -> StatusError:
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        details={"name": name, "group": group, "kind": plural},
    )


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str]]) -> StatusError:
    """422 Invalid with one cause per (field, message), as field validation reports them."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    return StatusError(
        422,
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {text}',
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes],
        },
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, message)


def forbidden(user: str, verb: str, group: str, resource: str, namespace: str, name: str = "") -> StatusError:
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    what = f'{resource}{"." + group if group else ""}'
    named = f' "{name}"' if name else ""
    return StatusError(
        403,
        f'{what}{named} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {scope}',
        details={"name": name, "group": group, "kind": resource} if name else {"group": group, "kind": resource},
    )
