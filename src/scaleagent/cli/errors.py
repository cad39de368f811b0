"""The CLI's errors. Every command turns them into one line on stderr and exit status 1, as
kubectl does:

    CliError        a message already in kubectl's words
    └── HubError    the hub answered an error (`status`, `reason` from its body), or could not
                    be reached (`status` 0)
"""

from __future__ import annotations

__all__ = ["UNKNOWN_KIND", "CliError", "HubError"]

UNKNOWN_KIND = "UnknownKind"
"""The hub's reason when an account follows no kind of the name asked."""


class CliError(Exception):
    """An error to print as is (already in kubectl's words) on stderr, exit status 1."""


class HubError(CliError):
    """The hub answered an error, or could not be reached; `status` is the HTTP status (0: unreachable)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.reason = status, reason
