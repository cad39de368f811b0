"""The HTTP/1.1 protocol the hub's uvicorn speaks: httptools' parser, the caller's certificate,
and the limits on connections that uvicorn lacks.

uvicorn picks httptools (a C parser) over h11 (pure Python) only when it is told `http="auto"`;
the hub hands uvicorn a protocol class of its own (to pass the client certificate on), so the
choice is made here. httptools answers small requests about 29% faster than h11 (issue 19); h11
stays the fallback for an install without httptools.

uvicorn closes a kept-alive connection that stays idle after a response (`timeout_keep_alive`),
but a connection that never completes a request head is kept for ever: a client that connects
and sends nothing, or a header a byte at a time, held a descriptor each (issue 29). Here a
connection gets `request_head_seconds` from connecting, or from the first byte of its next
request, to complete the head; and beyond `max_connections` open at once, a new one is closed
as it arrives. Over TLS, asyncio itself drops a connection whose handshake takes over 60 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar

from .security import PEER_CERT

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # httptools is a dependency; an install without it still serves, slower
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base  # type: ignore[assignment]

__all__ = ["PeerCertificateProtocol", "PARSER", "limited_protocol"]

PARSER = "httptools" if _Base.__name__ == "HttpToolsProtocol" else "h11"

log = logging.getLogger("scaleagent.hub.api.http")

_WARN_EVERY_SECONDS = 60.0


class PeerCertificateProtocol(_Base):
    """uvicorn's HTTP/1.1 protocol, handing the app a verified client certificate (a caller's
    login) in the ASGI scope: uvicorn itself does not pass it on; and closing connections that
    do not send a request head in time, or that arrive beyond the limit (`limited_protocol`)."""

    request_head_seconds: ClassVar[float | None] = None
    max_connections: ClassVar[int | None] = None
    _refused: ClassVar[list[float]] = [0.0, float("-inf")]  # refused since the last warning, its time

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self._refuse(transport)
            return
        self._wait_for_head()
        cert = transport.get_extra_info("peercert")
        if cert:
            app = self.app

            async def with_certificate(scope: Any, receive: Any, send: Any) -> None:
                scope.setdefault("extensions", {})[PEER_CERT] = cert
                await app(scope, receive, send)

            self.app = with_certificate

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused, or closed for its late head: nothing more is read
        if not self._in_request():
            self._wait_for_head()  # the first bytes of a request: its head is timed from here
        super().data_received(data)
        if self._in_request():
            self._stop_waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        """Whether a request's head has arrived and its response is not complete yet."""
        cycle = getattr(self, "cycle", None)
        return cycle is not None and not cycle.response_complete

    def _wait_for_head(self) -> None:
        if self.request_head_seconds is not None and self._head_timer is None:
            self._head_timer = asyncio.get_running_loop().call_later(self.request_head_seconds, self._head_too_late)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if not self._in_request() and not self.transport.is_closing():
            log.debug(
                "HTTP connection from %s closed: no complete request head within %ss",
                self.client,
                self.request_head_seconds,
            )
            self.transport.close()

    def _refuse(self, transport: asyncio.Transport) -> None:
        transport.close()
        refused = type(self)._refused
        refused[0] += 1
        now = time.monotonic()
        if now - refused[1] >= _WARN_EVERY_SECONDS:
            log.warning(
                "HTTP API: %d connection(s) closed on arrival: %d are open, the limit (http.maxConnections)",
                refused[0],
                len(self.connections) - 1,
            )
            refused[0], refused[1] = 0, now


def limited_protocol(*, request_head_seconds: float, max_connections: int) -> type[PeerCertificateProtocol]:
    """The protocol class for one server, with the hub's `http` limits."""
    return type(
        "LimitedPeerCertificateProtocol",
        (PeerCertificateProtocol,),
        {
            "request_head_seconds": request_head_seconds,
            "max_connections": max_connections,
            "_refused": [0.0, float("-inf")],
        },
    )
