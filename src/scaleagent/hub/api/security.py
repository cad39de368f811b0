"""Authentication and authorization on the HTTP API.

`Authentication` is an ASGI middleware: it finds who calls (hub/auth/callers.py) and keeps the
`Principal` in the request's state, answering 401 for a missing or invalid credential. The
probes (`/health`, `/ready`), the API's description (`/openapi.json`, `/docs`, `/redoc` and
the files those pages load) and the dashboard's page and files (`/`, dashboard.py) stay open;
a credential sent to them still names the caller (an admin sees more of `/health`), and one
refused there is counted but never answered with a 401. Invalid tokens are counted per client
address (auth/throttle.py): past `auth.failedLogins.limit`, that address's logins get 429.

A request another replica forwards carries the replicas' shared token and the caller it acts
for; only that token makes the receiver believe the caller named (`REPLICA_TOKEN_HEADER`).

Routes then ask `account_access(...)` or `admin(...)`, which raise the 403 that names what is
missing; every write is written to the audit log by `audit(...)`. A client that closes the
connection before its whole body came is one INFO line and an audit line of status 499 (nginx's
"client closed request"), not an error: nothing on the hub failed.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import orjson
from fastapi import Depends, HTTPException, Request
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.access import Access, Denied
from ..auth.callers import AuthenticationFailed, Authenticator, CredentialRefused
from ..auth.principal import ANONYMOUS, CURRENT, UNAUTHENTICATED, Principal
from ..auth.throttle import LoginThrottle
from ..replicas.forwarding import ON_BEHALF_HEADER, REPLICA_TOKEN_HEADER
from ..store import StoreError
from .audit import WRITES, audit_line, audit_refusal
from .common import database_unreachable, error_response
from .dashboard import DASHBOARD_PATHS
from .docs import DOCS_PATHS

__all__ = ["Authentication", "Security", "account_permissions", "audit", "principal_of"]

log = logging.getLogger("scaleagent.hub.api.security")

OPEN_PATHS = frozenset({"/health", "/ready", "/openapi.json", *DOCS_PATHS, *DASHBOARD_PATHS})
"""Paths answered without a login: the probes, the API's description with its pages and their
assets, and the dashboard's page and files, which hold no cluster data: the page reads the API
with the caller's credentials (exact paths: nothing under them is open unless named here)."""
CLIENT_CLOSED_REQUEST = 499
"""The status of a request whose client closed the connection before sending its whole body, in
the audit line and the metrics (nginx's "client closed request"); no client ever receives it."""
CLIENT_CLOSED = "client closed request: the connection closed before the whole body came"
PEER_CERT = "scale_agent.peercert"
"""The ASGI scope extension where the HTTP server puts a verified client certificate."""


