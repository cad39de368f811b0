"""What an authenticated caller may do: the admin role, and READ and WRITE on each account as in
Spinnaker's account `permissions`.

The rules, in the words of docs/security.md:
- an admin (a user or group of `auth.admins`) may do anything;
- an account's `permissions` (`READ: [groups]`, `WRITE: [groups]`) say who may see it and who
  may change it; WRITE includes READ (one cannot deploy blind);
- an account with no permissions of its own takes `auth.defaultPermissions`; with none there
  either it is unrestricted: every authenticated caller may read and write it (Fiat's rule);
- an account that lists READ but no WRITE can be read by those groups and written by admins only.
Group names are compared trimmed and lowercased on both sides, so `' Ops'` and `ops` are the same
group (Armory once let a space in a role list silently disable a permission).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .principal import Principal
from .settings import normalize_roles

__all__ = ["READ", "WRITE", "Access", "Denied"]

READ = "READ"
WRITE = "WRITE"

log = logging.getLogger("scaleagent.hub.auth")

UNRESTRICTED_WARNING = (
    "has no permissions and auth.defaultPermissions is empty: every logged-in caller may read and "
    "deploy to it (Spinnaker's rule); give it permissions, or set auth.defaultPermissions (docs/security.md)"
)

Permissions = Mapping[str, Iterable[str]]


class Denied(Exception):
    """403: the message names the caller, the permission it lacks and who holds it."""


class Access:
    def __init__(
        self,
        *,
        admin_users: Iterable[str] = (),
        admin_groups: Iterable[str] = (),
        default_permissions: Permissions | None = None,
        cache_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._decisions: dict[tuple[Any, ...], tuple[bool, float]] = {}
        self._said_unrestricted: set[str] = set()  # accounts a warning named, once each
        self.configure(
            admin_users=admin_users,
            admin_groups=admin_groups,
            default_permissions=default_permissions,
            cache_seconds=cache_seconds,
        )
        # For /metrics: decisions by outcome, and how many were answered from the cache.
        self.counts = {"allowed": 0, "denied": 0, "cached": 0}

    def configure(
        self,
        *,
        admin_users: Iterable[str],
        admin_groups: Iterable[str],
        default_permissions: Permissions | None,
        cache_seconds: float,
    ) -> None:
        """Set the rules (at start, and when the hub's file changes): decisions made under the old
        ones are forgotten at once."""
        self.admin_users = frozenset(u.strip().lower() for u in admin_users)
        self.admin_groups = frozenset(normalize_roles(list(admin_groups)))
        self.default_permissions = _normalized(default_permissions)
        self.cache_seconds = cache_seconds
        self._decisions.clear()

    def is_admin(self, principal: Principal) -> bool:
        return principal.name.lower() in self.admin_users or bool(principal.groups & self.admin_groups)

    def may(self, principal: Principal, action: str, account: str, permissions: Permissions | None) -> bool:
        """Whether `principal` may READ or WRITE `account`, whose own permissions are given."""
        if principal.admin:
            return self._counted(True)
        key = (principal.name, principal.groups, action, account, _frozen(permissions))
        now = self._clock()
        hit = self._decisions.get(key)
        if hit is not None and hit[1] > now:
            self.counts["cached"] += 1
            return self._counted(hit[0])
        allowed = self._decide(principal, action, permissions)
        if not any(self._effective(permissions).values()) and account not in self._said_unrestricted:
            if len(self._said_unrestricted) < 10_000:
                self._said_unrestricted.add(account)
                log.warning("account %r %s", account, UNRESTRICTED_WARNING)
        if len(self._decisions) > 50_000:
            self._decisions.clear()
        self._decisions[key] = (allowed, now + self.cache_seconds)
        return self._counted(allowed)

    def check(self, principal: Principal, action: str, account: str, permissions: Permissions | None) -> None:
        """Raises Denied, saying what is missing, unless `principal` may."""
        if self.may(principal, action, account, permissions):
            return
        rules = self._effective(permissions)
        holders = sorted(rules.get(action, ())) + (sorted(rules.get(WRITE, ())) if action == READ else [])
        who = ", ".join(dict.fromkeys(holders)) or "admins only"
        raise Denied(
            f"{_describe(principal)} lacks {action} on account {account!r} (granted to: {who}); "
            "ask an admin to add one of your groups to the account's permissions"
        )

    def check_admin(self, principal: Principal, what: str) -> None:
        """Raises Denied unless `principal` is an admin."""
        if principal.admin:
            self._counted(True)
            return
        self._counted(False)
        raise Denied(f"{_describe(principal)} is not an admin, and {what} needs the admin role (auth.admins)")

    def _decide(self, principal: Principal, action: str, permissions: Permissions | None) -> bool:
        rules = self._effective(permissions)
        if not any(rules.values()):
            return True  # unrestricted
        groups = principal.groups
        if groups & rules.get(WRITE, frozenset()):
            return True
        return action == READ and bool(groups & rules.get(READ, frozenset()))

    def _effective(self, permissions: Permissions | None) -> dict[str, frozenset[str]]:
        own = _normalized(permissions)
        return own if any(own.values()) else self.default_permissions

    def _counted(self, allowed: bool) -> bool:
        self.counts["allowed" if allowed else "denied"] += 1
        return allowed


def _normalized(permissions: Permissions | None) -> dict[str, frozenset[str]]:
    if not permissions:
        return {}
    out: dict[str, frozenset[str]] = {}
    for key, roles in permissions.items():
        name = str(key).strip().upper()
        if name in (READ, WRITE) and not isinstance(roles, str | bytes):
            out[name] = frozenset(str(r).strip().lower() for r in roles if str(r).strip())
        elif name in (READ, WRITE) and isinstance(roles, str):
            out[name] = frozenset(r.strip().lower() for r in roles.split(",") if r.strip())
    return out


def _frozen(permissions: Permissions | None) -> Any:
    if not permissions:
        return None
    try:
        return tuple(sorted((str(k), tuple(sorted(map(str, v)))) for k, v in permissions.items()))
    except TypeError:
        return repr(permissions)


def _describe(principal: Principal) -> str:
    groups = ", ".join(sorted(principal.groups)) or "none"
    return f"user {principal.name!r} (groups: {groups})"
