"""Host and Origin checks on every HTTP request: a web page open in a browser must not be able to
use the hub's API, whatever address the hub listens on.

Two ways a page could, and what stops each:

- DNS rebinding: a page of `http://evil.example:7002` makes its name resolve to `127.0.0.1`, and
  the browser then sends its requests, as same-origin ones (any method, any header, answers
  readable), to the hub on loopback. They carry `Host: evil.example:7002`: the **Host check**
  answers 421 unless the Host names loopback (`localhost`, 127.0.0.0/8, `::1`), the address the
  API listens on, this replica's base URL (`replicas.baseUrl`, how the other replicas reach it)
  or one of `server.allowedHosts` (`'*'`: any). When the API listens on every interface
  (`0.0.0.0` or `::`) and no `allowedHosts` are configured, any IP address is accepted as well
  (clients reach the hub by one of this machine's addresses); names then need `allowedHosts`.
- Cross-origin requests: a page of another origin may send "simple" requests (a POST of
  `text/plain`) without the browser asking the hub first. The browser says where they come
  from: the **Origin check** answers 403 to a request whose `Origin` is neither this hub's own
  (its host:port equals the Host header) nor in `server.allowedOrigins`, and to one the browser
  marks `Sec-Fetch-Site: cross-site` unless its Origin is allowed. JSON bodies are only taken
  with a JSON Content-Type (api/common.py), which a page cannot send without asking first.

CORS, only with `allowedOrigins`: a preflight (`OPTIONS` with `Access-Control-Request-Method`)
from an allowed origin is answered here (methods GET, POST, PUT, PATCH, DELETE; headers
Authorization and Content-Type), and answers to that origin carry `Access-Control-Allow-Origin`
(the origin itself) and `Vary: Origin`. Without `allowedOrigins` the hub sends nothing
CORS-related, so browsers keep every other origin's pages from reading its answers.

Clients that are not browsers (curl, the CLI, agents' tools, other replicas forwarding a
request) send no Origin and name the hub by the address they connect to, so they pass. A
request without a Host header (HTTP/1.0) is not checked: browsers always send one.
"""

from __future__ import annotations

import ipaddress
import logging
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .audit import audit_refusal
from .common import error_response
from .deps import GuardSettings

__all__ = ["CORS_HEADERS", "CORS_METHODS", "RequestGuard", "host_allowed", "origin_allowed", "split_host"]

log = logging.getLogger("scaleagent.hub.api.guard")

CORS_METHODS = "GET, POST, PUT, PATCH, DELETE"
CORS_HEADERS = "Authorization, Content-Type"
CORS_MAX_AGE_SECONDS = 600

_EVERY_INTERFACE = ("0.0.0.0", "::", "")


def split_host(value: str) -> tuple[str, int | None] | None:
    """(name, port) of a Host header value or a `host`, `host:port`, `[v6]:port` setting,
    lowercase, without brackets or a trailing dot; None when it is not one."""
    value = value.strip().lower()
    port_text: str | None = None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                return None
            port_text = rest[1:]
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    else:
        name = value  # a name, an IPv4 address, or an IPv6 address as a listen address is written
    port: int | None = None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5 or int(port_text) > 65535:
            return None
        port = int(port_text)
    name = name.removesuffix(".")
    if not name or any(c.isspace() or c in "/@?#\\" for c in name):
        return None
    return name, port


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _same_host(a: str, b: str) -> bool:
    """Whether two host names or addresses are the same (`::1` and `0:0::1` are)."""
    ip_a, ip_b = _ip(a), _ip(b)
    return ip_a == ip_b if ip_a is not None and ip_b is not None else a == b


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def host_allowed(host: str | None, settings: GuardSettings, scheme: str = "http") -> bool:
    """Whether the hub answers a request with this Host header (see the module's docstring).
    `scheme`: the request's, for the default port of a Host without one."""
    if host is None:
        return True
    if "*" in settings.allowed_hosts:
        return True
    parsed = split_host(host)
    if parsed is None:
        return False
    name, port = parsed
    ip = _ip(name)
    if name == "localhost" or (ip is not None and ip.is_loopback):
        return True
    own = [settings.listen_address.strip("[]").lower()]
    base = urlsplit(settings.base_url).hostname if settings.base_url else None
    if base:
        own.append(base.lower())
    if any(_same_host(name, o) for o in own if o not in _EVERY_INTERFACE):
        return True
    if ip is not None and settings.listen_address in _EVERY_INTERFACE and not settings.allowed_hosts:
        return True
    for allowed in settings.allowed_hosts:
        entry = split_host(allowed)
        if entry is None or not _same_host(name, entry[0]):
            continue
        if entry[1] is None or entry[1] == (port if port is not None else _default_port(scheme)):
            return True
    return False


