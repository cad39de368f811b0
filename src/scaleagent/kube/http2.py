"""HTTP/2 to a Kubernetes API server: one TLS connection per cluster carries all its watches.

Why: over HTTP/1.1 every watch holds its own TLS connection (socket, TLS read buffer touched as
deep as its largest read, aiohttp's buffers): about 65 KB each, most of the agent's memory floor
with a thousand watches. client-go multiplexes a cluster's watches as streams of one HTTP/2
connection; this module does the same with python-hyper's `h2` state machine driven by an
asyncio Protocol (no extra threads, no per-stream reader task).

What it guarantees:
- ALPN offers ["h2", "http/1.1"]; a server that picks http/1.1 (kubesim) makes `open()` raise
  `NotHttp2`, and the caller keeps using its HTTP/1.1 path.
- Flow control: DATA is acknowledged only when the consumer takes it, so a slow consumer holds
  back its own stream (at most one stream window buffered) and never the connection.
- Liveness: after `read_idle` seconds without a frame a PING is sent; no answer within
  `ping_timeout` fails the connection and every stream on it (a half-open TCP connection is
  found, as client-go's ReadIdleTimeout/PingTimeout do).
- GOAWAY: streams the server did not process fail with `StreamRefused` and are retried on a new
  connection by `Http2Client.stream`; the others run to their end; new requests use a new
  connection. The server's MAX_CONCURRENT_STREAMS is respected by opening another connection.
- Errors keep the shapes the callers already handle: a broken stream raises
  `Http2StreamError` (a ConnectionError, so an OSError), a silent read past `read_timeout`
  raises TimeoutError.

Not yet KubeClient's transport (issue 19): measured against the real control plane, 1,000
watches took 104 MB over HTTP/2 against 161 MB over HTTP/1.1, but one watch delivered 0.67x the
events/s (h2 parses every frame in Python, aiohttp's HTTP/1.1 reader is C), and the agent has not
yet been run on it against a real server. The wiring waits for both.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

log = logging.getLogger("scaleagent.kube.http2")

USER_AGENT = "scale-agent/0.1"
# A stream may buffer this much unread DATA before the server must wait (per-stream backpressure).
STREAM_WINDOW = 1 << 20
# The whole connection's receive window: many streams can be in flight at once.
CONNECTION_WINDOW = 16 << 20
READ_IDLE = 30.0  # client-go's ReadIdleTimeout
PING_TIMEOUT = 15.0  # client-go's PingTimeout
READ_SIZE = 64 * 1024


class NotHttp2(Exception):
    """The server chose HTTP/1.1 in ALPN: use the HTTP/1.1 path for this server."""


class Http2StreamError(ConnectionError):
    """The stream or its connection broke (reset, GOAWAY, lost connection, no PING answer)."""


class Http2ConnectError(ConnectionError):
    """The TCP connection could not be made (refused, unreachable, no such host); `strerror`
    says why, as aiohttp's ClientConnectorError does, so messages stay the same."""


class StreamRefused(Http2StreamError):
    """The server did not process the stream (GOAWAY past it, REFUSED_STREAM): safe to resend."""


def alpn_context(ctx: ssl.SSLContext) -> ssl.SSLContext:
    """Offer h2 then http/1.1 on `ctx` (in place) and return it.

    The context is shared with the HTTP/1.1 path: that is safe only because a server that
    answers ALPN with h2 is then spoken to through this module, and one that picks http/1.1 is
    spoken to over HTTP/1.1 by both.
    """
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


class _Content:
    """The body of one stream, read as aiohttp's `resp.content` is (iter_any, read)."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._stream.read_chunk()
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        parts: list[bytes] = []
        while True:
            chunk = await self._stream.read_chunk()
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)


class Http2Response:
    """What `KubeClient.stream` yields on HTTP/2: `status`, `headers`, `content`, `read()`, `release()`."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self.status = stream.status
        self.headers = stream.headers
        self.content = _Content(stream)

    async def read(self) -> bytes:
        return await self.content.read()

    def release(self) -> None:
        """Stop the stream if its body was not read to the end (RST_STREAM CANCEL); idempotent."""
        self._stream.close()


