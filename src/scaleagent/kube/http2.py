"""HTTP/2 to a Kubernetes API server: one TLS connection per cluster carries all its watches.

Why: over HTTP/1.1 every watch holds its own TLS connection (socket, TLS read buffer touched as
deep as its largest read, aiohttp's buffers): about 65 KB each, most of the agent's memory floor
with a thousand watches. client-go multiplexes a cluster's watches as streams of one HTTP/2
connection; this module does the same, driven by an asyncio Protocol (no extra threads, no
per-stream reader task). It is KubeClient's transport whenever the server picks h2 in ALPN.

Speed: the framing is this module's own, with `hpack` (python-hyper's) to decode response
headers. python-hyper's `h2` state machine was used before: it spent about 50 us on every frame
(objects, two state machines, a log line formatted even when logging is off) and about 80 us to
send a request's HEADERS, so that with a watch's events in 4 KB DATA frames it cost more per event
than everything else the agent does with it, and a third of the agent's CPU while a hundred
accounts were activated. Here a DATA frame costs about 1 us and a request's HEADERS a few: each
request header is encoded once per connection and kept (requests use no HPACK dynamic table).
The unit tests run it against an h2 server, which checks every frame we send.

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
import enum
import logging
import os
import re
import ssl
import struct
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import hpack
import hpack.table

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


_PUSH_PROMISE = 0x5
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
(
    _SETTINGS_HEADER_TABLE_SIZE,
    _SETTINGS_ENABLE_PUSH,
    _SETTINGS_MAX_CONCURRENT_STREAMS,
    _SETTINGS_INITIAL_WINDOW_SIZE,
    _SETTINGS_MAX_FRAME_SIZE,
    _SETTINGS_MAX_HEADER_LIST_SIZE,
) = range(1, 7)
_MAX_WINDOW = (1 << 31) - 1
_MAX_STREAM_ID = (1 << 31) - 1
# The largest header list we accept (SETTINGS_MAX_HEADER_LIST_SIZE), and how many CONTINUATION
# frames one block may take (a stream of empty ones would otherwise never end).
MAX_HEADER_LIST = 1 << 20
MAX_CONTINUATIONS = 128
INITIAL_MAX_STREAMS = 100  # the streams a new connection may carry before the server's SETTINGS
_STATUS = re.compile(rb"[1-9][0-9]{2}")
_ALL_INDEXED = re.compile(rb"[\x81-\xfe]+")  # HPACK indexed fields, each index in one byte (1-126)
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")


class ErrorCode(enum.IntEnum):
    """RFC 9113's error codes, for RST_STREAM and GOAWAY (and their names in messages)."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


_NO_ERROR, _PROTOCOL_ERROR, _FLOW_CONTROL_ERROR, _FRAME_SIZE_ERROR = (
    ErrorCode.NO_ERROR,
    ErrorCode.PROTOCOL_ERROR,
    ErrorCode.FLOW_CONTROL_ERROR,
    ErrorCode.FRAME_SIZE_ERROR,
)
_INTERNAL = ErrorCode.INTERNAL_ERROR
_REFUSED_STREAM, _CANCEL, _COMPRESSION_ERROR, _ENHANCE_YOUR_CALM = (
    ErrorCode.REFUSED_STREAM,
    ErrorCode.CANCEL,
    ErrorCode.COMPRESSION_ERROR,
    ErrorCode.ENHANCE_YOUR_CALM,
)


class _Violation(Exception):
    """The server broke the protocol: the connection is failed (GOAWAY with `code`)."""

    def __init__(self, message: str, code: int = ErrorCode.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def _frame_length(buf: bytes | bytearray, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 3], "big")


def _frame_end(partial: bytearray, data: bytes) -> int:
    """How many bytes of `data` complete the frame begun in `partial` (more than len(data): all)."""
    head = bytes(partial[:9]) if len(partial) >= 9 else bytes(partial) + data[: 9 - len(partial)]
    if len(head) < 9:
        return len(data)
    length = _frame_length(head, 0)
    if length > MAX_FRAME_SIZE:
        raise _Violation(f"a frame of {length} bytes, more than the {MAX_FRAME_SIZE} announced", _FRAME_SIZE_ERROR)
    return 9 + length - len(partial)


