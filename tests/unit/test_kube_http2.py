"""scaleagent.kube.http2 against a small in-process HTTP/2 server (h2, TLS with ALPN): liveness by
PING, GOAWAY, the server's MAX_CONCURRENT_STREAMS, flow control, DATA as servers may send it
(padded, compressed, shorter than announced, beyond the window), and KubeClient on top of it."""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import orjson
import pytest
import trustme
from aiohttp import web

from scaleagent.kube import http2 as http2_module
from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import Credentials
from scaleagent.kube.errors import APIError, ConnectionFailed
from scaleagent.kube.http2 import Http2Client, Http2StreamError
from tests.helpers import free_port


class Server:
    """An HTTP/2 server whose behaviour each test sets: answers every request 200 and keeps the
    stream open, except `/end` (a short body then end), `/big` (4 MB, more than a window),
    `/padded` (a body in padded frames), `/gzip` (a compressed JSON body), `/short` (less body
    than its Content-Length), `/flood` (more than the stream's window, ignoring flow control),
    `/json` (a JSON body), `/missing` (404 with a Status), `/unauthorized-once` (401, then 200)."""

    def __init__(self, ctx: ssl.SSLContext, max_streams: int | None = None) -> None:
        self.ctx = ctx
        self.max_streams = max_streams
        self.silent = False  # stop answering anything (a half-open connection)
        self.goaway_on: str | None = None  # path whose request, on the first connection, gets a GOAWAY
        self.connections = 0
        self.paths: list[str] = []
        self.authorizations: list[str] = []
        self.window_updates = 0  # WINDOW_UPDATE frames received from clients
        self.after_goaway = b""  # what clients sent once this server's h2 had sent a GOAWAY by hand
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
        self.watch: int | None = None  # the stream of the last /watch request
        self.draining: int | None = None  # the stream /drain came on, once its GOAWAY went out

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
        if self.draining is not None:
            self.server.after_goaway += data  # h2 takes nothing after its GOAWAY: kept for the test
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers)
                path = headers[b":path"].decode()
                self.server.paths.append(path)
                self.server.authorizations.append(headers.get(b"authorization", b"").decode())
                if path == self.server.goaway_on and self.number == 1:
                    self.conn.close_connection(last_stream_id=event.stream_id - 2)
                    continue
                self.answer(event.stream_id, path)
            elif isinstance(event, h2.events.WindowUpdated):
                self.server.window_updates += 1
                for sid in list(self.big_sent):
                    self.send_big(sid)
        self.flush()

    def raw(self, kind: int, flags: int, sid: int, payload: bytes = b"") -> None:
        """A frame written around h2 (which sends nothing once it has sent a GOAWAY)."""
        assert self.transport is not None
        self.transport.write(len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload)

    def answer(self, sid: int, path: str) -> None:
        send = self.conn.send_data
        if path == "/watch":
            self.watch = sid
        if path == "/drain":
            # A Go server shutting down: GOAWAY naming this stream as the last it processes, then
            # its answer, a PING, the rest of an earlier watch and both streams' ends.
            self.conn.close_connection(last_stream_id=sid)
            self.flush()
            self.draining = sid
            self.raw(0x1, 0x4, sid, self.conn.encoder.encode([(":status", "200")]))
            self.raw(0x6, 0x0, 0, b"pingpong")
            self.raw(0x0, 0x0, sid, b"after goaway\n")
            self.raw(0x0, 0x1, sid)
            assert self.watch is not None
            self.raw(0x0, 0x0, self.watch, b"the watch goes on\n")
            self.raw(0x1, 0x5, self.watch, self.conn.encoder.encode([("grpc-status", "0")]))  # trailers, END_STREAM
            return
        if path == "/reject-body":  # refused before its body is read (403, as an API server's authz)
            self.conn.send_headers(sid, [(":status", "403")], end_stream=True)
            self.conn.reset_stream(sid, h2.errors.ErrorCodes.NO_ERROR)
            return
        if path == "/length-no-body":  # a Content-Length, and the stream ends with the headers
            self.conn.send_headers(sid, [(":status", "200"), ("content-length", "30")], end_stream=True)
            return
        if path == "/goaway-during-body":  # keeps the stream, but goes away before reading its body
            self.conn.close_connection(last_stream_id=sid)
            self.flush()
            self.draining = sid
            return
        if path == "/no-window":  # takes the request, reads none of its body, answers nothing
            return
        if path == "/gzip-trailing":
            self.conn.send_headers(sid, [(":status", "200"), ("content-encoding", "gzip")])
            send(sid, gzip.compress(b"{}") + b"TRAILING", end_stream=True)
            return
        if path == "/missing":
            status = {
                "kind": "Status",
                "status": "Failure",
                "reason": "NotFound",
                "message": "x not found",
                "code": 404,
            }
            self.conn.send_headers(sid, [(":status", "404"), ("content-type", "application/json")])
            send(sid, orjson.dumps(status), end_stream=True)
            return
        if path == "/unauthorized-once" and self.server.paths.count(path) == 1:
            self.conn.send_headers(sid, [(":status", "401")], end_stream=True)
            return
        if path in ("/json", "/unauthorized-once") or path.startswith("/prefix/json"):
            self.conn.send_headers(sid, [(":status", "200")])
            send(sid, b'{"items": [1, 2, 3]}', end_stream=True)
            return
        if path == "/gzip":
            body = gzip.compress(orjson.dumps({"items": list(range(2000))}))
            self.conn.send_headers(sid, [(":status", "200"), ("content-encoding", "gzip")])
            for i in range(0, len(body), 1000):
                send(sid, body[i : i + 1000])
            self.conn.end_stream(sid)
            return
        if path == "/short":
            self.conn.send_headers(sid, [(":status", "200"), ("content-length", "100")])
            send(sid, b"only this", end_stream=True)
            return
        self.conn.send_headers(sid, [(":status", "200")])
        if path == "/end":
            send(sid, b"hello\n", end_stream=True)
        elif path == "/big":
            self.send_big(sid)
        elif path == "/padded":
            for line in (b"one\n", b"two\n", b"three\n"):
                send(sid, line, pad_length=7)
            send(sid, b"", end_stream=True, pad_length=3)
        elif path == "/flood":
            # What a broken server might do: DATA past the window, written around h2's accounting.
            self.flush()
            assert self.transport is not None
            chunk = b"\x00\x40\x00\x00\x00" + sid.to_bytes(4, "big") + b"x" * (1 << 14)
            self.transport.write(chunk * ((http2_module.STREAM_WINDOW >> 14) + 2))

    def send_big(self, sid: int) -> None:
        """Send as much of 4 MB as the stream's window allows, remember how much went, and end the
        stream after the last byte."""
        if self.big_sent.get(sid) == -1:
            return  # ended, or released by the client
        try:
            while self.big_sent.get(sid, 0) < 4 << 20:
                n = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if n <= 0:
                    return
                n = min(n, (4 << 20) - self.big_sent.get(sid, 0))
                self.conn.send_data(sid, b"x" * n)
                self.big_sent[sid] = self.big_sent.get(sid, 0) + n
            self.conn.end_stream(sid)
        except h2.exceptions.StreamClosedError:
            pass
        self.big_sent[sid] = -1


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


