"""Database URLs as the hub takes them: which databases, a check that names what is wrong without
repeating the URL (it may hold a password), and the URL with its password hidden, for messages
and logs. Here, under the store, so that the store needs nothing of the hub's configuration."""

from __future__ import annotations

import re

from ...configfile import invalid

__all__ = ["DATABASES", "check_database_url", "redact_url"]

DATABASES = ("sqlite", "postgresql", "mysql", "mariadb")
"""The SQLAlchemy dialects the hub supports (each may name a driver: `postgresql+asyncpg`)."""

_URL = re.compile(
    r"""(?P<scheme>[\w+]+)://
        (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
        (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
        (?:/(?P<database>[^?]*))?
        (?:\?(?P<query>.*))?""",
    re.VERBOSE,
)
_URL_EXAMPLE = "e.g. 'sqlite:///scale-agent-hub.db' or 'postgresql+asyncpg://user:password@db.example.com:5432/hub'"


def check_database_url(url: str) -> None:
    """Raise `invalid()` unless `url` is a SQLAlchemy URL of a supported database. Messages never
    repeat the URL: it may hold a password."""
    match = _URL.fullmatch(url)
    if match is None:
        raise invalid(f"not a database URL ({_URL_EXAMPLE}); the value is not shown, it may hold a password")
    scheme = match["scheme"]
    dialect, plus, driver = scheme.partition("+")
    if dialect not in DATABASES or (plus and not re.fullmatch(r"[a-z][a-z0-9_]*", driver)):
        hint = " (SQLAlchemy calls it 'postgresql')" if dialect == "postgres" else ""
        raise invalid(
            f"{scheme!r} is not a supported database{hint}: use {', '.join(DATABASES[:-1])} or {DATABASES[-1]}, "
            "optionally with a driver ('postgresql+asyncpg', 'sqlite+aiosqlite')"
        )
    port = match["port"]
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise invalid("the port in the URL must be a number from 1 to 65535")
    has_host = any(match[g] for g in ("username", "password", "ipv6host", "ipv4host", "port"))
    if dialect == "sqlite" and has_host:
        raise invalid(
            "an SQLite URL names a file, not a server: 'sqlite:///relative/path.db' (three slashes) "
            "or 'sqlite:////absolute/path.db' (four)"
        )


def redact_url(url: str) -> str:
    """`url` with its password (in the user part or a `password=` parameter) replaced by `***`.
    Errs on the side of hiding more: everything between ':' and the last '@' goes."""
    scheme, sep, rest = url.partition("://")
    head, at, tail = rest.rpartition("@")
    if sep and at:
        user, colon, _ = head.partition(":")
        rest = f"{user}{':***' if colon else ''}@{tail}"
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", f"{scheme}{sep}{rest}")