def _frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


def _window_update(sid: int, increment: int) -> bytes:
    return _frame(_WINDOW_UPDATE, 0, sid, increment.to_bytes(4, "big"))


def _ping(payload: bytes, flags: int) -> bytes:
    """A PING frame (flags: 0, or _ACK to answer one) with its 8 bytes of payload."""
    return _frame(_PING, flags, 0, payload)


def _rst_stream(sid: int, code: int) -> bytes:
    return _frame(_RST_STREAM, 0, sid, int(code).to_bytes(4, "big"))


def _goaway(last: int, code: int) -> bytes:
    return _frame(_GOAWAY, 0, 0, last.to_bytes(4, "big") + int(code).to_bytes(4, "big"))


def _headers_frames(sid: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as a HEADERS frame, and CONTINUATION frames for what does not fit in it."""
    flags = _END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return _frame(_HEADERS, flags | _END_HEADERS, sid, block)
    frames = [_frame(_HEADERS, flags, sid, block[:max_frame])]
    for i in range(max_frame, len(block), max_frame):
        frames.append(
            _frame(_CONTINUATION, _END_HEADERS if i + max_frame >= len(block) else 0, sid, block[i : i + max_frame])
        )
    return b"".join(frames)


# -- HPACK for requests --------------------------------------------------------------------------
# Requests are encoded without the dynamic table: every field is a literal (its name, where it
# can be, an index into HPACK's static table) that is never added to a table. The encoder then
# has no state, a field is the same bytes in every request (so they are kept, see
# _Connection._field), and the server's HEADER_TABLE_SIZE can be anything. A request is a few
# dozen bytes longer than with indexing; the agent's requests are few next to their answers.
# Responses are decoded with `hpack`, whose table follows the server's.

_STATIC_NAMES: dict[bytes, int] = {}
_STATIC_FIELDS: dict[tuple[bytes, bytes], int] = {}
for _i, (_name, _value) in enumerate(hpack.table.HeaderTable.STATIC_TABLE, 1):
    _STATIC_NAMES.setdefault(_name, _i)
    if _value:
        _STATIC_FIELDS.setdefault((_name, _value), _i)
# Values an intermediary must never index either (RFC 7541 section 7.1.3).
_SENSITIVE = frozenset((b"authorization", b"proxy-authorization", b"cookie"))
_NAME = re.compile(rb":?[!#$%&'*+\-.^_`|~0-9a-z]+")  # a token in lower case (HTTP/2 wants them so)
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
# HTTP/1.1's connection-specific fields, which HTTP/2 forbids (RFC 9113 section 8.2.2).
_CONNECTION_SPECIFIC = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"))


def _hpack_int(value: int, prefix: int, first: int) -> bytes:
    """An HPACK integer with a `prefix`-bit prefix, `first` holding the first byte's other bits."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    """A literal field never added to a table: 'without indexing', or 'never indexed' for the
    sensitive ones; its name by static index where HPACK's table has it."""
    first = 0x10 if name in _SENSITIVE else 0x00
    index = _STATIC_NAMES.get(name)
    head = _hpack_int(index, 4, first) if index is not None else bytes((first,)) + _hpack_int(len(name), 7, 0) + name
    return head + _hpack_int(len(value), 7, 0) + value


def _hpack_field(name: str, value: str) -> bytes:
    """One request header field. Raises Http2StreamError for a field HTTP/2 cannot carry
    (without the value in the message: it may be a credential)."""
    n, v = name.encode(), value.encode()
    if not _NAME.fullmatch(n) or _BAD_VALUE.search(v) or n in _CONNECTION_SPECIFIC or (n == b"te" and v != b"trailers"):
        raise Http2StreamError(f"cannot send the request: its header {name!r} is not one HTTP/2 can carry")
    index = _STATIC_FIELDS.get((n, v))
    if index is not None and n not in _SENSITIVE:
        return _hpack_int(index, 7, 0x80)
    return _hpack_literal(n, v)


class NotHttp2(Exception):
    """The server chose HTTP/1.1 in ALPN: use the HTTP/1.1 path for this server."""


class Http2StreamError(ConnectionError):
    """The stream or its connection broke (reset, GOAWAY, lost connection, no PING answer)."""


class Http2ConnectError(ConnectionError):
    """The TCP connection could not be made (refused, unreachable, no such host); `strerror`
    says why, as aiohttp's ClientConnectorError does, so messages stay the same."""


class StreamRefused(Http2StreamError):
    """The server did not process the stream (GOAWAY past it, REFUSED_STREAM): safe to resend."""


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")


def _query(params: Mapping[str, str]) -> str:
    """`urlencode(params)`, four times faster for what a watch or a LIST page sends (`watch=1`,
    `resourceVersion=123`, `limit=500`: nothing to quote), which is every request of an agent."""
    parts = []
    for key, value in params.items():
        if type(key) is not str or type(value) is not str or not _UNRESERVED.fullmatch(key + value):
            return urlencode(params)
        parts.append(f"{key}={value}")
    return "&".join(parts)


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
        "send_window",
        "local_closed",
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
        self.send_window = 0  # what we may still send of a request body (set by the connection)
        self.local_closed = False  # our side ended (END_STREAM sent, or RST_STREAM)

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
    """One HTTP/2 connection: its frames, its streams, and the PING watchdog.

    The state RFC 9113 asks of a client that only sends requests: stream ids, the server's
    settings, both directions' flow control, header blocks (HEADERS + CONTINUATION, decoded by
    `hpack` with the connection's table), the streams the server's MAX_CONCURRENT_STREAMS counts,
    and GOAWAY. Frames of a kind we never use (PRIORITY, unknown types) are skipped, as the RFC
    says; a PUSH_PROMISE (push is disabled in our SETTINGS) fails the connection.
    """

    def __init__(self, authority: str, read_idle: float, ping_timeout: float) -> None:
        self.authority = authority
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}  # streams a reader holds, by id
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
        self._partial = bytearray()  # the bytes of a frame that began in an earlier read
        self._recv_window = CONNECTION_WINDOW  # what the server may still send on the connection
        self._unacked = 0  # consumed, not yet handed back
        self._out: list[bytes] = []  # queued to send (see _write)
        self._send_soon = False
        # A header block whose CONTINUATION frames are still to come: (stream id, END_STREAM, block).
        self._block: tuple[int, int, bytearray] | None = None
        self._continuations = 0  # CONTINUATION frames of that block so far
        self._decoder = hpack.Decoder()
        # What we announce (MAX_HEADER_LIST_SIZE); hpack's default is 64 KiB.
        self._decoder.max_header_list_size = MAX_HEADER_LIST
        # Header blocks made only of indexed fields, decoded while the table is as it was (_header_block).
        self._indexed: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._fields: dict[tuple[str, str], bytes] = {}  # header fields as encoded before
        self._next_sid = 1
        # Streams the server counts against its MAX_CONCURRENT_STREAMS: opened, and not yet both
        # ended (each side's END_STREAM) or reset.
        self._open: set[int] = set()
        # The server's MAX_CONCURRENT_STREAMS. Until its first SETTINGS arrive, 100 (as Go's client
        # assumes): a burst of requests on a new connection would otherwise outrun the server's
        # limit and be refused; unlimited afterwards if it names none, as RFC 9113 says.
        self._max_streams = INITIAL_MAX_STREAMS
        self._settings_seen = False
        self._initial_window = 65535  # the server's INITIAL_WINDOW_SIZE: each stream's send window
        self._max_frame = 1 << 14  # the server's MAX_FRAME_SIZE: the largest frame we may send
        self._send_window = 65535  # what we may still send on the connection

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
        """Send the preface, our settings and the connection's window; start the PING watchdog."""
        settings = b"".join(
            code.to_bytes(2, "big") + value.to_bytes(4, "big")
            for code, value in (
                (_SETTINGS_ENABLE_PUSH, 0),
                (_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
                (_SETTINGS_MAX_FRAME_SIZE, MAX_FRAME_SIZE),
            )
        )
        self._write(_PREFACE + _frame(_SETTINGS, 0, 0, settings) + _window_update(0, CONNECTION_WINDOW - 65535))
        self._watchdog = asyncio.ensure_future(self._watch_liveness())

    def data_received(self, data: bytes) -> None:
        """Split the bytes into frames and handle each (_frames)."""
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
            self._abort(Http2StreamError(f"HTTP/2 protocol error: {e}"), e.code)
        except Exception as e:  # a bug of ours, met by what this server sent: its connection alone fails
            log.warning("%s: HTTP/2 connection failed handling what the server sent", self.authority, exc_info=True)
            self._abort(Http2StreamError(f"HTTP/2: cannot handle what the server sent ({type(e).__name__})"), _INTERNAL)

    def _abort(self, error: Http2StreamError, code: int) -> None:
        """Fail the connection and every stream on it, telling the server why (GOAWAY)."""
        self._fail(error)
        self._write(_goaway(0, code))
        self._send()
        if self.transport is not None:
            self.transport.close()

    def _frames(self, buf: bytes) -> int:
        """Handle the whole frames at the start of `buf`; return how many bytes they took.

        DATA first and cheapest: a watch's events come in 4 KB DATA frames, so this loop runs
        about once per event (python-hyper's h2, used here before, spent about 50 us on each
        frame: objects, two state machines, a log line formatted with logging off)."""
        pos, size = 0, len(buf)
        unpack = _FRAME_HEADER.unpack_from
        while size - pos >= 9:
            high, low, kind, flags, sid = unpack(buf, pos)
            length = high << 16 | low
            end = pos + 9 + length
            if length > MAX_FRAME_SIZE:
                raise _Violation(
                    f"a frame of {length} bytes, more than the {MAX_FRAME_SIZE} announced", _FRAME_SIZE_ERROR
                )
            if end > size:
                break
            sid &= 0x7FFFFFFF
            if self._block is not None and kind != _CONTINUATION:
                raise _Violation(f"a frame of type {kind} inside the header block of stream {self._block[0]}")
            if kind == _DATA:
                self._on_data(sid, flags, buf, pos + 9, end)
            else:
                self._on_frame(kind, flags, sid, buf[pos + 9 : end])
            pos = end
        return pos

    def _on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        """A frame other than DATA."""
        if kind == _HEADERS or kind == _CONTINUATION:
            self._on_header_frame(kind, flags, sid, payload)
        elif kind == _WINDOW_UPDATE:
            if len(payload) != 4:
                raise _Violation(f"a WINDOW_UPDATE frame of {len(payload)} bytes", _FRAME_SIZE_ERROR)
            self._window_updated(sid, int.from_bytes(payload, "big") & 0x7FFFFFFF)
        elif kind == _RST_STREAM:
            if not sid:
                raise _Violation("RST_STREAM on stream 0")
            if len(payload) != 4:
                raise _Violation(f"an RST_STREAM frame of {len(payload)} bytes on stream {sid}", _FRAME_SIZE_ERROR)
            self._open.discard(sid)
            s = self.streams.get(sid)
            if s is not None:
                self._reset(s, int.from_bytes(payload, "big"))
        elif kind == _SETTINGS:
            if sid:
                raise _Violation(f"SETTINGS on stream {sid}")
            if flags & _ACK:
                if payload:
                    raise _Violation("a SETTINGS acknowledgement with a payload", _FRAME_SIZE_ERROR)
            else:
                self._settings(payload)
                self._write(_frame(_SETTINGS, _ACK, 0))
        elif kind == _PING:
            if len(payload) != 8 or sid:
                raise _Violation(f"a PING frame of {len(payload)} bytes on stream {sid}", _FRAME_SIZE_ERROR)
            if flags & _ACK:
                if self._ping_ack is not None and not self._ping_ack.done():
                    self._ping_ack.set_result(None)
            else:
                self._write(_ping(payload, _ACK))
        elif kind == _GOAWAY:
            if len(payload) < 8 or sid:
                raise _Violation(f"a GOAWAY frame of {len(payload)} bytes on stream {sid}", _FRAME_SIZE_ERROR)
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self._drain(last, int.from_bytes(payload[4:8], "big"))
        elif kind == _PUSH_PROMISE:
            raise _Violation("a PUSH_PROMISE, though our SETTINGS disabled push")
        # PRIORITY, and frame types this client does not know: ignored, as RFC 9113 says.

    def _on_header_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        """HEADERS and CONTINUATION: the block, once whole, is decoded (always: the HPACK table is
        the connection's) and given to its stream, if a reader still holds it."""
        if kind == _HEADERS:
            if not sid or not sid & 1 or sid >= self._next_sid:
                raise _Violation(f"HEADERS on stream {sid}, which this client did not open")
            start, end = 0, len(payload)
            if flags & _PADDED:
                if not payload or payload[0] >= len(payload):
                    raise _Violation(f"a HEADERS frame's padding is longer than the frame on stream {sid}")
                start, end = 1, len(payload) - payload[0]
            if flags & _PRIORITY:
                start += 5
            if start > end:
                raise _Violation(f"a HEADERS frame too short for its flags on stream {sid}", _FRAME_SIZE_ERROR)
            if flags & _END_HEADERS:
                self._header_block(sid, flags & _END_STREAM, payload[start:end])
                return
            self._block = (sid, flags & _END_STREAM, bytearray(payload[start:end]))
            self._continuations = 0
            return
        block = self._block
        if block is None or block[0] != sid:
            raise _Violation(f"a CONTINUATION frame on stream {sid} that continues nothing")
        block[2].extend(payload)
        self._continuations += 1
        if len(block[2]) > MAX_HEADER_LIST:
            raise _Violation(f"a header block of more than {MAX_HEADER_LIST} bytes on stream {sid}", _ENHANCE_YOUR_CALM)
        if self._continuations > MAX_CONTINUATIONS:
            raise _Violation(
                f"a header block in more than {MAX_CONTINUATIONS} CONTINUATION frames on stream {sid}",
                _ENHANCE_YOUR_CALM,
            )
        if flags & _END_HEADERS:
            self._block = None
            self._header_block(sid, block[1], bytes(block[2]))

    def _header_block(self, sid: int, end_stream: int, block: bytes) -> None:
        headers: Any = self._indexed.get(block)
        if headers is None:
            try:
                if len(block) <= 256 and _ALL_INDEXED.fullmatch(block):
                    # Only references to table entries, as a Go server sends the same headers
                    # again: they change no table, so the block means the same until one that
                    # does comes. 1 us where hpack takes 35 (it builds and logs each field).
                    table = self._decoder.header_table
                    headers = [table.get_by_index(b & 0x7F) for b in block]
                    if len(self._indexed) >= 256:
                        self._indexed.clear()
                    self._indexed[block] = headers
                else:
                    self._indexed.clear()  # the block may change the table
                    headers = self._decoder.decode(block, raw=True)
            except Exception as e:  # hpack's errors: the connection's header table is lost
                raise _Violation(f"cannot decode the headers of stream {sid}: {e}", _COMPRESSION_ERROR) from None
        s = self.streams.get(sid)
        if s is None or s.ended or s.error is not None:
            if end_stream:
                self._remote_ended(sid, s)
            return  # released by its reader, or failed: the block only kept the table in step
        if not s.headers_received:
            status = next((v for k, v in headers if k == b":status"), b"")
            if status.startswith(b"1"):
                if end_stream:
                    self._stream_error(s, "an informational (1xx) response that ends the stream")
                return  # an informational response (100 Continue): the response follows
            self._response(s, headers)
            if s.error is not None:
                return
        elif not end_stream:
            raise _Violation(f"trailers without the end of stream {sid}")
        if end_stream:
            self._ended(s)
        else:
            s.wake()

    def _on_data(self, sid: int, flags: int, buf: bytes, start: int, end: int) -> None:
        """One DATA frame (payload buf[start:end]): to its stream, counted against both windows."""
        flow = end - start  # padding included: it counts against the windows too
        if not sid or not sid & 1 or sid >= self._next_sid:
            raise _Violation(f"DATA on stream {sid}, which this client did not open")
        self._recv_window -= flow
        if self._recv_window < 0:
            raise _Violation("the server sent more than the connection's window", _FLOW_CONTROL_ERROR)
        s = self.streams.get(sid)
        if s is None or s.error is not None or s.ended:
            # Released by its reader or already failed: the bytes are dropped, and handed back at
            # once so that they do not hold the connection's window.
            self._give_back(flow)
            if flags & _END_STREAM:
                self._remote_ended(sid, s)
            return
        if not s.headers_received:
            raise _Violation(f"DATA before HEADERS on stream {sid}")
        s.recv_window -= flow
        if s.recv_window < 0:
            raise _Violation(f"the server sent more than stream {sid}'s window", _FLOW_CONTROL_ERROR)
        if flags & _PADDED:
            pad = buf[start] if flow else 256
            if pad + 1 > flow:
                raise _Violation(f"a DATA frame's padding is longer than the frame on stream {sid}")
            start, end = start + 1, end - pad
            s.unacked += pad + 1  # padding is never read: consumed on arrival, and handed back
            self._unacked += pad + 1
            if end == start:
                self.consumed(s, 0)  # no data to read, whose reading would hand the padding back
        if end > start:
            s.chunks.append(buf[start:end])
            s.received += end - start
        if flags & _END_STREAM:
            self._ended(s)
        else:
            s.wake()

    def _ended(self, s: _Stream) -> None:
        """The server ended `s` (END_STREAM on its HEADERS or DATA)."""
        self._check_length(s)
        s.ended = True
        self._remote_ended(s.id, s)
        self._wake_senders()
        s.wake()

    def _remote_ended(self, sid: int, s: _Stream | None) -> None:
        """END_STREAM came on `sid`: the stream no longer counts against the server's limit once
        our side has ended too (a stream still sending is reset when its reader releases it)."""
        if s is None or s.local_closed:
            self._open.discard(sid)

    def _stream_error(self, s: _Stream, why: str) -> None:
        """The server's response on `s` is malformed: the stream fails with `why` and is reset
        (PROTOCOL_ERROR); the connection's other streams go on."""
        s.fail(Http2StreamError(f"HTTP/2: {why}"))
        if s.id in self._open:
            self._close_local(s, _PROTOCOL_ERROR)
        self._wake_senders()

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _Violation(f"a SETTINGS frame of {len(payload)} bytes", _FRAME_SIZE_ERROR)
        if not self._settings_seen:
            self._settings_seen = True
            self._max_streams = 1 << 31  # no limit unless these settings name one
        for i in range(0, len(payload), 6):
            code = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if code == _SETTINGS_MAX_CONCURRENT_STREAMS:
                self._max_streams = value
            elif code == _SETTINGS_INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise _Violation(f"an initial window of {value} bytes", _FLOW_CONTROL_ERROR)
                delta, self._initial_window = value - self._initial_window, value
                for s in self.streams.values():
                    s.send_window += delta
                    if s.send_window > _MAX_WINDOW:
                        raise _Violation(f"stream {s.id}'s window grew over 2^31-1 bytes", _FLOW_CONTROL_ERROR)
            elif code == _SETTINGS_MAX_FRAME_SIZE:
                if not 1 << 14 <= value < 1 << 24:
                    raise _Violation(f"a maximum frame size of {value} bytes")
                self._max_frame = value
            elif code == _SETTINGS_ENABLE_PUSH and value:
                raise _Violation(f"ENABLE_PUSH set to {value} by a server")
            # HEADER_TABLE_SIZE: our requests never use the dynamic table (_hpack_field), so any
            # size the server's decoder keeps is fine; MAX_HEADER_LIST_SIZE: advisory; others: unknown.
        self._wake_senders()

    def _window_updated(self, sid: int, increment: int) -> None:
        if not sid:
            if not increment:
                raise _Violation("a connection WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise _Violation("a connection window over 2^31-1 bytes", _FLOW_CONTROL_ERROR)
        else:
            s = self.streams.get(sid)
            if s is None or sid not in self._open:
                return  # a stream already closed on our side: nothing more to send on it
            s.send_window += increment
            if not increment or s.send_window > _MAX_WINDOW:
                self._open.discard(sid)
                self._write(_rst_stream(sid, _FLOW_CONTROL_ERROR if increment else _PROTOCOL_ERROR))
                s.local_closed = True
                s.fail(Http2StreamError(f"the server gave stream {sid} a window update of {increment}"))
        self._wake_senders()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(Http2StreamError(f"the HTTP/2 connection to {self.authority} was lost: {exc or 'closed'}"))
        if not self._lost.done():
            self._lost.set_result(None)
        if self._watchdog is not None:
            self._watchdog.cancel()

    # -- streams' events -----------------------------------------------------------------------

    def _check_length(self, s: _Stream) -> None:
        """The stream ended: its body must be as long as its Content-Length said."""
        if s.expected is not None and s.received != s.expected and not s.head and s.status not in (204, 304):
            s.fail(Http2StreamError(f"the response ended after {s.received} of its {s.expected} bytes"))
            self._wake_senders()

    def _response(self, s: _Stream, headers: Any) -> None:
        """The response's headers (name, value pairs as bytes) arrived on `s`."""
        status = b""
        for k, v in headers:
            if k == b":status":
                status = v
            else:
                s.headers[k.decode(errors="replace")] = v.decode(errors="replace")
        if not _STATUS.fullmatch(status):
            self._stream_error(s, "a response without a valid :status")
            return
        s.status = int(status)
        length = s.headers.get("content-length", "")
        if length and not _CONTENT_LENGTH.fullmatch(length):
            self._stream_error(s, "a response whose Content-Length is not a number")
            return
        s.expected = int(length) if length else None
        s.headers_received = True

    def _reset(self, s: _Stream, code: int) -> None:
        s.local_closed = True
        cls = StreamRefused if code == _REFUSED_STREAM else Http2StreamError
        s.fail(cls(f"the server reset the stream ({_code_name(code)})"))
        self._wake_senders()

    def _wake_senders(self) -> None:
        """Windows grew, or a stream ended or was reset: a request body waiting for window looks
        again (its stream may no longer want it)."""
        waiters, self._window_waiters = self._window_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _drain(self, last: int, code: int) -> None:
        """The server sent GOAWAY: streams after `last` were not processed (retried elsewhere by
        Http2Client.request); those up to it go on to their end unless the code is an error."""
        self.going_away = True
        why = f"the server is closing the connection (GOAWAY {_code_name(code)})"
        self.closed = self.closed or Http2StreamError(why)
        for sid, s in list(self.streams.items()):
            if sid > last:
                s.fail(StreamRefused(why))
            elif code != _NO_ERROR:
                s.fail(Http2StreamError(why))
        self._wake_senders()
        self._close_if_idle()

    # -- streams -------------------------------------------------------------------------------

    def can_open(self) -> bool:
        if self.closed is not None or self.going_away or self.transport is None or self.transport.is_closing():
            return False
        return len(self._open) < self._max_streams and self._next_sid <= _MAX_STREAM_ID

    async def open_stream(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
        deadline: float | None,
    ) -> _Stream:
        if not self.can_open():
            raise StreamRefused(f"cannot send the request: {self.closed or 'the connection is full'}")
        block = b"".join(
            (
                self._field(":method", method),
                b"\x87",  # :scheme https, from HPACK's static table
                self._field(":authority", self.authority),
                _hpack_literal(b":path", path.encode()),
                *[self._field(k, v) for k, v in headers.items()],
            )
        )
        sid = self._next_sid
        self._next_sid += 2
        s = _Stream(self, sid, read_timeout, deadline)
        s.head = method == "HEAD"
        s.send_window = self._initial_window
        s.local_closed = not body
        self.streams[sid] = s
        self._open.add(sid)
        self._write(_headers_frames(sid, block, not body, self._max_frame))
        if body:
            try:
                await self._send_body(s, body, deadline)
            except BaseException:  # the body's deadline, the stream refused or failed, a cancellation
                s.close()
                raise
        return s

    def _field(self, name: str, value: str) -> bytes:
        """One request header field, HPACK-encoded (kept: most fields repeat in every request)."""
        key = (name, value)
        field = self._fields.get(key)
        if field is None:
            if len(self._fields) >= 1024:
                self._fields.clear()
            field = self._fields[key] = _hpack_field(name, value)
        return field

    async def _send_body(self, s: _Stream, body: bytes, deadline: float | None) -> None:
        """Send the request's body as the stream's and the connection's windows allow, by the
        request's deadline. A server may answer before it has read the whole body (a 403, a 429)
        and end or reset the stream: the rest is then not sent, and its answer is what counts."""
        view = memoryview(body)
        while view:
            if s.ended:
                self._close_local(s, _NO_ERROR)  # no more of the body
                return
            if s.error is not None:
                raise s.error
            if self.going_away:
                # The server kept this stream, but the request stops here (not retried: the
                # server may have acted on it).
                self._close_local(s, _CANCEL)
                raise Http2StreamError("the server closed the connection while the request's body was being sent")
            window = min(s.send_window, self._send_window)
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
            n = min(window, self._max_frame, len(view))
            last = n == len(view)
            self._write(_frame(_DATA, _END_STREAM if last else 0, s.id, bytes(view[:n])))
            s.send_window -= n
            self._send_window -= n
            view = view[n:]
        s.local_closed = True
        if s.ended:
            self._open.discard(s.id)

    def _close_local(self, s: _Stream, code: int) -> None:
        """Stop sending on `s` (RST_STREAM with `code`)."""
        if s.id in self._open:
            self._open.discard(s.id)
            self._write(_rst_stream(s.id, code))
        s.local_closed = True

    def consumed(self, s: _Stream, n: int) -> None:
        """The reader took `n` bytes: the server may send that much more, on this stream and on
        the connection, handed back in steps (STREAM_ACK_STEP, CONNECTION_ACK_STEP)."""
        if s.closed:
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

    def forget(self, s: _Stream, cancel: bool) -> None:
        """The reader released `s`: a stream the server has not ended is reset (CANCEL), and
        what was received but not read is handed back."""
        if self.streams.pop(s.id, None) is None:
            return
        unread = sum(len(c) for c in s.chunks)
        if s.id in self._open and self.transport is not None and not self.transport.is_closing():
            self._close_local(s, _CANCEL if cancel else _NO_ERROR)
        self._open.discard(s.id)
        if unread:
            self._give_back(unread)
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
                self._write(_ping(os.urandom(8), 0))
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

    def _write(self, data: bytes) -> None:
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

    def abandon(self) -> None:
        """Close a connection that carries no stream and can take none."""
        if self.closed is None:
            self.closed = Http2StreamError("the connection was closed: it could take no more streams")
        if self.transport is not None and not self.transport.is_closing():
            self._write(_goaway(0, _NO_ERROR))
            self._send()
            self.transport.close()
        if self._watchdog is not None:
            self._watchdog.cancel()

    async def aclose(self) -> None:
        if self.closed is None:
            self.closed = Http2StreamError("the client was closed")
            self._write(_goaway(0, _NO_ERROR))
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
        return ErrorCode(code).name
    return str(code)


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
        self.authority = parts.netloc.rpartition("@")[2]  # never a user:password the URL may carry
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
            if self.http2 is False:  # a request that took this client before the server chose HTTP/1.1
                raise NotHttp2(f"{self.authority} chose HTTP/1.1 in ALPN")
            kept = []
            for c in self.connections:
                if c.streams or c.can_open():
                    kept.append(c)
                else:
                    c.abandon()  # closed, going away or full, with nothing left on it
            self.connections = kept
            for c in kept:
                if c.can_open():
                    return c
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            task = self._connecting
            try:
                conn = await asyncio.shield(task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if task.cancelled() and current is not None and not current.cancelling():
                    # The dial was cancelled by close(), not this request: say so, as an error
                    # its callers handle (a CancelledError would end a watch's task silently).
                    raise Http2StreamError("the client was closed") from None
                raise
            finally:
                if self._connecting is task and task.done():
                    self._connecting = None
            if self._closed:
                await conn.aclose()
                continue
            if not conn.streams and not conn.can_open():
                # Just made, and it takes no stream: the server closed it or sent GOAWAY at once,
                # or allows no streams (MAX_CONCURRENT_STREAMS 0). Dialling again at once would
                # only do the same, as fast as handshakes go.
                why = conn.closed or (
                    "the server closed it"
                    if conn.transport is None or conn.transport.is_closing()
                    else "it allows no streams (MAX_CONCURRENT_STREAMS 0)"
                )
                conn.abandon()
                raise Http2StreamError(f"{self.authority} takes no request on a new connection: {why}")
            if conn not in self.connections:
                self.connections.append(conn)

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
        full = self.base_path + path + ("?" + _query(params) if params else "")
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
        task = self._connecting
        if task is not None:
            task.cancel()
            await asyncio.wait([task])  # its cancellation stays its own; ours still reaches us
            if not task.cancelled() and task.exception() is None:
                await task.result().aclose()
        for c in self.connections:
            await c.aclose()
        self.connections = []
