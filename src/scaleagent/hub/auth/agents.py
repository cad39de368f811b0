"""Agent identities: which agent is connecting, and which zones and accounts it may serve.

An identity proves itself with its own bearer token (the hub keeps only its SHA-256,
`tokenHash`) or with a client certificate whose subject CN is its `commonName`; one that names
both must show both. Identities come from `auth.agents.identities` and from
`auth.agents.identitiesFile`, which is read again when its stat (mtime, size, inode) changes, at
the next agent's connection; a file that does not load keeps the last good list, and the reason
is logged (never a token).

With no identity configured, agents are told apart only for the sessions limit: by their
certificate's CN, or `token` for the shared `auth.token`, or their IP address; each is allowed
every zone and account, as before identities existed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from .settings import AgentIdentityConfig

__all__ = ["AgentIdentities", "AgentIdentity", "AgentsSettings", "NoIdentities", "hash_token", "peer_address"]

log = logging.getLogger("scaleagent.hub.auth.agents")


def hash_token(token: str) -> str:
    """The form `tokenHash` takes: 'sha256:' and the token's SHA-256 in lowercase hex."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def peer_address(peer: str) -> str:
    """The IP address in a gRPC peer string ('ipv4:10.0.0.1:5432', 'ipv6:[::1]:5432')."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:].partition("]")[0]
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    return peer


class AgentsSettings(Protocol):
    """What `auth.agents` (hub/config.py's AgentsAuthConfig) says; the config module is above
    this layer, so it is described here rather than imported."""

    @property
    def identities(self) -> Sequence[AgentIdentityConfig]: ...
    @property
    def identities_file(self) -> Path | None: ...
    @property
    def max_sessions_per_identity(self) -> int: ...
    @property
    def enabled(self) -> bool: ...


@dataclass(frozen=True)
class NoIdentities:
    """`auth.agents` left empty: agents are told apart only for the sessions limit."""

    identities: Sequence[AgentIdentityConfig] = ()
    identities_file: Path | None = None
    max_sessions_per_identity: int = 20
    enabled: bool = False


@dataclass(frozen=True)
class AgentIdentity:
    """Who an agent proved to be, and what it may serve. `configured` is False for the stand-in
    identities of a hub without `auth.agents` (allowed everything, never bound to accounts)."""

    name: str
    zones: tuple[str, ...] = ("*",)
    accounts: tuple[re.Pattern[str], ...] = ()
    configured: bool = True

    @classmethod
    def of(cls, config: AgentIdentityConfig) -> AgentIdentity:
        return cls(config.name, tuple(config.zones), tuple(re.compile(p) for p in config.accounts))

    def allows_zone(self, zone: str) -> bool:
        return "*" in self.zones or zone in self.zones

    def allows_account(self, name: str) -> bool:
        return not self.accounts or any(p.fullmatch(name) for p in self.accounts)

    def allowed_zones(self) -> str:
        return ", ".join(repr(z) for z in self.zones)

    def allowed_accounts(self) -> str:
        return ", ".join(p.pattern for p in self.accounts) or "any"


@dataclass(frozen=True)
class _Entry:
    identity: AgentIdentity
    token_hash: str | None
    common_name: str | None

    @property
    def proofs(self) -> int:
        return (self.token_hash is not None) + (self.common_name is not None)


class AgentIdentities:
    """The identities agents may prove; `identify` tells which one a connecting agent is."""

    def __init__(self, config: AgentsSettings | None = None) -> None:
        config = config if config is not None else NoIdentities()
        self.enabled = config.enabled
        self.max_sessions = config.max_sessions_per_identity
        self.file = config.identities_file
        self._static = [_entry(c) for c in config.identities]
        self._from_file: list[_Entry] = []
        self._stat: tuple[int, int, int] | None = None
        self.generation = 0  # counts the lists read: connected agents are checked again when it moves
        self._checked = float("-inf")
        self.reload()

    def update(self, config: AgentsSettings) -> bool:
        """New `identities` and session limit (the hub's file changed); connected agents are
        checked again. False when the change turns identities on or off or names another file:
        that is read at start only."""
        if config.enabled != self.enabled or config.identities_file != self.file:
            return False
        self.max_sessions = config.max_sessions_per_identity
        static = [_entry(c) for c in config.identities]
        if static != self._static:
            self._static = static
            self.generation += 1
        return True

    @classmethod
    def from_auth(cls, auth: Any) -> AgentIdentities:
        """From the hub's `auth` section (AuthConfig)."""
        return cls(auth.agents)

    @property
    def names(self) -> list[str]:
        return [e.identity.name for e in self._entries()]

    def _entries(self) -> list[_Entry]:
        names = {e.identity.name for e in self._static}
        return [*self._static, *(e for e in self._from_file if e.identity.name not in names)]

    def reload(self) -> bool:
        """Read the identities file again if its stat changed; True if the list changed. A file
        that cannot be read or is not a valid list keeps the last good list."""
        if self.file is None:
            return False
        try:
            st = os.stat(self.file)
        except OSError as e:
            if self._stat != (-1, -1, -1):
                log.error("agent identities file %s: cannot read it (%s); keeping the last good list", self.file, e)
                self._stat = (-1, -1, -1)
            return False
        stat = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stat == self._stat:
            return False
        self._stat = stat
        try:
            entries = _load(self.file)
        except _FileError as e:
            log.error(
                "agent identities file %s: %s; keeping the last good list (%d identit%s)",
                self.file,
                e,
                len(self._from_file),
                "y" if len(self._from_file) == 1 else "ies",
            )
            return False
        static = {e.identity.name for e in self._static}
        for entry in entries:
            if entry.identity.name in static:
                log.warning(
                    "agent identities file %s: identity %r is also in auth.agents.identities, which wins",
                    self.file,
                    entry.identity.name,
                )
        self._from_file = entries
        self.generation += 1
        log.info("agent identities file %s: %d identit%s", self.file, len(entries), "y" if len(entries) == 1 else "ies")
        return True

    def identify(self, token: str | None, common_name: str | None, peer: str = "") -> AgentIdentity | None:
        """The identity an agent proves with its bearer token and its certificate's CN, or None.

        Without identities configured: the certificate's CN, else 'token' when a token was sent
        (the shared one, checked by the caller), else the peer's IP address, allowed everything."""
        if not self.enabled:
            if common_name:
                name = f"cn:{common_name}"
            elif token:
                name = "token"
            else:
                name = f"ip:{peer_address(peer)}" if peer else "anonymous"
            return AgentIdentity(name, configured=False)
        self.reload()
        return self.identify_hashed(hash_token(token) if token else None, common_name)

    def refresh(self) -> int:
        """Look at the identities file again (at most once a second); the current generation."""
        now = time.monotonic()
        if now - self._checked >= 1.0:
            self._checked = now
            self.reload()
        return self.generation

    def identify_hashed(self, given: str | None, common_name: str | None) -> AgentIdentity | None:
        """`identify` for a token already hashed (what a session keeps of its proof)."""
        best: _Entry | None = None
        for entry in self._entries():
            if entry.token_hash is not None and (
                given is None or not hmac.compare_digest(entry.token_hash.encode(), given.encode())
            ):
                continue
            if entry.common_name is not None and entry.common_name != common_name:
                continue
            if best is None or entry.proofs > best.proofs:
                best = entry
        return None if best is None else best.identity


class _FileError(Exception):
    pass


def _entry(config: AgentIdentityConfig) -> _Entry:
    return _Entry(AgentIdentity.of(config), config.token_hash, config.common_name)


def _load(path: Path) -> list[_Entry]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise _FileError(f"cannot read it ({e})") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise _FileError(f"not valid YAML{at}") from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise _FileError(f"expected a list of identities, found {type(doc).__name__}")
    entries: list[_Entry] = []
    seen: set[str] = set()
    for i, item in enumerate(doc):
        try:
            config = AgentIdentityConfig.model_validate(item)
        except ValidationError as e:
            # Only locations and messages: the input (maybe a token pasted by mistake) is not shown.
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(entry)'}: {err['msg']}" for err in e.errors()
            )
            raise _FileError(f"entry {i}: {problems}") from None
        if config.name in seen:
            raise _FileError(f"entry {i}: identity {config.name!r} is listed twice")
        seen.add(config.name)
        entries.append(_entry(config))
    return entries
