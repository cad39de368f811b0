"""The store's exceptions: one base class, so callers can tell "the database said no" apart from bugs."""

from __future__ import annotations

__all__ = [
    "AccountExists",
    "AccountNotFound",
    "CredentialsExist",
    "CredentialsNotFound",
    "StateConflict",
    "StoreBusy",
    "StoreError",
    "StoreTransient",
    "StoreUnavailable",
]


class StoreError(Exception):
    """The database could not be opened or did not do what was asked. The message says what and
    why in words, names the database by its redacted URL, and never holds a password."""


class StoreTransient(StoreError):
    """The database did not do it now, for a reason that passes: the same call made again later
    is expected to succeed. Callers that must not lose a write (the registry's account records)
    run it again with backoff; any other StoreError would fail the same way every time."""


class StoreBusy(StoreTransient):
    """The database gave up a transaction to break a deadlock, or could not serialise it with a
    concurrent one (MySQL/MariaDB error 1213, PostgreSQL SQLSTATE 40001 or 40P01). Nothing of it
    was written; running it again is the documented answer."""


class StoreUnavailable(StoreTransient):
    """The database could not be reached or did not get to it in time: the connection could not
    be made or broke, the server is shutting down or out of connections, another connection held
    a lock past the wait (SQLite "database is locked", MySQL/MariaDB 1205, PostgreSQL 55P03), or
    every pooled connection stayed busy. A transaction whose connection broke during COMMIT may
    have landed: what runs it again must be harmless to run twice (the store's writes are)."""


class AccountNotFound(StoreError):
    """An operation needed an existing account and there is none with that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no account named {name!r}")
        self.name = name


class AccountExists(StoreError):
    """`create_accounts` was given names that already have a row; nothing was created."""

    def __init__(self, names: list[str]) -> None:
        listed = ", ".join(map(repr, names))
        super().__init__(
            f"account{'s' if len(names) > 1 else ''} {listed} already exist{'' if len(names) > 1 else 's'}"
        )
        self.names = names


class StateConflict(StoreError):
    """An update was conditional on the account's state, and the account is in another one (a
    concurrent request, another replica or an agent's report changed it first). Nothing of the
    update was written."""

    def __init__(self, name: str, expected: list[str], actual: str) -> None:
        super().__init__(f"account {name!r} is {actual}, not {' or '.join(expected)}")
        self.name = name
        self.expected = expected
        self.actual = actual


class CredentialsNotFound(StoreError):
    """An operation needed a stored Account Management definition and there is none by that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no account definition named {name!r}")
        self.name = name


class CredentialsExist(StoreError):
    """`create_credentials` was given a name that already has a definition; nothing was written."""

    def __init__(self, name: str) -> None:
        super().__init__(f"account {name!r} already exists")
        self.name = name
