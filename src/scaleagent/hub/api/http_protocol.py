"""The HTTP/1.1 protocol the hub's uvicorn speaks: httptools' parser, and the caller's certificate.

uvicorn picks httptools (a C parser) over h11 (pure Python) only when it is told `http="auto"`;
the hub hands uvicorn a protocol class of its own (to pass the client certificate on), so the
choice is made here. httptools answers small requests about 29% faster than h11 (issue 19); h11
stays the fallback for an install without httptools.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .security import PEER_CERT

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # httptools is a dependency; an install without it still serves, slower
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base  # type: ignore[assignment]

__all__ = ["PeerCertificateProtocol", "PARSER"]

PARSER = "httptools" if _Base.__name__ == "HttpToolsProtocol" else "h11"


class PeerCertificateProtocol(_Base):
    """uvicorn's HTTP/1.1 protocol, handing the app a verified client certificate (a caller's
    login) in the ASGI scope: uvicorn itself does not pass it on."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cert = transport.get_extra_info("peercert")
        if cert:
            app = self.app

            async def with_certificate(scope: Any, receive: Any, send: Any) -> None:
                scope.setdefault("extensions", {})[PEER_CERT] = cert
                await app(scope, receive, send)

            self.app = with_certificate
