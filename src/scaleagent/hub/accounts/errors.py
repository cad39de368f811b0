"""What the accounts layer raises, in one place, so that the API and the hub's start catch by
meaning; each becomes one status of the REST API (hub/api/common.py `answer`):

    InvalidRequest        a body or parameter that is not acceptable: 400, one line per problem
    UnknownAccounts       names that are not dynamic accounts: 404 (static ones named as such)
    Conflict              contradicts the accounts' current state (a taken name, an illegal
                          move): 409, with the TransitionErrors (hub/states.py) when that is why
    KubeconfigRefError    a kubeconfig reference that is malformed or cannot be resolved: the
                          account FAILED with the reason (never the kubeconfig's content)
    EncryptionKeyError    no usable encryption key: the hub does not start (never the key)
    DecryptionError       a stored kubeconfig the configured keys cannot decrypt (never the value)

The database's own errors are the store's (hub/store/errors.py): StoreError and its kinds, a 503.
"""

from __future__ import annotations

from collections.abc import Collection

from ..states import TransitionError

__all__ = [
    "Conflict",
    "DecryptionError",
    "EncryptionKeyError",
    "InvalidRequest",
    "KubeconfigRefError",
    "TransitionError",
    "UnknownAccounts",
]


class InvalidRequest(Exception):
    """A request body or parameter that is not acceptable (a 400). `problems` holds one line per
    problem; `str()` joins them."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class UnknownAccounts(Exception):
    """Names that are not dynamic accounts (a 404). Accounts of an agent's own configuration
    are named as such: they exist, but this API does not manage them."""

    def __init__(self, missing: Collection[str], configured: Collection[str] = ()) -> None:
        parts = []
        if missing:
            parts.append(f"no account named {', '.join(map(repr, missing))}")
        if configured:
            parts.append(
                f"{', '.join(map(repr, configured))} {'is' if len(configured) == 1 else 'are'} configured in "
                "an agent's own file, not a dynamic account: change it there"
            )
        super().__init__("; ".join(parts))
        self.names = [*missing, *configured]


class Conflict(Exception):
    """A request that contradicts the accounts' current state (a 409): an existing name, an
    illegal state change. `transitions` holds the TransitionErrors, if that is why."""

    def __init__(self, message: str, transitions: Collection[TransitionError] = ()) -> None:
        super().__init__(message)
        self.transitions = list(transitions)


class KubeconfigRefError(Exception):
    """A reference that is malformed or cannot be resolved. The message names the reference and
    the problem, never the kubeconfig's content."""


class EncryptionKeyError(Exception):
    """No usable encryption key: the message says which setting or file and what to do. It
    never contains the key."""


class DecryptionError(Exception):
    """A stored value cannot be decrypted with the configured key (it was encrypted with another
    key, or the stored bytes were altered). The message never contains the value or the key."""