class _Stream:
    """One request's state; fed synchronously by the connection's protocol callbacks."""

    __slots__ = (
        "conn",
        "id",
        "status",
        "headers",
        "chunks",
        "ended",
        "error",
        "_waiter",
        "read_timeout",
        "deadline",
        "closed",
        "headers_received",
    )

    def __init__(self, conn: _Connection, stream_id: int, read_timeout: float | None, deadline: float | None) -> None:
        self.conn = conn
        self.id = stream_id
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: collections.deque[bytes] = collections.deque()
        self.ended = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.read_timeout = read_timeout
        self.deadline = deadline
        self.closed = False
        self.headers_received = False

    def wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def fail(self, error: BaseException) -> None:
        if self.error is None and not self.ended:
            self.error = error
        self.wake()

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.read_timeout
        if self.deadline is not None:
            left = self.deadline - loop.time()
            timeout = left if timeout is None else min(timeout, left)
            if timeout <= 0:
                raise TimeoutError
        self._waiter = fut = loop.create_future()
        handle = loop.call_later(timeout, _expire, fut) if timeout is not None else None
        try:
            await fut
        finally:
            self._waiter = None
            if handle is not None:
                handle.cancel()

    async def wait_headers(self) -> None:
        while not self.headers_received:
            if self.error is not None:
                raise self.error
            await self._wait()

    async def read_chunk(self) -> bytes:
        """The next DATA received, b"" at the end of the stream; acknowledges it to the server."""
        while not self.chunks:
            if self.error is not None:
                raise self.error
            if self.ended:
                return b""
            await self._wait()
        chunk = self.chunks.popleft()
        self.conn.consumed(self, len(chunk))
        return chunk

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.conn.forget(self, cancel=not self.ended and self.error is None)
        self.chunks.clear()


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection: h2 state machine, its streams, and the PING watchdog."""

    def __init__(self, authority: str, read_idle: float, ping_timeout: float) -> None:
        self.authority = authority
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False)
        )
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.closed: BaseException | None = None  # why no new stream may start here
        self.going_away = False
        self.read_idle = read_idle
        self.ping_timeout = ping_timeout
        self._loop = asyncio.get_running_loop()
        self._last_frame = self._loop.time()
        self._ping_ack: asyncio.Future[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._window_waiters: list[asyncio.Future[None]] = []
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self.alpn: str | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        ssl_object = transport.get_extra_info("ssl_object")
        self.alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if self.alpn == "h2":
            # At once: the server's SETTINGS may arrive before create_connection returns, and
            # must find the preface sent.
            self.start()

    def start(self) -> None:
        """Send the preface and settings; start the PING watchdog."""
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 20,
            },
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()
        self._watchdog = asyncio.ensure_future(self._watch_liveness())

    def data_received(self, data: bytes) -> None:
        if self.alpn != "h2":
            return  # HTTP/1.1 bytes: the connection is about to be closed
        self._last_frame = self._loop.time()
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            self._fail(Http2StreamError(f"HTTP/2 protocol error: {e}"))
            self._flush()
            if self.transport is not None:
                self.transport.close()
            return
        for event in events:
            self._on_event(event)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(Http2StreamError(f"the HTTP/2 connection to {self.authority} was lost: {exc or 'closed'}"))
        if not self._lost.done():
            self._lost.set_result(None)
        if self._watchdog is not None:
            self._watchdog.cancel()

    # -- events --------------------------------------------------------------------------------

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            s = self.streams.get(event.stream_id)
            if s is None:  # released by its reader: give the window back at once
                self._ack(event.stream_id, event.flow_controlled_length)
                return
            if event.flow_controlled_length > len(event.data):  # padding counts but is not data
                self._ack(event.stream_id, event.flow_controlled_length - len(event.data))
            if event.data:
                s.chunks.append(event.data)
                s.wake()
        elif isinstance(event, h2.events.ResponseReceived):
            s = self.streams.get(event.stream_id)
            if s is not None:
                for k, v in event.headers:
                    key = k.decode() if isinstance(k, bytes) else k
                    val = v.decode(errors="replace") if isinstance(v, bytes) else v
                    if key == ":status":
                        s.status = int(val)
                    else:
                        s.headers[key] = val
                s.headers_received = True
                s.wake()
        elif isinstance(event, h2.events.StreamEnded):
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.ended = True
                s.wake()
        elif isinstance(event, h2.events.StreamReset):
            s = self.streams.get(event.stream_id)
            if s is not None:
                code = event.error_code
                cls = StreamRefused if code == h2.errors.ErrorCodes.REFUSED_STREAM else Http2StreamError
                s.fail(cls(f"the server reset the stream ({_code_name(code)})"))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._on_goaway(event)
        elif isinstance(event, h2.events.PingAckReceived):
            if self._ping_ack is not None and not self._ping_ack.done():
                self._ping_ack.set_result(None)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            waiters, self._window_waiters = self._window_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        self.going_away = True
        last = event.last_stream_id or 0
        why = f"the server is closing the connection (GOAWAY {_code_name(event.error_code)})"
        self.closed = self.closed or Http2StreamError(why)
        for sid, s in list(self.streams.items()):
            if sid > last:
                s.fail(StreamRefused(why))
            elif event.error_code != h2.errors.ErrorCodes.NO_ERROR:
                s.fail(Http2StreamError(why))
        self._close_if_idle()

    # -- streams -------------------------------------------------------------------------------

    def can_open(self) -> bool:
        if self.closed is not None or self.going_away or self.transport is None or self.transport.is_closing():
            return False
        return self.h2.open_outbound_streams < self.h2.remote_settings.max_concurrent_streams

    async def open_stream(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
        deadline: float | None,
    ) -> _Stream:
        sid = self.h2.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "https"), (":authority", self.authority), (":path", path)]
        hdrs += [(k.lower(), v) for k, v in headers.items()]
        s = _Stream(self, sid, read_timeout, deadline)
        self.streams[sid] = s
        try:
            self.h2.send_headers(sid, hdrs, end_stream=not body)
            self._flush()
            if body:
                await self._send_body(s, body)
        except (h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError) as e:
            self.forget(s, cancel=False)
            raise Http2StreamError(f"cannot send the request: {e}") from None
        return s

    async def _send_body(self, s: _Stream, body: bytes) -> None:
        view = memoryview(body)
        while view:
            if s.error is not None:
                raise s.error
            window = self.h2.local_flow_control_window(s.id)
            if window <= 0:
                fut = self._loop.create_future()
                self._window_waiters.append(fut)
                await asyncio.wait([fut, self._lost], return_when=asyncio.FIRST_COMPLETED)
                if self._lost.done():
                    raise self.closed or Http2StreamError("connection lost while sending")
                continue
            n = min(window, self.h2.max_outbound_frame_size, len(view))
            self.h2.send_data(s.id, bytes(view[:n]))
            view = view[n:]
            self._flush()
        self.h2.end_stream(s.id)
        self._flush()

    def consumed(self, s: _Stream, n: int) -> None:
        """The reader took `n` bytes: the server may send that much more on this stream."""
        if not s.closed and n:
            self._ack(s.id, n)
            self._flush()

    def _ack(self, sid: int, n: int) -> None:
        try:
            self.h2.acknowledge_received_data(n, sid)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
            # The stream has ended; the connection window is what matters and h2 credits it.
            with contextlib.suppress(Exception):
                self.h2.increment_flow_control_window(n)

    def forget(self, s: _Stream, cancel: bool) -> None:
        if self.streams.pop(s.id, None) is None:
            return
        unread = sum(len(c) for c in s.chunks)
        if cancel and self.closed is None:
            with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                self.h2.reset_stream(s.id, h2.errors.ErrorCodes.CANCEL)
        if unread:
            with contextlib.suppress(Exception):
                self.h2.increment_flow_control_window(unread)
        self._flush()
        self._close_if_idle()

    # -- liveness and shutdown -----------------------------------------------------------------

    async def _watch_liveness(self) -> None:
        """PING after `read_idle` seconds of silence; no ACK within `ping_timeout`: connection dead."""
        try:
            while self.closed is None:
                idle = self._loop.time() - self._last_frame
                if idle < self.read_idle:
                    await asyncio.sleep(self.read_idle - idle)
                    continue
                self._ping_ack = self._loop.create_future()
                self.h2.ping(os.urandom(8))
                self._flush()
                try:
                    await asyncio.wait_for(asyncio.shield(self._ping_ack), self.ping_timeout)
                except TimeoutError:
                    log.info(
                        "%s: no answer to an HTTP/2 PING in %gs; closing the connection",
                        self.authority,
                        self.ping_timeout,
                    )
                    self._fail(Http2StreamError(f"{self.authority} did not answer a PING in {self.ping_timeout:g}s"))
                    if self.transport is not None:
                        self.transport.abort()
                    return
        except asyncio.CancelledError:
            pass

    def _fail(self, error: BaseException) -> None:
        self.closed = self.closed or error
        for s in list(self.streams.values()):
            s.fail(error)
        for w in self._window_waiters:
            if not w.done():
                w.set_result(None)

    def _close_if_idle(self) -> None:
        if self.going_away and not self.streams and self.transport is not None:
            self.transport.close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def aclose(self) -> None:
        if self.closed is None:
            self.closed = Http2StreamError("the client was closed")
            with contextlib.suppress(Exception):
                self.h2.close_connection()
                self._flush()
        self._fail(self.closed)
        if self.transport is not None:
            self.transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._lost), 2.0)
        if self._watchdog is not None:
            self._watchdog.cancel()


def _code_name(code: Any) -> str:
    return getattr(code, "name", str(code))


class Http2Client:
    """HTTP/2 requests to one API server, multiplexed on as few connections as its limits allow.

    `stream()` has the shape of `KubeClient.stream`'s aiohttp request (status, content.iter_any(),
    read(), release()); `open()` raises NotHttp2 when the server prefers HTTP/1.1, after which
    `http2` is False and the caller should not ask again.
    """

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        *,
        connect_timeout: float = 30.0,
        read_idle: float = READ_IDLE,
        ping_timeout: float = PING_TIMEOUT,
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"HTTP/2 needs an https:// server, not {server!r}")
        self.host = parts.hostname
        self.port = parts.port or 443
        self.authority = parts.netloc
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname or parts.hostname
        self.connect_timeout = connect_timeout
        self.read_idle = read_idle
        self.ping_timeout = ping_timeout
        self.http2: bool | None = None  # None: not known yet; False: the server chose HTTP/1.1
        self.connections: list[_Connection] = []
        self._connecting: asyncio.Task[_Connection] | None = None
        self._closed = False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection(self.authority, self.read_idle, self.ping_timeout)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: conn, self.host, self.port, ssl=self.ssl_context, server_hostname=self.server_hostname
                ),
                self.connect_timeout,
            )
        except (ssl.SSLError, TimeoutError):
            raise
        except OSError as e:
            raise Http2ConnectError(e.errno, e.strerror or str(e) or type(e).__name__) from e
        if conn.alpn != "h2":
            transport.close()
            self.http2 = False
            raise NotHttp2(f"{self.authority} chose {conn.alpn or 'no protocol'} in ALPN")
        self.http2 = True
        return conn

    async def _connection(self) -> _Connection:
        """A connection with room for one more stream: an open one, or a new one (one dial at a time)."""
        while True:
            if self._closed:
                raise Http2StreamError("the client was closed")
            self.connections = [c for c in self.connections if c.streams or c.can_open()]
            for c in self.connections:
                if c.can_open():
                    return c
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            task = self._connecting
            try:
                conn = await asyncio.shield(task)
            finally:
                if self._connecting is task and task.done():
                    self._connecting = None
            if conn not in self.connections:
                self.connections.append(conn)
            if self._closed:
                await conn.aclose()

    async def open(self) -> None:
        """Connect now (or raise NotHttp2): lets a caller learn the protocol before its first request."""
        await self._connection()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> Http2Response:
        """A response once its headers came; the caller reads its body and must `release()` it
        (as with aiohttp's `session.request`, so KubeClient.stream can use either).

        `timeout` bounds the whole exchange, `read_timeout` each wait for data (TimeoutError).
        A stream the server refused (GOAWAY, REFUSED_STREAM) before answering is sent again on
        another connection, a few times.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        full = path + ("?" + urlencode(params) if params else "")
        hdrs = {"user-agent": USER_AGENT, **{k.lower(): v for k, v in (headers or {}).items()}}
        attempt = 0
        while True:
            conn = await self._connection()
            s = await conn.open_stream(method, full, hdrs, body, read_timeout, deadline)
            try:
                await s.wait_headers()
            except StreamRefused:
                s.close()
                attempt += 1
                if attempt > 3:
                    raise
                continue
            except BaseException:
                s.close()
                raise
            return Http2Response(s)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[Http2Response]:
        """`request()` as a context manager: the stream is released on exit."""
        resp = await self.request(
            method, path, params=params, headers=headers, body=body, timeout=timeout, read_timeout=read_timeout
        )
        try:
            yield resp
        finally:
            resp.release()

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(BaseException):
                conn = await self._connecting
                await conn.aclose()
        for c in self.connections:
            await c.aclose()
        self.connections = []