async def test_padded_frames_and_the_streams_end_arrive_as_data(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/padded") as resp:
            assert await resp.read() == b"one\ntwo\nthree\n"
        async with client.stream("GET", "/gzip") as resp:  # decoded, as aiohttp decodes it
            assert orjson.loads(await resp.read()) == {"items": list(range(2000))}
    finally:
        await client.close()


async def test_a_body_shorter_than_its_content_length_is_an_error(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/short") as resp:
            with pytest.raises(Http2StreamError, match="ended after 9 of its 100 bytes"):
                await resp.read()
        async with client.stream("GET", "/end") as resp:  # the connection is fine
            assert await resp.read() == b"hello\n"
        assert s.connections == 1
    finally:
        await client.close()


async def test_a_server_that_ignores_flow_control_fails_its_connection(
    server: tuple[Server, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It must not make the client buffer without end: the connection fails, and the next request
    # gets a new one. The window is never handed back here, so what the server may send is exactly
    # one stream window, which /flood exceeds.
    monkeypatch.setattr(http2_module, "STREAM_ACK_STEP", 1 << 40)
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/flood") as resp:
            with pytest.raises(Http2StreamError, match="more than stream 1's window"):
                await resp.read()
        async with client.stream("GET", "/end") as resp:
            assert await resp.read() == b"hello\n"
        assert s.connections == 2
    finally:
        await client.close()


async def test_windows_are_handed_back_in_steps_and_never_leak(server: tuple[Server, ssl.SSLContext]) -> None:
    # 4 MB read twice and one more released half-read: more than the connection's window, so the
    # last read completes only if every byte read (or dropped with its stream) was handed back.
    s, ctx = server
    client = _client(s, ctx)
    try:
        for _ in range(2):
            async with client.stream("GET", "/big") as resp:
                assert len(await resp.read()) == 4 << 20
        async with client.stream("GET", "/big") as resp:
            got = 0
            async for chunk in resp.content.iter_any():
                got += len(chunk)
                if got > 1 << 20:
                    break  # released unread: its bytes still in flight are given back
        async with client.stream("GET", "/big") as resp:
            assert len(await resp.read()) == 4 << 20
        assert s.connections == 1
        # In steps of a quarter stream window / an eighth of the connection's, not per frame (16 KB):
        # 16 MB read or dropped is about 100 WINDOW_UPDATEs, where one per frame would be 1,000.
        assert s.window_updates < 200
    finally:
        await client.close()


def _credentials(s: Server, ctx: ssl.SSLContext, path: str = "") -> Credentials:
    cfg = SimpleNamespace(api_key={"BearerToken": "Bearer t0ken"}, refresh_api_key_hook=None)
    return Credentials(f"https://127.0.0.1:{s.port}{path}", ctx, None, "test", cfg)


async def test_kube_client_carries_watches_and_requests_on_one_http2_connection(
    server: tuple[Server, ssl.SSLContext],
) -> None:
    s, ctx = server
    client = KubeClient(_credentials(s, ctx))
    try:
        assert client.protocol is None  # not known before the first request
        assert await client.get("/json") == {"items": [1, 2, 3]}
        assert client.protocol == "HTTP/2"
        async with client.stream("GET", "/watch-a"), client.stream("GET", "/watch-b"):
            assert await client.get("/unauthorized-once") == {"items": [1, 2, 3]}  # 401: sent again
            assert client.connections == 1 and s.connections == 1
        assert s.authorizations[-2:] == ["Bearer t0ken"] * 2
        with pytest.raises(APIError) as missing:
            await client.get("/missing")
        assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    finally:
        await client.close()


async def test_kube_client_lists_on_a_connection_of_their_own(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = KubeClient(_credentials(s, ctx), list_idle=0)
    try:
        async with client.stream("GET", "/watch"):
            async with client.bulk_session() as session:
                assert await client.get("/json", session=session) == {"items": [1, 2, 3]}
                assert await client.get("/json", session=session) == {"items": [1, 2, 3]}
                assert client.connections == 2  # the watch's and the list's
            assert client.connections == 1  # closed with the list (list_idle=0)
        assert s.connections == 2
    finally:
        await client.close()


async def test_kube_client_keeps_the_list_connection_for_the_next_list_until_lists_are_done(
    server: tuple[Server, ssl.SSLContext],
) -> None:
    s, ctx = server
    client = KubeClient(_credentials(s, ctx))
    try:
        async with client.stream("GET", "/watch"):
            for _ in range(2):
                async with client.bulk_session() as session:
                    assert await client.get("/json", session=session) == {"items": [1, 2, 3]}
                assert client.connections == 2  # kept for the next list
            assert s.connections == 2  # the second list found the first one's connection
            client.lists_done()  # every kind listed: no need to wait
            assert client.connections == 1
    finally:
        await client.close()


async def test_kube_client_keeps_the_servers_path_prefix(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = KubeClient(_credentials(s, ctx, "/prefix"))  # an API server behind a proxy's path
    try:
        assert await client.get("/json", params={"limit": "1"}) == {"items": [1, 2, 3]}
        assert s.paths == ["/prefix/json?limit=1"]
    finally:
        await client.close()


async def test_kube_client_speaks_http11_to_a_server_that_picks_it() -> None:
    ca = trustme.CA()
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(sctx)
    cctx = ssl.create_default_context()
    ca.configure_trust(cctx)

    async def version(request: web.Request) -> web.Response:
        return web.json_response(
            {"gitVersion": "v1.2.3", "tls": request.transport.get_extra_info("ssl_object").version()}
        )

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=sctx)  # aiohttp: ALPN http/1.1 or none
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = SimpleNamespace(api_key={}, refresh_api_key_hook=None)
    client = KubeClient(Credentials(f"https://127.0.0.1:{port}", cctx, None, "test", cfg))
    try:
        assert (await client.get("/version"))["gitVersion"] == "v1.2.3"
        assert client.protocol == "HTTP/1.1"
        assert (await client.get("/version"))["gitVersion"] == "v1.2.3"
        assert client.connections == 0
    finally:
        await client.close()
        await runner.cleanup()


async def test_kube_client_over_http2_says_why_it_cannot_connect() -> None:
    port = free_port()  # nothing listens there
    cfg = SimpleNamespace(api_key={}, refresh_api_key_hook=None)
    client = KubeClient(Credentials(f"https://127.0.0.1:{port}", ssl.create_default_context(), None, "t", cfg))
    try:
        with pytest.raises(ConnectionFailed, match=f"^cannot connect to https://127.0.0.1:{port}: Connection refused"):
            await client.get("/version")
        assert client.protocol is None  # still to be learned
    finally:
        await client.close()


async def test_after_a_goaway_the_streams_it_kept_run_to_their_end(server: tuple[Server, ssl.SSLContext]) -> None:
    # h2 refuses every frame after a GOAWAY; the client must still take the kept streams' answers,
    # their ends (DATA or trailers) and the server's PINGs, as a Go server sends them when draining.
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/watch") as watch, client.stream("GET", "/drain") as drained:
            assert drained.status == 200
            assert await asyncio.wait_for(drained.read(), 5) == b"after goaway\n"
            got = b""
            async for chunk in watch.content.iter_any():
                got += chunk
            assert got == b"the watch goes on\n"
        assert b"\x00\x00\x08\x06\x01\x00\x00\x00\x00pingpong" in s.after_goaway  # the PING answered
        async with client.stream("GET", "/end") as again:  # new requests go to a new connection
            assert await again.read() == b"hello\n"
        assert s.connections == 2
    finally:
        await client.close()


async def test_a_server_that_answers_before_reading_the_body_is_heard(server: tuple[Server, ssl.SSLContext]) -> None:
    # More body than the server's window (65,535 here): the client waits for window the server
    # will never give, as it has answered 403 and reset the stream.
    s, ctx = server
    client = _client(s, ctx)
    try:
        resp = await asyncio.wait_for(client.request("POST", "/reject-body", body=b"x" * 300_000, timeout=10), 20)
        assert resp.status == 403
        resp.release()
    finally:
        await client.close()


async def test_a_body_without_window_fails_at_the_requests_deadline(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.request("POST", "/no-window", body=b"x" * 300_000, timeout=0.5), 20)
        assert all(not c.streams for c in client.connections)  # the stream was let go
    finally:
        await client.close()


async def test_bytes_after_the_end_of_a_compressed_body_are_an_error(server: tuple[Server, ssl.SSLContext]) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/gzip-trailing") as resp:
            with pytest.raises(Http2StreamError, match="after its end"):
                await resp.read()
    finally:
        await client.close()


async def test_a_stream_that_ends_with_headers_still_owes_its_content_length(
    server: tuple[Server, ssl.SSLContext],
) -> None:
    s, ctx = server
    client = _client(s, ctx)
    try:
        async with client.stream("GET", "/length-no-body") as resp:
            with pytest.raises(Http2StreamError, match="after 0 of its 30 bytes"):
                await resp.read()
    finally:
        await client.close()


async def test_a_goaway_while_the_body_waits_for_window_fails_the_request(
    server: tuple[Server, ssl.SSLContext],
) -> None:
    # The stream was kept (the server may have acted on it: not retried), but h2 can send no more
    # of its body: the request fails at once, with why, and the stream is reset.
    s, ctx = server
    client = _client(s, ctx)
    try:
        with pytest.raises(Http2StreamError, match="while the request's body was being sent"):
            await asyncio.wait_for(client.request("POST", "/goaway-during-body", body=b"x" * 300_000, timeout=10), 20)
        assert all(not c.streams for c in client.connections)
    finally:
        await client.close()


# -- A server that writes raw frames: what h2, a correct server, will not send ---------------------


def _frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


def _headers(encoder: hpack.Encoder, sid: int, fields: list[tuple[bytes, bytes]], end_stream: bool = False) -> bytes:
    return _frame(0x1, 0x4 | (0x1 if end_stream else 0), sid, encoder.encode(fields))


class _RawProto(asyncio.Protocol):
    """Reads the client's frames (requests by their :path) and answers as `RawServer.answer` says."""

    def __init__(self, server: RawServer) -> None:
        self.server = server
        server.protos.append(self)
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.decoder = hpack.Decoder()
        self.encoder = hpack.Encoder()  # the connection's: its table is the client's decoder's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(_frame(0x4, 0, 0, self.server.settings))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.buf.startswith(b"PRI * HTTP/2.0"):
            self.buf = self.buf[24:]
        while len(self.buf) >= 9 and len(self.buf) >= 9 + int.from_bytes(self.buf[:3], "big"):
            length, kind, flags = int.from_bytes(self.buf[:3], "big"), self.buf[3], self.buf[4]
            sid, payload = int.from_bytes(self.buf[5:9], "big"), self.buf[9 : 9 + length]
            self.buf = self.buf[9 + length :]
            self.server.frames.append((kind, sid))
            if kind == 0x8 and sid:
                self.server.stream_window_update.set()
            if kind == 0x4 and not flags & 0x1:
                self.write(_frame(0x4, 0x1, 0))
            elif kind == 0x1:  # the client's requests fit in one HEADERS frame
                path = dict(self.decoder.decode(payload, raw=True))[b":path"].decode()
                self.write(self.server.answer(self.encoder, sid, path))

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class RawServer:
    def __init__(self, answer: Any, settings: bytes = b"") -> None:
        self.answer = answer  # (HPACK encoder, stream id, path) -> the bytes to write back
        self.settings = settings
        self.protos: list[_RawProto] = []
        self.frames: list[tuple[int, int]] = []  # (type, stream id) of every frame received
        self.stream_window_update = asyncio.Event()  # a WINDOW_UPDATE for a stream came

    def open_connections(self) -> int:
        return sum(p.transport is not None and not p.transport.is_closing() for p in self.protos)


@pytest.fixture
async def raw_server() -> AsyncIterator[Any]:
    ca = trustme.CA()
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(sctx)
    sctx.set_alpn_protocols(["h2"])
    cctx = ssl.create_default_context()
    ca.configure_trust(cctx)
    cctx.set_alpn_protocols(["h2", "http/1.1"])
    loop = asyncio.get_running_loop()
    listeners: list[asyncio.base_events.Server] = []

    async def start(answer: Any, settings: bytes = b"") -> tuple[RawServer, Http2Client]:
        raw = RawServer(answer, settings)
        listener = await loop.create_server(lambda: _RawProto(raw), "127.0.0.1", 0, ssl=sctx)
        listeners.append(listener)
        port = listener.sockets[0].getsockname()[1]
        return raw, Http2Client(f"https://127.0.0.1:{port}", cctx, read_idle=30)

    yield start
    for listener in listeners:
        listener.close()


async def test_a_server_that_takes_no_streams_is_an_error_not_a_storm_of_connections(raw_server: Any) -> None:
    # MAX_CONCURRENT_STREAMS 0 is allowed (RFC 9113 6.5.2); each new connection can take nothing.
    raw, client = await raw_server(
        lambda encoder, sid, path: _frame(0x3, 0, sid, (7).to_bytes(4, "big")), b"\x00\x03" + bytes(4)
    )
    try:
        for _ in range(2):
            with pytest.raises(Http2StreamError, match="allows no streams|REFUSED_STREAM"):
                await asyncio.wait_for(client.request("GET", "/x", timeout=2), 10)
        assert len(raw.protos) <= 8  # a few dials, not one per event-loop turn
    finally:
        await client.close()
    await asyncio.sleep(0.1)
    assert raw.open_connections() == 0


async def test_a_malformed_response_fails_its_stream_and_the_connection_goes_on(raw_server: Any) -> None:
    answers = {
        "/unicode-status": [(b":status", "²".encode())],
        "/no-status": [(b"content-type", b"text/plain")],
        "/unicode-length": [(b":status", b"200"), (b"content-length", "²".encode())],
        "/informational-end": [(b":status", b"100")],
        "/odd-name": [(b":status", b"200"), (b"x-\xff", b"v")],
        "/ok": [(b":status", b"200")],
    }

    def answer(encoder: hpack.Encoder, sid: int, path: str) -> bytes:
        if path == "/informational-end":
            return _headers(encoder, sid, answers[path], end_stream=True)
        return _headers(encoder, sid, answers[path]) + _frame(0x0, 0x1, sid, b"body")

    raw, client = await raw_server(answer)
    try:
        for path, why in [
            ("/unicode-status", "without a valid :status"),
            ("/no-status", "without a valid :status"),
            ("/unicode-length", "Content-Length is not a number"),
            ("/informational-end", r"informational \(1xx\) response that ends the stream"),
        ]:
            with pytest.raises(Http2StreamError, match=why):
                await client.request("GET", path, timeout=5)
        for path in ("/odd-name", "/ok"):
            async with client.stream("GET", path, timeout=5) as resp:
                assert resp.status == 200 and await resp.read() == b"body"
        assert len(raw.protos) == 1  # one connection throughout
    finally:
        await client.close()


async def test_a_malformed_answer_to_a_request_still_sending_its_body_resets_it(raw_server: Any) -> None:
    # The server answers before the body is all sent: the stream is reset, so that it stops
    # counting against the server's limit (1 here) and the next request can go on this connection.
    def answer(encoder: hpack.Encoder, sid: int, path: str) -> bytes:
        fields = [(b":status", b"200")] if path == "/ok" else [(b":status", b"x")]
        return _headers(encoder, sid, fields, end_stream=True)

    raw, client = await raw_server(answer, b"\x00\x03" + (1).to_bytes(4, "big"))
    try:
        with pytest.raises(Http2StreamError, match="without a valid :status"):
            await asyncio.wait_for(client.request("POST", "/bad", body=b"x" * 200_000, timeout=30), 10)
        async with client.stream("GET", "/ok", timeout=5) as resp:
            assert resp.status == 200
        assert (0x3, 1) in raw.frames and len(raw.protos) == 1
    finally:
        await client.close()


async def test_data_frames_of_padding_alone_are_handed_back(raw_server: Any) -> None:
    # A stream window's worth of padding: counted as consumed on arrival, so it must be handed
    # back without any read, or the server could send nothing more.
    window = http2_module.STREAM_WINDOW

    def answer(encoder: hpack.Encoder, sid: int, path: str) -> bytes:
        padding = _frame(0x0, 0x8, sid, bytes([255]) + bytes(255))  # 256 bytes of window, no data
        return _headers(encoder, sid, [(b":status", b"200")]) + padding * (window // 256)

    raw, client = await raw_server(answer)
    try:
        async with client.stream("GET", "/padding", timeout=5):
            await asyncio.wait_for(raw.stream_window_update.wait(), 5)
        assert (0x8, 1) in raw.frames
    finally:
        await client.close()


async def test_header_blocks_of_table_references_mean_what_the_table_holds_now(raw_server: Any) -> None:
    # A server repeats headers as references to its table; a new value moves the entries, after
    # which the very same reference bytes name another value.
    sent: list[bytes] = []

    def answer(encoder: hpack.Encoder, sid: int, path: str) -> bytes:
        block = encoder.encode([(b":status", b"200"), (b"x-generation", path[1:].encode())])
        sent.append(block)
        return _frame(0x1, 0x5, sid, block)

    raw, client = await raw_server(answer)
    try:
        seen = []
        for path in ("/1", "/1", "/2", "/2", "/1"):
            async with client.stream("GET", path, timeout=5) as resp:
                seen.append(resp.headers["x-generation"])
        assert seen == ["1", "1", "2", "2", "1"]
        assert sent[1] == sent[3]  # the same bytes, read as "1" then as "2"
    finally:
        await client.close()


async def test_closing_the_client_while_a_request_waits_for_its_dial_fails_the_request_with_why() -> None:
    # Not a CancelledError, which would end a watch's task without a word.
    client = Http2Client("https://127.0.0.1:1", ssl.create_default_context())
    dialling = asyncio.Event()

    async def slow_dial() -> Any:
        dialling.set()
        await asyncio.Event().wait()  # a handshake that never ends

    client._connect = slow_dial  # type: ignore[method-assign]
    request = asyncio.ensure_future(client.request("GET", "/watch"))
    await asyncio.wait_for(dialling.wait(), 5)
    await client.close()
    with pytest.raises(Http2StreamError, match="the client was closed"):
        await request


async def test_a_client_whose_server_chose_http11_sends_late_requests_back_to_http11() -> None:
    # A request that took the HTTP/2 client before the server answered HTTP/1.1 (it was refreshing
    # its token, say) hears NotHttp2, on which KubeClient sends it over HTTP/1.1.
    client = Http2Client("https://127.0.0.1:1", ssl.create_default_context())
    client.http2 = False
    with pytest.raises(http2_module.NotHttp2):
        await client.request("GET", "/version")
    await client.close()


@pytest.mark.parametrize(
    "params",
    [
        {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": "12345", "timeoutSeconds": "301"},
        {"limit": "500", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ=="},
        {"labelSelector": "app=web,tier in (a,b)", "fieldSelector": "metadata.name!=x"},
        {"labelSelector": "clé=été", "name": "a b&c=d"},
        {"limit": 500, "watch": True},  # type: ignore[dict-item]
        {"a_b.c~d-e": "A-Z_0.9~"},
    ],
)
def test_the_query_string_is_what_urlencode_makes(params: dict[str, str]) -> None:
    from urllib.parse import urlencode

    assert http2_module._query(params) == urlencode(params)
