"""Who is calling the HTTP API: a bearer token (a static one from a file, or a Kubernetes token
checked with a TokenReview) or a client certificate.

Each method answers "this is X", "this is not a credential of mine" (the next method is asked)
or fails with a reason the caller may read. A token is never logged nor kept: the static file
holds SHA-256 hashes, and the TokenReview cache is keyed by a hash too.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, field_validator

from ...kube.client import KubeClient
from ...kube.errors import APIError, ConnectionFailed, CredentialsError
from .principal import Principal
from .settings import normalize_roles

__all__ = [
    "AuthenticationFailed",
    "CredentialRefused",
    "Authenticator",
    "StaticTokens",
    "TokenReviewer",
    "hash_token",
    "principal_from_certificate",
]

log = logging.getLogger("scaleagent.hub.auth")

MAX_CACHED_REVIEWS = 10_000


class AuthenticationFailed(Exception):
    """The request carried a credential that is not valid (401): the message says which method
    refused it, never the credential."""


class CredentialRefused(AuthenticationFailed):
    """The credential itself is not valid (not: the hub could not check it): counted against the
    caller's address (auth/throttle.py)."""


def hash_token(token: str) -> str:
    """The form the static tokens file (and agent identities) keep a token in."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: StrictStr
    groups: tuple[str, ...] = ()
    tokenHash: StrictStr

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:
        return normalize_roles(value if value is not None else [])

    @field_validator("tokenHash")
    @classmethod
    def _hash(cls, value: str) -> str:
        if len(value) != 71 or not value.startswith("sha256:") or not all(c in "0123456789abcdef" for c in value[7:]):
            raise ValueError("expected 'sha256:' and the 64 lowercase hex digits of the token's SHA-256")
        return value


class StaticTokens:
    """The tokens of `auth.staticTokensFile`: a YAML list of `{name, groups, tokenHash}`.

    The file is read again when it changes (its modification time, size or inode: a ConfigMap
    mounted in a pod changes by swapping a symlink), checked at most once a second. A file that
    became unreadable or invalid keeps the last good list, and the reason is logged once."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._by_hash: dict[str, Principal] = {}
        self._seen: tuple[float, int, int] | None = None
        self._checked = float("-inf")
        self._last_problem: str | None = None
        self.generation = 0  # counts the lists read: streams check their caller again when it moves
        self.reload(force=True)

    def reload(self, force: bool = False) -> None:
        """Read the file again if it changed. Raises ValueError at the first read only, so that a
        hub does not start on a file it cannot use."""
        now = self._clock()
        if not force and now - self._checked < 1.0:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime, st.st_size, st.st_ino)
            if stamp == self._seen and not force:
                return
            entries = _read_entries(self.path)
        except (OSError, ValueError) as e:
            problem = f"static tokens file {self.path}: {e}"
            if self._seen is None:
                raise ValueError(problem) from None
            if problem != self._last_problem:
                log.error("%s; the tokens read before stay in use", problem)
                self._last_problem = problem
            return
        self._by_hash = {e.tokenHash: Principal(e.name, frozenset(e.groups), "staticToken") for e in entries}
        self.generation += 1
        if not entries:
            log.warning("static tokens file %s lists no token: nobody can log in with a static token", self.path)
        if self._seen is not None:
            log.info("static tokens file %s read again: %d tokens", self.path, len(self._by_hash))
        self._seen, self._last_problem = stamp, None

    def lookup(self, token: str) -> Principal | None:
        self.reload()
        given = hash_token(token)
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, given):
                return principal
        return None


def _read_entries(path: Path) -> list[_TokenEntry]:
    with open(path, "rb") as f:
        raw = f.read(5 * 1024 * 1024 + 1)
    if len(raw) > 5 * 1024 * 1024:
        raise ValueError("larger than 5 MiB")
    try:
        doc = yaml.safe_load(raw) or []
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not valid YAML{where}") from None
    if not isinstance(doc, list):
        raise ValueError("expected a list of {name, groups, tokenHash}")
    entries, names = [], set()
    for i, item in enumerate(doc):
        try:
            entry = _TokenEntry.model_validate(item)
        except ValidationError as e:
            first = e.errors()[0]
            at = ".".join(str(p) for p in first["loc"])
            reason = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"entry {i + 1}{f' ({at})' if at else ''}: {reason}") from None
        if entry.name in names:
            raise ValueError(f"entry {i + 1}: the name {entry.name!r} is given twice")
        names.add(entry.name)
        entries.append(entry)
    return entries


@dataclass
class _Review:
    principal: Principal | None
    error: str
    until: float


