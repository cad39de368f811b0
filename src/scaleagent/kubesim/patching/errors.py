"""The errors of patches and applies, with the apiserver's own messages."""

from __future__ import annotations

import json

# --------------------------------------------------------------------------- errors


class PatchError(Exception):
    """A patch that cannot be applied.

    ``code`` is the HTTP status the API server answers with: 422 (Invalid: e.g. a JSON
    patch ``test`` op fails, a path that does not exist), 400 (malformed patch document),
    415 (strategic merge patch on a kind with no strategic-merge schema, e.g. custom
    resources).
    """

    def __init__(self, message: str, code: int = 422):
        super().__init__(message)
        self.message = message
        self.code = code


class ApplyConflict(Exception):
    """Server-side apply conflict, HTTP 409 (reason ``Conflict``).

    ``conflicts`` lists ``(manager, field_path)`` pairs, e.g.
    ``[("kubectl-client-side-apply", ".spec.replicas")]``. ``causes`` holds the
    ``status.details.causes`` entries Kubernetes sends, ready to serialize
    (``{"reason": "FieldManagerConflict", "message": "conflict with \"m\" using apps/v1",
    "field": ".spec.replicas"}``; StatusCause's type is the JSON key ``reason``).
    ``str(exc)`` is Kubernetes' message, e.g. ``Apply failed with 1 conflict: conflict
    with "kubectl-client-side-apply" using apps/v1: .spec.replicas``.
    """

    code = 409

    def __init__(
        self,
        conflicts: list[tuple[str, str]],
        message: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ):
        self.conflicts = list(conflicts)
        if causes is None:
            causes = [
                {"reason": "FieldManagerConflict", "message": f"conflict with {json.dumps(m)}", "field": p}
                for m, p in self.conflicts
            ]
        self.causes = causes
        if message is None:
            n = len(self.conflicts)
            message = f"Apply failed with {n} conflict{'s' if n != 1 else ''}: " + "; ".join(
                f"{c['message']}: {c['field']}" for c in causes
            )
        self.message = message
        super().__init__(message)


class _SchemaError(Exception):
    """A value that does not fit the schema (e.g. a list-map item without its key)."""
