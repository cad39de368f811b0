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
    if details is not None:  # a pointer in Go: an empty one is still written ("details": {})
        body["details"] = details
    if code < 400:
        body.pop("message")
        if not reason:
            body.pop("reason")
    return body


NO_RESOURCE = "the server could not find the requested resource"


def no_resource() -> StatusError:
    """The 404 for a path that names no resource kubesim serves (with an empty details, as upstream)."""
    return StatusError(404, NO_RESOURCE, details={})


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def _details(name: str, group: str, kind: str, **more: Any) -> dict[str, Any]:
    """StatusDetails as Go writes it: empty name and group are omitted (omitempty)."""
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = kind
    return {**out, **more}


# field.ErrorType of each message prefix: what a cause's reason is.
_CAUSE_TYPES = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
)


def _cause_type(message: str) -> str:
    return next((t for prefix, t in _CAUSE_TYPES if message.startswith(prefix)), "FieldValueInvalid")


def not_found(group: str, plural: str, name: str) -> StatusError:
    return StatusError(
        404,
        f'{_qualified(group, plural)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> StatusError:
    return StatusError(
        409,
        f'{_qualified(group, plural)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> StatusError:
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        details=_details(name, group, plural),
    )


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str]]) -> StatusError:
    """422 Invalid with one cause per (field, message), as apierrors.NewInvalid reports them: the
    message aggregates the errors ("[a, b]" when there are several), each cause has its type."""
    errors = [f"{field}: {msg}" for field, msg in causes]
    text = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return StatusError(
        422,
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {text}',
        details=_details(
            name,
            group,
            kind,
            causes=[{"reason": _cause_type(msg), "message": msg, "field": field} for field, msg in causes],
        ),
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, message)


def forbidden(user: str, verb: str, group: str, resource: str, namespace: str, name: str = "") -> StatusError:
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    what = f"{resource}{'.' + group if group else ''}"
    named = f' "{name}"' if name else ""
    return StatusError(
        403,
        f'{what}{named} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {scope}',
        details=_details(name, group, resource),
    )
