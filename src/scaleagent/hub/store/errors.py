"""The store's exceptions: one base class, so callers can tell "the database said no" apart from bugs."""

from __future__ import annotations

__all__ = ["AccountNotFound", "StoreError"]


class StoreError(Exception):
    """The database could not be opened or did not do what was asked. The message says what and
    why in words, names the database by its redacted URL, and never holds a password."""


class AccountNotFound(StoreError):
    """An operation needed an existing account and there is none with that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no account named {name!r}")
        self.name = name