def _normal_origin(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


def origin_allowed(origin: str, host: str | None, settings: GuardSettings) -> bool:
    """Whether a request with this Origin header may be answered: the hub's own origin (its
    host:port is the Host header's) or one of `allowedOrigins`. `null` (sandboxed pages, local
    files) never is."""
    normal = _normal_origin(origin)
    if normal in settings.allowed_origins:
        return True
    if host is None:
        return False
    parts = urlsplit(normal)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
        return False
    try:
        origin_port = parts.port or _default_port(parts.scheme)
    except ValueError:
        return False
    target = split_host(host)
    if target is None:
        return False
    # A browser leaves the default port of the page's scheme out of the Host header; for a
    # same-origin request that scheme is the Origin's (also behind a proxy that ends TLS).
    host_port = target[1] or _default_port(parts.scheme)
    return _same_host(parts.hostname.removesuffix("."), target[0]) and origin_port == host_port


def _shown(value: str) -> str:
    return repr(value if len(value) <= 100 else value[:97] + "...")


class RequestGuard:
    """ASGI middleware: the Host and Origin checks and CORS (see the module's docstring).
    `settings` None: every request passes, untouched."""

    def __init__(self, app: ASGIApp, settings: GuardSettings | None) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.settings
        if scope["type"] != "http" or settings is None:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers, settings)
        if refusal is not None:
            status, message = refusal
            log.info("HTTP %s %s refused (%d): %s", scope.get("method"), scope.get("path"), status, message)
            if scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
                audit_refusal(scope, status, message)  # a write refused before anyone logged in
            await error_response(status, message)(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None or _normal_origin(origin) not in settings.allowed_origins:
            await self.app(scope, receive, send)
            return
        # An allowed origin of another site: CORS.
        if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
            preflight = Response(status_code=204, headers=self._cors(origin))
            preflight.headers.update(
                {
                    "Access-Control-Allow-Methods": CORS_METHODS,
                    "Access-Control-Allow-Headers": CORS_HEADERS,
                    "Access-Control-Max-Age": str(CORS_MAX_AGE_SECONDS),
                }
            )
            await preflight(scope, receive, send)
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                for key, value in self._cors(origin).items():
                    if key == "Vary" and "vary" in answer:
                        answer.add_vary_header(value)
                    else:
                        answer[key] = value
            await send(message)

        await self.app(scope, receive, with_cors)

    @staticmethod
    def _cors(origin: str) -> dict[str, str]:
        return {"Access-Control-Allow-Origin": origin.strip(), "Vary": "Origin"}

    @staticmethod
    def _refusal(scope: Scope, headers: Headers, settings: GuardSettings) -> tuple[int, str] | None:
        host = headers.get("host")
        if not host_allowed(host, settings, scope.get("scheme", "http")):
            assert host is not None
            return 421, (
                f"this hub does not answer requests for host {_shown(host)}: the Host header must name "
                f"loopback (localhost, 127.0.0.1, [::1]), the address the API listens on ({settings.listen_address}) "
                "or one of server.allowedHosts; if clients reach the hub by this name, add it to server.allowedHosts "
                "in the hub's configuration"
            )
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, host, settings):
            return 403, (
                f"cross-origin request refused: a page of {_shown(origin)} may not call this hub (that Origin is "
                "neither the hub's own nor in server.allowedOrigins); to let a web UI of that origin call the API, "
                "add it to server.allowedOrigins in the hub's configuration"
            )
        if headers.get("sec-fetch-site", "").lower() == "cross-site" and (
            origin is None or _normal_origin(origin) not in settings.allowed_origins
        ):
            return 403, (
                "cross-site request refused: the browser says a page of another site sent it (Sec-Fetch-Site: "
                "cross-site); to let a web UI call the API, add its origin to server.allowedOrigins in the hub's "
                "configuration"
            )
        return None
