"""scaleagent.kube.http2 against a small in-process HTTP/2 server (h2, TLS with ALPN): liveness by
PING, GOAWAY, the server's MAX_CONCURRENT_STREAMS, and per-stream flow control."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trustme

from scaleagent.kube.http2 import Http2Client, Http2StreamError


class Server:
    """An HTTP/2 server whose behaviour each test sets: answers every request 200 and keeps the
    stream open, except `/end` (a short body then end) and `/big` (more than a window)."""

    def __init__(self, ctx: ssl.SSLContext, max_streams: int | None = None) -> None:
        self.ctx = ctx
        self.max_streams = max_streams
        self.silent = False  # stop answering anything (a half-open connection)
        self.goaway_on: str | None = None  # path whose request, on the first connection, gets a GOAWAY
        self.connections = 0
        self.paths: list[str] = []
        self.protocols: list[_ServerProto] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerProto(self), "127.0.0.1", 0, ssl=self.ctx)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        for p in self.protocols:
            if p.transport is not None:
                p.transport.abort()
        self._server.close()
        await self._server.wait_closed()


class _ServerProto(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        server.connections += 1
        self.number = server.connections
        server.protocols.append(self)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.transport: asyncio.Transport | None = None
        self.big_sent: dict[int, int] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.server.max_streams is not None:
            self.conn.local_settings = h2.settings.Settings(
                client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.server.max_streams}
            )
        self.conn.initiate_connection()
        self.flush()

    def flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        if self.server.silent:
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                path = dict(event.headers)[b":path"].decode()
                self.server.paths.append(path)
                if path == self.server.goaway_on and self.number == 1:
                    self.conn.close_connection(last_stream_id=event.stream_id - 2)
                    continue
                self.conn.send_headers(event.stream_id, [(":status", "200")])
                if path == "/end":
                    self.conn.send_data(event.stream_id, b"hello\n", end_stream=True)
                elif path == "/big":
                    self.send_big(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                for sid in list(self.big_sent):
                    self.send_big(sid)
        self.flush()

    def send_big(self, sid: int) -> None:
        """Send as much of 4 MB as the stream's window allows; remember how much went."""
        while self.big_sent.get(sid, 0) < 4 << 20:
            n = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if n <= 0:
                return
            self.conn.send_data(sid, b"x" * n)
            self.big_sent[sid] = self.big_sent.get(sid, 0) + n


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, ssl.SSLContext]]:
    ca = trustme.CA()
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(sctx)
    sctx.set_alpn_protocols(["h2"])
    cctx = ssl.create_default_context()
    ca.configure_trust(cctx)
    cctx.set_alpn_protocols(["h2", "http/1.1"])
    s = Server(sctx)
    await s.start()
    yield s, cctx
    await s.stop()


def _client(s: Server, ctx: ssl.SSLContext, **kw: float) -> Http2Client:
    return Http2Client(f"https://127.0.0.1:{s.port}", ctx, **kw)


async def test_unanswered_ping_fails_the_streams(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx, read_idle=0.2, ping_timeout=0.2)
    try:
        async with client.stream("GET", "/watch") as resp:
            assert resp.status == 200
            s.silent = True  # the peer vanishes without closing: only a PING can tell
            with pytest.raises(Http2StreamError, match="PING"):
                async for _ in resp.content.iter_any():
                    pass
        s.silent = False
        async with client.stream("GET", "/end") as resp:  # a new connection
            assert await resp.read() == b"hello\n"
        assert s.connections == 2
    finally:
        await client.close()


async def test_goaway_retries_unprocessed_streams_on_a_new_connection(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    s.goaway_on = "/second"
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/first") as first:
            async with client.stream("GET", "/second") as second:  # refused by GOAWAY, resent
                assert second.status == 200
            assert first.status == 200
        assert s.connections == 2
        assert s.paths == ["/first", "/second", "/second"]
    finally:
        await client.close()


async def test_max_concurrent_streams_opens_another_connection(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    s.max_streams = 2
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/a"), client.stream("GET", "/b"):
            assert len(client.connections) == 1
            async with client.stream("GET", "/c"):
                assert len(client.connections) == 2
                assert sorted(len(c.streams) for c in client.connections) == [1, 2]
    finally:
        await client.close()


async def test_an_unread_stream_holds_back_only_itself(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/big") as big:
            # The other stream still answers while /big is not read: its window is per stream.
            async with client.stream("GET", "/end") as small:
                assert await small.read() == b"hello\n"
            buffered = sum(len(c) for c in big._stream.chunks)
            assert 0 < buffered <= 1 << 20  # at most one stream window, not the 4 MB sent
            got = 0
            async for chunk in big.content.iter_any():
                got += len(chunk)
                if got >= 4 << 20:
                    break
            assert got == 4 << 20
    finally:
        await client.close()