class Security:
    """What the HTTP API needs to authenticate and authorize: the methods, the rules, the
    replicas' shared token, and the count of failed logins per client address.
    `Security.open()` is a hub without logins (everyone is admin)."""

    def __init__(
        self,
        authenticator: Authenticator,
        access: Access,
        replica_token: str = "",
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.authenticator, self.access, self.replica_token = authenticator, access, replica_token
        self.throttle = throttle or LoginThrottle()

    @classmethod
    def open(cls) -> Security:
        return cls(Authenticator(), Access())

    @property
    def enabled(self) -> bool:
        return self.authenticator.enabled

    async def close(self) -> None:
        if self.authenticator.token_reviewer is not None:
            await self.authenticator.token_reviewer.close()


class Authentication:
    def __init__(self, app: ASGIApp, security: Security) -> None:
        self.app, self.security = app, security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope["headers"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        if sum(1 for k, _ in raw if k.lower() == b"authorization") > 1:
            # Proxies and parsers disagree on which of two wins: neither does here.
            await _unauthorized("send one Authorization header, not several", scope, receive, send)
            return
        replica = self._replica(headers)
        principal: Principal | None
        if replica is not None or not self.security.enabled:
            principal = replica or ANONYMOUS
        elif scope["path"] in OPEN_PATHS:
            # Answered without a login; a credential sent along still says who calls (an admin
            # sees more of /health), but a refused one is only counted, never a 401 or a 429.
            try:
                principal = await self._login(headers, scope) or UNAUTHENTICATED
            except (AuthenticationFailed, _Throttled):
                principal = UNAUTHENTICATED
        else:
            try:
                principal = await self._login(headers, scope)
            except _Throttled as e:
                await _throttled(e.wait, scope, receive, send)
                return
            except AuthenticationFailed as e:
                await _unauthorized(str(e), scope, receive, send)
                return
            if principal is None:
                await _unauthorized(
                    "log in: send 'Authorization: Bearer <token>' (scale-agent login, --token or "
                    "SCALE_AGENT_TOKEN), or a client certificate",
                    scope,
                    receive,
                    send,
                )
                return
        state = scope.setdefault("state", {})
        if replica is None and self.security.enabled and scope["path"] not in OPEN_PATHS:
            authorization, peercert = headers.get("authorization"), scope.get("extensions", {}).get(PEER_CERT)

            async def still_valid() -> bool:
                """For streams that outlive a request: is the caller's login still good (a token
                removed from the file, a ServiceAccount deleted)?"""
                try:
                    return await self.security.authenticator.authenticate(authorization, peercert) is not None
                except AuthenticationFailed:
                    return False

            state["still_valid"] = still_valid
        state["principal"] = principal
        state["replica_request"] = replica is not None
        token = CURRENT.set(principal)
        writes = scope["method"] in WRITES
        audited = False

        async def sending(message: Any) -> None:
            nonlocal audited
            if message["type"] == "http.response.start" and not audited:
                audited = True  # written before the caller hears the answer
                audit_line(scope, principal, message["status"], state.get("audit") or {})
            await send(message)

        try:
            await self.app(scope, receive, sending if writes else send)
        except ClientDisconnect:
            # The client hung up before its whole body came: nothing failed, and nobody is left to
            # answer (the server drops what is sent now); the audit line and the metrics say so.
            log.info(
                "HTTP %s %s: the client closed the connection before sending its whole body (%d)",
                scope["method"],
                scope["path"],
                CLIENT_CLOSED_REQUEST,
            )
            if not audited:
                state["audit"] = {**(state.get("audit") or {}), "error": CLIENT_CLOSED}
                await error_response(CLIENT_CLOSED_REQUEST, CLIENT_CLOSED)(scope, receive, sending if writes else send)
        finally:
            CURRENT.reset(token)
            if writes and not audited:  # the request failed before any answer
                audit_line(scope, principal, 500, state.get("audit") or {})

    async def _login(self, headers: dict[str, str], scope: Scope) -> Principal | None:
        """The caller its credential names, None without one. Raises _Throttled while its address
        has failed too often (auth.failedLogins), AuthenticationFailed for a credential refused,
        which counts against its address."""
        throttle = self.security.throttle
        client = (scope.get("client") or (None,))[0]
        wait = throttle.retry_after(client) if "authorization" in headers else 0
        if wait:
            raise _Throttled(wait)
        try:
            return await self.security.authenticator.authenticate(
                headers.get("authorization"), scope.get("extensions", {}).get(PEER_CERT)
            )
        except CredentialRefused:
            if throttle.failed(client):
                log.warning(
                    "HTTP API: %d failed logins from %s within %gs: its logins are refused (429) until then",
                    throttle.limit,
                    client,
                    throttle.window_seconds,
                )
            raise

    def _replica(self, headers: dict[str, str]) -> Principal | None:
        """The caller a forwarding replica acts for, when it proves it is one of the replicas."""
        given = headers.get(REPLICA_TOKEN_HEADER.lower())
        secret = self.security.replica_token
        if not given or not secret or not hmac.compare_digest(given.encode(), secret.encode()):
            return None
        raw = headers.get(ON_BEHALF_HEADER.lower())
        if not raw:
            return Principal("hub-replica", frozenset(), "replica", admin=True)
        try:
            doc = orjson.loads(raw)
            return Principal(
                str(doc["name"]), frozenset(map(str, doc.get("groups", []))), "replica", bool(doc.get("admin"))
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None


async def _unauthorized(message: str, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["method"] in WRITES:
        audit_refusal(scope, 401, message)
    response = error_response(401, message)
    response.headers["WWW-Authenticate"] = 'Bearer realm="scale-agent"'
    await response(scope, receive, send)


class _Throttled(Exception):
    def __init__(self, wait: int) -> None:
        self.wait = wait


async def _throttled(wait: int, scope: Scope, receive: Receive, send: Send) -> None:
    message = (
        f"too many failed logins from this address: try again in {wait}s "
        "(auth.failedLogins in the hub's configuration sets how many are allowed)"
    )
    if scope["method"] in WRITES:
        audit_refusal(scope, 429, message)
    response = error_response(429, message)
    response.headers["Retry-After"] = str(wait)
    await response(scope, receive, send)


def principal_of(request: Request) -> Principal:
    return getattr(request.state, "principal", ANONYMOUS)


async def _always() -> bool:
    return True


def login_check(request: Request) -> Any:
    """An async callable telling whether the caller's login is still valid (always, on an open hub)."""
    return getattr(request.state, "still_valid", _always)


def from_replica(request: Request) -> bool:
    """Whether the request came from another replica that proved it (or no proof is asked)."""
    return bool(getattr(request.state, "replica_request", False))


async def account_permissions(deps: Any, account: str) -> Any:
    """The account's `permissions`, as the registry holds them (a static account's from its
    agent's description, a dynamic account's as stored through the accounts API:
    `Registry.manage`), or the database row when this replica does not hold the account; a 503
    (with Retry-After) when that row cannot be read."""
    record = deps.registry.accounts.get(account)
    if record is not None:
        return (record.properties or {}).get("permissions")
    try:
        row = await deps.accounts.store.get_account(account)
    except StoreError as e:
        # Not held here: who may use it is the database's to say (admins are not asked).
        log.warning("account %s: cannot read its permissions (%s)", account, e)
        raise database_unreachable(
            f"who may use account {account!r} cannot be told: it is not held by this hub replica and the "
            f"hub's database does not answer ({e}); try again shortly"
        ) from None
    return (row.properties or {}).get("permissions") if row is not None else None


def local_permissions(deps: Any, account: str) -> Any:
    record = deps.registry.accounts.get(account)
    return (record.properties or {}).get("permissions") if record is not None else None


async def check_account(deps: Any, request: Request, action: str, account: str) -> Principal:
    """Raises the 403 naming the missing permission unless the caller may `action` `account`."""
    principal = principal_of(request)
    if principal.admin:
        return principal
    try:
        deps.security.access.check(principal, action, account, await account_permissions(deps, account))
    except Denied as e:
        raise HTTPException(403, str(e)) from None
    return principal


def check_admin(deps: Any, request: Request, what: str) -> Principal:
    principal = principal_of(request)
    try:
        deps.security.access.check_admin(principal, what)
    except Denied as e:
        raise HTTPException(403, str(e)) from None
    return principal


def admin_only(deps: Any, what: str) -> Any:
    """A route dependency: the whole router is for admins."""

    async def check(request: Request) -> None:
        check_admin(deps, request, what)

    return Depends(check)


def replicas_only(deps: Any, request: Request) -> None:
    """Routes between replicas: with logins on, only a replica (holding the replicas' token) may
    call them; on an open hub, the hop header marks them as before."""
    if deps.security.enabled and not from_replica(request):
        raise HTTPException(403, "only hub replicas call this (with the replicas' token, replicas.token)")


def readable(deps: Any, principal: Principal, account: str) -> bool:
    """For lists and the watch: whether the caller sees `account` (held by this replica)."""
    return principal.admin or deps.security.access.may(principal, "READ", account, local_permissions(deps, account))


def audit(request: Request, **what: Any) -> None:
    """Details for the audit line of this request (which accounts, which task...)."""
    request.state.audit = {**(getattr(request.state, "audit", None) or {}), **what}
