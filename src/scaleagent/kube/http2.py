"""HTTP/2 to a Kubernetes API server: one TLS connection per cluster carries all its watches.

Why: over HTTP/1.1 every watch holds its own TLS connection (socket, TLS read buffer touched as
deep as its largest read, aiohttp's buffers): about 65 KB each, most of the agent's memory floor
with a thousand watches. client-go multiplexes a cluster's watches as streams of one HTTP/2
connection; this module does the same, driven by an asyncio Protocol (no extra threads, no
per-stream reader task). It is KubeClient's transport whenever the server picks h2 in ALPN.

Speed: python-hyper's `h2` state machine handles the frames that need state (HEADERS and HPACK,
SETTINGS, PING, GOAWAY, RST_STREAM, the WINDOW_UPDATEs for what we send), but not DATA: h2 spends
about 50 us per frame (objects, two state machines, a log line formatted even when logging is
off), and the apiserver writes a watch in 4 KB DATA frames, so h2 cost more per event than
everything else the agent does with it. DATA frames are split off in `_Connection.data_received`
and handed to their stream directly (about 1 us per frame), with their flow control counted here.

What it guarantees:
- ALPN offers ["h2", "http/1.1"]; a server that picks http/1.1 (kubesim) makes `open()` raise
  `NotHttp2`, and the caller keeps using its HTTP/1.1 path.
- Flow control: DATA is acknowledged only when the consumer takes it (in steps, not per frame),
  so a slow consumer holds back its own stream (at most one stream window buffered) and, with the
  others, at most the connection's window; a server that sends past a window fails the connection.
- Liveness: after `read_idle` seconds without a frame a PING is sent; no answer within
  `ping_timeout` fails the connection and every stream on it (a half-open TCP connection is
  found, as client-go's ReadIdleTimeout/PingTimeout do).
- GOAWAY: streams the server did not process fail with `StreamRefused` and are retried on a new
  connection by `Http2Client.request`; the others run to their end; new requests use a new
  connection. The server's MAX_CONCURRENT_STREAMS is respected by opening another connection.
- Errors keep the shapes the callers already handle: a broken stream raises
  `Http2StreamError` (a ConnectionError, so an OSError), a silent read past `read_timeout`
  raises TimeoutError, a body shorter than its Content-Length or a broken gzip encoding is an
  `Http2StreamError` too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import ssl
import struct
import zlib
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
# As aiohttp over HTTP/1.1 and client-go: the apiserver compresses large responses (LIST pages
# over 128 KB), a third of the bytes; watches are not compressed. Empty: ask for none.
ACCEPT_ENCODING = "gzip"
# A stream may buffer this much unread DATA before the server must wait (per-stream backpressure).
STREAM_WINDOW = 1 << 20
# The whole connection's receive window: many streams can be in flight at once, and this bounds
# what one cluster's streams together can hold unread in the agent's memory (a hub that stalls
# the watches makes them buffer; HTTP/1.1 would leave the same bytes in the kernel).
CONNECTION_WINDOW = 4 << 20
# Consumed bytes are handed back (WINDOW_UPDATE) in steps of this much, not per frame.
STREAM_ACK_STEP = STREAM_WINDOW // 4
CONNECTION_ACK_STEP = CONNECTION_WINDOW // 8
# The largest frame we accept (the SETTINGS_MAX_FRAME_SIZE we announce): the protocol's default.
# Larger frames were measured to bring nothing: the apiserver writes a watch's events in 4 KB DATA
# frames whatever we allow, and a LIST page in 16 KB ones cost its CPU no more than in 256 KB ones
# (within noise), now that a frame costs us about 1 us.
MAX_FRAME_SIZE = 1 << 14
_FRAME_HEADER = struct.Struct(">BHBBL")  # length (24 bits, as 8 + 16), type, flags, stream id
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
READ_IDLE = 30.0  # client-go's ReadIdleTimeout
PING_TIMEOUT = 15.0  # client-go's PingTimeout
READ_SIZE = 64 * 1024


class _Violation(Exception):
    """The server broke the protocol: the connection is failed."""


_EMPTY_HEADER = b"\x00\x00\x00"  # a frame header's length field, for a frame without payload


def _frame_length(buf: bytes | bytearray, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 3], "big")


def _frame_end(partial: bytearray, data: bytes) -> int:
    """How many bytes of `data` complete the frame begun in `partial` (more than len(data): all)."""
    head = bytes(partial[:9]) if len(partial) >= 9 else bytes(partial) + data[: 9 - len(partial)]
    if len(head) < 9:
        return len(data)
    length = _frame_length(head, 0)
    if length > MAX_FRAME_SIZE:
        raise _Violation(f"a frame of {length} bytes, more than the {MAX_FRAME_SIZE} announced")
    return 9 + length - len(partial)


def _window_update(sid: int, increment: int) -> bytes:
    return b"\x00\x00\x04" + bytes((_WINDOW_UPDATE, 0)) + sid.to_bytes(4, "big") + increment.to_bytes(4, "big")


def _ping(payload: bytes, flags: int) -> bytes:
    """A PING frame (flags: 0, or _ACK to answer one) with its 8 bytes of payload."""
    return b"\x00\x00\x08" + bytes((_PING, flags)) + b"\x00\x00\x00\x00" + payload


def _rst_stream(sid: int, code: int) -> bytes:
    return b"\x00\x00\x04" + bytes((_RST_STREAM, 0)) + sid.to_bytes(4, "big") + int(code).to_bytes(4, "big")


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
    """The body of one stream, read as aiohttp's `resp.content` is (iter_any, read), decoded
    when the server compressed it (gzip, as aiohttp accepts it over HTTP/1.1)."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        gzip = stream.headers.get("content-encoding", "").strip().lower() == "gzip"
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None

    async def _next(self) -> bytes:
        """The next part of the body, b"" at its end."""
        while True:
            chunk = await self._stream.read_chunk()
            inflate = self._inflate
            if inflate is None:
                return chunk
            try:
                if chunk:
                    out = inflate.decompress(chunk)
                else:
                    out = inflate.flush()
                    if not inflate.eof:
                        raise Http2StreamError("the compressed response ended early")
                    if inflate.unused_data:
                        raise Http2StreamError("the compressed response has bytes after its end")
                    self._inflate = None
            except zlib.error as e:
                raise Http2StreamError(f"the response's gzip encoding is broken: {e}") from None
            if out or not chunk:
                return out

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._next()
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        parts: list[bytes] = []
        while True:
            chunk = await self._next()
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
        "recv_window",
        "unacked",
        "expected",
        "received",
        "head",
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
        self.recv_window = STREAM_WINDOW  # what the server may still send before a WINDOW_UPDATE
        self.unacked = 0  # consumed, not yet handed back to the server
        self.expected: int | None = None  # the response's Content-Length
        self.received = 0  # body bytes received
        self.head = False  # a HEAD request: its Content-Length comes with no body

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
        """Everything received since the last read (b"" at the end of the stream), handed back
        to the server's window. A watch's frames are small (the apiserver writes 4 KB DATA
        frames): taking them together is one wake-up, one copy and one window step per read,
        not per frame."""
        chunks = self.chunks
        while not chunks:
            if self.error is not None:
                raise self.error
            if self.ended:
                return b""
            await self._wait()
        chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
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
        # Inbound DATA is parsed here, not by h2 (see data_received): the bytes of a frame that
        # began in an earlier read, our receive window, and what was consumed but not handed back.
        self._partial = bytearray()
        self._recv_window = CONNECTION_WINDOW
        self._unacked = 0
        self._out: list[bytes] = []  # queued to send (see _queue)
        self._send_soon = False
        # A header block whose CONTINUATION frames are still to come, after a GOAWAY (_after_goaway):
        # (stream id, END_STREAM flag, the block so far).
        self._block: tuple[int, int, bytearray] | None = None

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
                h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
            },
        )
        self.h2.initiate_connection()
        # What we announce, also for h2's decoder: it would keep the protocol's 64 KiB until our
        # SETTINGS were acknowledged, and the initial values above are never "changed".
        self.h2.decoder.max_header_list_size = 1 << 20
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()
        self._watchdog = asyncio.ensure_future(self._watch_liveness())

    def data_received(self, data: bytes) -> None:
        """Split the bytes into frames: DATA frames are handled here, the rest by h2.

        Why not h2 for everything: h2 turns every frame into objects, runs two state machines
        and formats a log line per frame (even with logging off), about 50 us per frame; a
        watch's events come in 4 KB frames, so h2 alone cost more per event than the rest of
        the agent. DATA needs none of that: its payload goes to its stream and its flow control
        is counted here (_on_data). h2 keeps what needs state: HEADERS (HPACK), SETTINGS, PING,
        GOAWAY, RST_STREAM, WINDOW_UPDATE for what we send, and each stream's end (a DATA frame
        with END_STREAM is given to h2 as an empty one, so its stream bookkeeping stays true).
        """
        if self.alpn != "h2" or self.transport is None:
            return  # HTTP/1.1 bytes: the connection is about to be closed
        self._last_frame = self._loop.time()
        try:
            partial = self._partial
            if partial:
                # Complete the frame that began in an earlier read, then go on with the rest.
                take = _frame_end(partial, data)
                partial += data[:take]
                data = data[take:]
                if len(partial) < 9 or len(partial) < 9 + _frame_length(partial, 0):
                    return
                frame = bytes(partial)
                partial.clear()
                self._frames(frame)
            used = self._frames(data)
            if used < len(data):
                self._partial += data[used:]
        except _Violation as e:
            self._fail(Http2StreamError(f"HTTP/2 protocol error: {e}"))
            self._flush()
            self._send()
            if self.transport is not None:
                self.transport.close()
            return
        self._flush()

    def _frames(self, buf: bytes) -> int:
        """Handle the whole frames at the start of `buf`; return how many bytes they took."""
        pos, size = 0, len(buf)
        unpack = _FRAME_HEADER.unpack_from
        while size - pos >= 9:
            high, low, kind, flags, sid = unpack(buf, pos)
            length = high << 16 | low
            end = pos + 9 + length
            if length > MAX_FRAME_SIZE:
                raise _Violation(f"a frame of {length} bytes, more than the {MAX_FRAME_SIZE} announced")
            if end > size:
                break
            if kind == _DATA:
                self._on_data(sid & 0x7FFFFFFF, flags, buf, pos + 9, end)
            elif self.going_away:
                self._after_goaway(kind, flags, sid & 0x7FFFFFFF, buf[pos + 9 : end])
            else:
                # One frame at a time: after a GOAWAY h2 takes no more frames (see _after_goaway).
                if kind == _GOAWAY:
                    self._flush()  # h2 drops what it has queued (an ACK of a PING just before) on a GOAWAY
                self._to_h2(buf[pos:end])
            pos = end
        return pos

    def _after_goaway(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        """A frame other than DATA after the server's GOAWAY.

        h2's connection is closed once a GOAWAY came, and refuses every frame after it; but the
        streams the server kept (those up to its last stream id) go on until they end, as a Go
        server drains them: their HEADERS (responses, trailers), RST_STREAMs, and the server's
        PINGs and SETTINGS are handled here. HEADERS are decoded with h2's HPACK decoder, whose
        table is the connection's.
        """
        if self._block is not None and kind != _CONTINUATION:
            raise _Violation(f"a frame of type {kind} inside the header block of stream {self._block[0]}")
        if kind == _HEADERS or kind == _CONTINUATION:
            if kind == _HEADERS:
                start, end = 0, len(payload)
                if flags & _PADDED:
                    if not payload or payload[0] >= len(payload):
                        raise _Violation(f"a HEADERS frame's padding is longer than the frame on stream {sid}")
                    start, end = 1, len(payload) - payload[0]
                if flags & _PRIORITY:
                    start += 5
                if start > end:
                    raise _Violation(f"a HEADERS frame too short for its flags on stream {sid}")
                self._block = (sid, flags & _END_STREAM, bytearray(payload[start:end]))
            elif self._block is None or self._block[0] != sid:
                raise _Violation(f"a CONTINUATION frame on stream {sid} that continues nothing")
            else:
                self._block[2].extend(payload)
            if not flags & _END_HEADERS:
                return
            block_sid, end_stream, block = self._block
            self._block = None
            try:
                headers = self.h2.decoder.decode(bytes(block), raw=True)
            except Exception as e:  # hpack's errors: the connection's header table is lost
                raise _Violation(f"cannot decode the headers of stream {block_sid}: {e}") from None
            s = self.streams.get(block_sid)
            if s is None:
                return
            if not s.headers_received:
                status = next((v for k, v in headers if k == b":status"), b"")
                if status.startswith(b"1") and not end_stream:
                    return  # an informational response (100 Continue): the response follows
                self._response(s, headers)
            if end_stream:
                self._check_length(s)
                s.ended = True
                self._wake_senders()
                s.wake()
        elif kind == _RST_STREAM:
            if len(payload) != 4:
                raise _Violation(f"an RST_STREAM frame of {len(payload)} bytes on stream {sid}")
            s = self.streams.get(sid)
            if s is not None:
                self._reset(s, int.from_bytes(payload, "big"))
        elif kind == _PING:
            if len(payload) != 8 or sid:
                raise _Violation(f"a PING frame of {len(payload)} bytes on stream {sid}")
            if flags & _ACK:
                if self._ping_ack is not None and not self._ping_ack.done():
                    self._ping_ack.set_result(None)
            else:
                self._write(_ping(payload, _ACK))
        elif kind == _SETTINGS:
            if not flags & _ACK:
                self._write(_EMPTY_HEADER + bytes((_SETTINGS, _ACK)) + b"\x00\x00\x00\x00")
        elif kind == _GOAWAY and len(payload) >= 8:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self._drain(last, int.from_bytes(payload[4:8], "big"))
        # WINDOW_UPDATE (no request body goes on once a GOAWAY came: _send_body), PRIORITY: nothing to do.

    def _to_h2(self, frames: bytes) -> None:
        try:
            events = self.h2.receive_data(frames)
        except h2.exceptions.ProtocolError as e:
            raise _Violation(str(e)) from None
        for event in events:
            self._on_event(event)

    def _on_data(self, sid: int, flags: int, buf: bytes, start: int, end: int) -> None:
        """One DATA frame (payload buf[start:end]): to its stream, counted against both windows."""
        flow = end - start  # padding included: it counts against the windows too
        if sid == 0:
            raise _Violation("DATA on stream 0")
        self._recv_window -= flow
        if self._recv_window < 0:
            raise _Violation("the server sent more than the connection's window")
        s = self.streams.get(sid)
        if s is None or s.error is not None or s.ended:
            # Released by its reader or already failed: the bytes are dropped, and handed back at
            # once so that they do not hold the connection's window.
            self._give_back(flow)
            return
        if not s.headers_received:
            raise _Violation(f"DATA before HEADERS on stream {sid}")
        s.recv_window -= flow
        if s.recv_window < 0:
            raise _Violation(f"the server sent more than stream {sid}'s window")
        if flags & _PADDED:
            pad = buf[start] if flow else 256
            if pad + 1 > flow:
                raise _Violation(f"a DATA frame's padding is longer than the frame on stream {sid}")
            start, end = start + 1, end - pad
            s.unacked += pad + 1  # padding is never read: consumed on arrival
            self._unacked += pad + 1
        if end > start:
            s.chunks.append(buf[start:end])
            s.received += end - start
        if flags & _END_STREAM:
            self._check_length(s)
            if self.going_away:
                s.ended = True  # h2 takes nothing after a GOAWAY; the stream's end is ours to mark
                self._wake_senders()
            else:
                self._to_h2(_EMPTY_HEADER + bytes((_DATA, _END_STREAM)) + sid.to_bytes(4, "big"))
        s.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(Http2StreamError(f"the HTTP/2 connection to {self.authority} was lost: {exc or 'closed'}"))
        if not self._lost.done():
            self._lost.set_result(None)
        if self._watchdog is not None:
            self._watchdog.cancel()

    # -- events --------------------------------------------------------------------------------

    def _on_event(self, event: h2.events.Event) -> None:
        # DataReceived comes only from the empty frames that carry a stream's end (_on_data).
        if isinstance(event, h2.events.ResponseReceived):
            s = self.streams.get(event.stream_id)
            if s is not None:
                self._response(s, event.headers)
                # h2 checks the body against Content-Length, but sees none of it (DATA is parsed
                # in _on_data): the check is made there instead.
                stream = self.h2.streams.get(event.stream_id)
                if stream is not None and hasattr(stream, "_expected_content_length"):
                    stream._expected_content_length = None
        elif isinstance(event, h2.events.StreamEnded):
            s = self.streams.get(event.stream_id)
            if s is not None:
                self._check_length(s)  # a stream that ends with its HEADERS (no body, or trailers)
                s.ended = True
                self._wake_senders()
                s.wake()
        elif isinstance(event, h2.events.StreamReset):
            s = self.streams.get(event.stream_id)
            if s is not None:
                self._reset(s, event.error_code)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._on_goaway(event)
        elif isinstance(event, h2.events.PingAckReceived):
            if self._ping_ack is not None and not self._ping_ack.done():
                self._ping_ack.set_result(None)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._wake_senders()

    @staticmethod
    def _check_length(s: _Stream) -> None:
        """The stream ended: its body must be as long as its Content-Length said."""
        if s.expected is not None and s.received != s.expected and not s.head and s.status not in (204, 304):
            s.fail(Http2StreamError(f"the response ended after {s.received} of its {s.expected} bytes"))

    def _response(self, s: _Stream, headers: Any) -> None:
        """The response's headers (name, value pairs, bytes or str) arrived on `s`."""
        for k, v in headers:
            key = k.decode() if isinstance(k, bytes) else k
            val = v.decode(errors="replace") if isinstance(v, bytes) else v
            if key == ":status":
                s.status = int(val)
            else:
                s.headers[key] = val
        length = s.headers.get("content-length", "")
        s.expected = int(length) if length.isdigit() else None
        s.headers_received = True
        s.wake()

    def _reset(self, s: _Stream, code: int) -> None:
        cls = StreamRefused if code == h2.errors.ErrorCodes.REFUSED_STREAM else Http2StreamError
        s.fail(cls(f"the server reset the stream ({_code_name(code)})"))
        self._wake_senders()

    def _wake_senders(self) -> None:
        """A stream ended or was reset: a request body waiting for window looks again (its
        stream may no longer want it)."""
        waiters, self._window_waiters = self._window_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        self._drain(event.last_stream_id or 0, int(event.error_code or 0))

    def _drain(self, last: int, code: int) -> None:
        """The server sent GOAWAY: streams after `last` were not processed (retried elsewhere by
        Http2Client.request); those up to it go on to their end unless the code is an error."""
        self.going_away = True
        why = f"the server is closing the connection (GOAWAY {_code_name(code)})"
        self.closed = self.closed or Http2StreamError(why)
        for sid, s in list(self.streams.items()):
            if sid > last:
                s.fail(StreamRefused(why))
            elif code != h2.errors.ErrorCodes.NO_ERROR:
                s.fail(Http2StreamError(why))
        self._wake_senders()
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
        s.head = method == "HEAD"
        self.streams[sid] = s
        try:
            self.h2.send_headers(sid, hdrs, end_stream=not body)
            self._flush()
            if body:
                await self._send_body(s, body, deadline)
        except (h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError) as e:
            self.forget(s, cancel=False)
            raise Http2StreamError(f"cannot send the request: {e}") from None
        except BaseException:  # the body's deadline, the stream refused or failed, a cancellation
            s.close()
            raise
        return s

    async def _send_body(self, s: _Stream, body: bytes, deadline: float | None) -> None:
        """Send the request's body as the stream's and the connection's windows allow, by the
        request's deadline. A server may answer before it has read the whole body (a 403, a 429)
        and end or reset the stream: the rest is then not sent, and its answer is what counts."""
        view = memoryview(body)
        while view:
            if s.ended:
                if self.going_away:  # h2 sends nothing after a GOAWAY
                    self._write(_rst_stream(s.id, h2.errors.ErrorCodes.NO_ERROR))
                else:
                    with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                        self.h2.reset_stream(s.id, h2.errors.ErrorCodes.NO_ERROR)  # no more of the body
                        self._flush()
                return
            if s.error is not None:
                raise s.error
            if self.going_away:
                # The server kept this stream, but h2 sends nothing after a GOAWAY: the request
                # stops here (not retried: the server may have acted on it).
                self._write(_rst_stream(s.id, h2.errors.ErrorCodes.CANCEL))
                raise Http2StreamError("the server closed the connection while the request's body was being sent")
            window = self.h2.local_flow_control_window(s.id)
            if window <= 0:
                left = None if deadline is None else deadline - self._loop.time()
                if left is not None and left <= 0:
                    raise TimeoutError("no window to send the request's body before its deadline")
                fut = self._loop.create_future()
                self._window_waiters.append(fut)
                await asyncio.wait([fut, self._lost], timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if self._lost.done():
                    raise self.closed or Http2StreamError("connection lost while sending")
                continue
            n = min(window, self.h2.max_outbound_frame_size, len(view))
            self.h2.send_data(s.id, bytes(view[:n]))
            view = view[n:]
            self._flush()
        if self.going_away:  # all of it went before the GOAWAY; its end is ours to send
            self._write(_EMPTY_HEADER + bytes((_DATA, _END_STREAM)) + s.id.to_bytes(4, "big"))
            return
        self.h2.end_stream(s.id)
        self._flush()

    def consumed(self, s: _Stream, n: int) -> None:
        """The reader took `n` bytes: the server may send that much more, on this stream and on
        the connection, handed back in steps (STREAM_ACK_STEP, CONNECTION_ACK_STEP)."""
        if s.closed or not n:
            return
        s.unacked += n
        self._unacked += n
        out = b""
        if s.unacked >= STREAM_ACK_STEP and not s.ended:
            out = _window_update(s.id, s.unacked)
            s.recv_window += s.unacked
            s.unacked = 0
        if self._unacked >= CONNECTION_ACK_STEP:
            out += self._connection_update()
        if out:
            self._write(out)

    def _give_back(self, n: int) -> None:
        """Bytes the connection received but no reader will take: hand them back."""
        self._unacked += n
        if self._unacked >= CONNECTION_ACK_STEP:
            self._write(self._connection_update())

    def _connection_update(self) -> bytes:
        n, self._unacked = self._unacked, 0
        self._recv_window += n
        return _window_update(0, n)

    def _write(self, frames: bytes) -> None:
        """Frames we built ourselves, after whatever h2 has queued (frames stay whole)."""
        self._flush()
        self._queue(frames)

    def forget(self, s: _Stream, cancel: bool) -> None:
        if self.streams.pop(s.id, None) is None:
            return
        unread = sum(len(c) for c in s.chunks)
        if cancel and self.transport is not None and not self.transport.is_closing():
            try:
                self.h2.reset_stream(s.id, h2.errors.ErrorCodes.CANCEL)
            except (h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                if self.going_away:  # h2 sends nothing after a GOAWAY; the stream must still stop
                    self._write(_rst_stream(s.id, h2.errors.ErrorCodes.CANCEL))
        if unread:
            self._give_back(unread)
        self._flush()
        self._close_if_idle()

    # -- liveness and shutdown -----------------------------------------------------------------

    async def _watch_liveness(self) -> None:
        """PING after `read_idle` seconds of silence; no ACK within `ping_timeout`: connection dead."""
        try:
            # Also while a GOAWAY drains the streams the server kept: they are watches, which a
            # half-open connection would otherwise leave silent.
            while self.closed is None or (self.going_away and self.streams):
                idle = self._loop.time() - self._last_frame
                if idle < self.read_idle:
                    await asyncio.sleep(self.read_idle - idle)
                    continue
                self._ping_ack = self._loop.create_future()
                if self.going_away:  # h2 sends nothing after a GOAWAY
                    self._write(_ping(os.urandom(8), 0))
                else:
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
            self._send()
            self.transport.close()

    def _flush(self) -> None:
        """Queue what h2 has to send (see _queue)."""
        data = self.h2.data_to_send()
        if data:
            self._queue(data)

    def _queue(self, data: bytes) -> None:
        """Bytes to send, sent with everything else queued in this turn of the event loop: one
        TLS record and one system call for the requests, window updates and acknowledgements
        that many streams make at once (each write costs far more than the bytes it carries)."""
        if self.transport is None or self.transport.is_closing():
            return
        self._out.append(data)
        if not self._send_soon:
            self._send_soon = True
            self._loop.call_soon(self._send)

    def _send(self) -> None:
        self._send_soon = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def aclose(self) -> None:
        if self.closed is None:
            self.closed = Http2StreamError("the client was closed")
            with contextlib.suppress(Exception):
                self.h2.close_connection()
                self._flush()
        self._send()
        self._fail(self.closed)
        if self.transport is not None:
            self.transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._lost), 2.0)
        if self._watchdog is not None:
            self._watchdog.cancel()


def _code_name(code: Any) -> str:
    with contextlib.suppress(ValueError, TypeError):
        code = h2.errors.ErrorCodes(code)  # an int parsed by hand: its name, as h2 gives it
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
        self.base_path = parts.path.rstrip("/")  # a server behind a proxy path (https://host/k8s/c1)
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
            # The C library's words for errno ("Connection refused"), whichever event loop made it.
            why = os.strerror(e.errno) if e.errno else e.strerror or str(e) or type(e).__name__
            raise Http2ConnectError(e.errno, why) from e
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

    def peer_certificate(self) -> bytes | None:
        """The server's certificate (DER) as an open connection received it; None without one."""
        for c in self.connections:
            ssl_object = c.transport.get_extra_info("ssl_object") if c.transport is not None else None
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                return bytes(der)
        return None

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
        full = self.base_path + path + ("?" + urlencode(params) if params else "")
        hdrs = {
            "user-agent": USER_AGENT,
            "accept-encoding": ACCEPT_ENCODING,
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        attempt = 0
        while True:
            conn = await self._connection()
            try:
                s = await conn.open_stream(method, full, hdrs, body, read_timeout, deadline)
            except StreamRefused:  # a GOAWAY came while the body was being sent
                attempt += 1
                if attempt > 3:
                    raise
                continue
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