class TokenReviewer:
    """Kubernetes bearer tokens, checked by a TokenReview against the hub's own cluster.

    Answers are remembered for `cache_seconds` (keyed by the token's hash), and concurrent
    requests with the same token share one review, so that a burst of requests from one CI job
    costs one call to the API server."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        audiences: tuple[str, ...] = (),
        cache_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._client: KubeClient | None = None
        self.audiences = audiences
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[str, _Review] = {}
        self._pending: dict[str, asyncio.Future[_Review]] = {}
        self._lock = asyncio.Lock()
        self.reviews = 0

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def review(self, token: str) -> Principal | None:
        """The token's user, or None when the API server says it is not a valid token. Raises
        AuthenticationFailed when the review itself cannot be made (the message says why)."""
        key = hash_token(token)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached.until > now:
            return cached.principal
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._pending[key] = pending
            try:
                answer = await self._review(token)
            except AuthenticationFailed as e:
                pending.set_exception(e)
                pending.exception()  # retrieved: waiting callers get it, nobody else is warned
                raise
            finally:
                self._pending.pop(key, None)
            pending.set_result(answer)
            if len(self._cache) >= MAX_CACHED_REVIEWS:
                self._cache = {k: v for k, v in self._cache.items() if v.until > now}
                if len(self._cache) >= MAX_CACHED_REVIEWS:
                    self._cache.clear()
            self._cache[key] = answer
        else:
            answer = await asyncio.shield(pending)
        return answer.principal

    async def _review(self, token: str) -> _Review:
        client = await self._kube()
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        self.reviews += 1
        try:
            answer = await client.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
        except APIError as e:
            why = (
                f"the hub may not review tokens ({e.status} {e.reason}): its Kubernetes credentials need "
                "'create' on tokenreviews.authentication.k8s.io"
                if e.status in (401, 403)
                else f"the Kubernetes API answered {e.status} {e.reason} to a TokenReview"
            )
            log.error("token review: %s", why)
            raise AuthenticationFailed(f"cannot check the token: {why}") from None
        except ConnectionFailed as e:
            log.error("token review: cannot reach the hub's cluster: %s", e)
            raise AuthenticationFailed("cannot check the token: the hub cannot reach its Kubernetes API") from None
        status: dict[str, Any] = _mapping(answer.get("status") if isinstance(answer, dict) else None)
        until = self._clock() + self.cache_seconds
        user = _mapping(status.get("user"))
        name = user.get("username")
        if status.get("authenticated") is not True or not isinstance(name, str) or not name:
            error = status.get("error")
            return _Review(None, error if isinstance(error, str) else "", until)
        groups: list[Any] = user["groups"] if isinstance(user.get("groups"), list) else []
        roles = frozenset(g.strip().lower() for g in groups if isinstance(g, str) and g.strip())
        return _Review(Principal(name, roles, "tokenReview"), "", until)

    async def _kube(self) -> KubeClient:
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await self._client_factory()
                except CredentialsError as e:
                    log.error("token review: the hub has no Kubernetes access: %s", e)
                    raise AuthenticationFailed(
                        "cannot check the token: the hub has no Kubernetes access (kubernetes.kubeconfigFile)"
                    ) from None
            return self._client


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def principal_from_certificate(peercert: Mapping[str, Any]) -> Principal | None:
    """A verified client certificate's user: its subject's CN, and its O values as groups (as
    Kubernetes reads client certificates)."""
    cn, groups = None, []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and cn is None:
                cn = value
            elif key == "organizationName" and value.strip():
                groups.append(value.strip().lower())
    return Principal(cn, frozenset(groups), "clientCertificate") if cn else None


class Authenticator:
    """The methods configured, tried in turn: a bearer token goes to the static tokens first
    (cheap, local), then to the TokenReview; a client certificate identifies a request that
    carries no token."""

    def __init__(
        self,
        *,
        static_tokens: StaticTokens | None = None,
        token_reviewer: TokenReviewer | None = None,
        client_certificates: bool = False,
        is_admin: Callable[[Principal], bool] = lambda _: False,
    ) -> None:
        self.static_tokens = static_tokens
        self.token_reviewer = token_reviewer
        self.client_certificates = client_certificates
        self._is_admin = is_admin
        self.counts: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.static_tokens is not None or self.token_reviewer is not None or self.client_certificates

    @property
    def generation(self) -> int:
        """Moves when the tokens file was read again: a login checked before may have been revoked."""
        return self.static_tokens.generation if self.static_tokens is not None else 0

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    async def authenticate(self, authorization: str | None, peercert: Mapping[str, Any] | None) -> Principal | None:
        """The caller, or None when the request carries no credential at all. Raises
        AuthenticationFailed for a credential that no method accepts."""
        principal = await self._identify(authorization, peercert)
        if principal is None:
            self._count("none")
            return None
        self._count(principal.method)
        if self._is_admin(principal):
            principal = Principal(principal.name, principal.groups, principal.method, admin=True)
        return principal

    async def _identify(self, authorization: str | None, peercert: Mapping[str, Any] | None) -> Principal | None:
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                self._count("rejected")
                raise CredentialRefused("the Authorization header must be 'Bearer <token>'")
            if self.static_tokens is not None:
                found = self.static_tokens.lookup(token)
                if found is not None:
                    return found
            if self.token_reviewer is not None:
                found = await self.token_reviewer.review(token)
                if found is not None:
                    return found
            self._count("rejected")
            methods = [
                name
                for name, on in (("static tokens", self.static_tokens), ("TokenReview", self.token_reviewer))
                if on is not None
            ]
            raise CredentialRefused(
                f"the bearer token is not valid ({' or '.join(methods) or 'no token method is configured'})"
            )
        if self.client_certificates and peercert:
            return principal_from_certificate(peercert)
        return None
