"""Raw JSON requests to a Kubernetes API server, over HTTP/2 where the server offers it.

Objects stay bytes or plain dicts (orjson), never generated model classes: the agent forwards
bodies it does not need to understand, and the hot path must be cheap. Every failure becomes
either `APIError` (the server answered with a Status) or `ConnectionFailed` (it could not be
reached), each with a message a platform engineer can act on, whichever protocol carried it.

HTTP/2 (kube/http2.py) is the transport when the server picks it in ALPN, as every real
kube-apiserver does: one connection carries all of a cluster's watches and requests, as client-go
does, instead of one TLS connection per watch (about 65 KB each, most of the agent's memory with a
thousand watches). A server that picks HTTP/1.1 (kubesim) is spoken to over aiohttp, learned at
the first request and kept for the client's life.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from .credentials import Credentials
from .errors import APIError, ConnectionFailed, CredentialsError
from .http2 import Http2Client, Http2ConnectError, Http2Response, Http2StreamError, NotHttp2, alpn_context

log = logging.getLogger("scaleagent.kube.client")

JSON = "application/json"
USER_AGENT = "scale-agent/0.1"
# A client's LIST connections stay open this long after its last list ended, for the next one: an
# account's lists wait for the LIST budget among every account's, so they come seconds apart
# while many accounts start together. A handshake per burst of lists, not per list, while the
# memory deep LIST pages touched still goes away soon after the burst.
LIST_CONNECTION_IDLE = 10.0
# Over HTTP/1.1, a client's lists share at most this many connections (HTTP/2 multiplexes them on
# one): as many as an account's budget allows (tasks.budgetPerAccount, 8) would each pay a
# handshake, which costs more than the list itself for all but the largest kinds.
LIST_CONNECTIONS = 2

Response = aiohttp.ClientResponse | Http2Response
"""What `KubeClient.stream` yields: `status`, `headers`, `content.iter_any()`, `read()`."""


class _Counts:
    """Requests sent to Kubernetes API servers by this process (every client), for metrics."""

    requests = 0


COUNTS = _Counts()


@dataclass(frozen=True)
class RetryPolicy:
    """Armory's `kubernetes.retries`: a request that fails with an error whose text contains one
    of `retryable_errors` (or any error, with `retry_any_error`) is sent again, up to
    `max_retries` more times, `backoff` seconds apart. POSTs are never sent again: a create that
    timed out may have been made."""

    max_retries: int = 3
    backoff: float = 3.0
    retry_any_error: bool = False
    retryable_errors: tuple[str, ...] = ("timeout", "deadline exceeded")

    def retries(self, method: str, error: Exception) -> bool:
        if method == "POST":
            return False
        if self.retry_any_error:
            return True
        text = f"{type(error).__name__}: {error}".lower()
        return any(s.lower() in text for s in self.retryable_errors)


def describe_connection_error(server: str, e: BaseException) -> str:
    """Turn aiohttp/HTTP/2/ssl exceptions into one sentence naming the server and the cause: the
    same sentence whichever protocol met the failure."""
    if isinstance(e, Http2ConnectError):
        return f"cannot connect to {server}: {e.strerror or type(e).__name__}"
    if isinstance(e, Http2StreamError):
        return f"the connection to {server} broke: {e}"
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        return f"cannot verify the TLS certificate of {server}: {e.certificate_error}"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"cannot verify the TLS certificate of {server}: {e.verify_message}"
    if isinstance(e, (aiohttp.ClientSSLError, ssl.SSLError)):
        return f"TLS handshake with {server} failed: {e}"
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"cannot connect to {server}: {e.os_error.strerror or e.os_error or type(e.os_error).__name__}"
    if isinstance(e, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return f"{server} did not answer in time (timeout)"
    if isinstance(e, aiohttp.ClientPayloadError):
        return f"the connection to {server} broke during a response: {e}"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return f"{server} closed the connection"
    return f"request to {server} failed: {type(e).__name__}: {e}"


class KubeClient:
    """One cluster's API: one HTTP/2 connection where the server offers it, pooled HTTP/1.1
    connections otherwise; safe to share between tasks.

    `http2=False` keeps to HTTP/1.1 whatever the server offers (the agent's `kubernetes.http2`).
    `list_idle`: how long LIST connections outlive the client's last list (0: closed at once).
    The client sets the protocols its credentials' TLS context offers (ALPN): give each client
    credentials of its own, as `load_credentials` makes them.
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 30.0,
        limit: int = 0,
        watch_list: bool | None = False,
        http2: bool = True,
        list_idle: float = LIST_CONNECTION_IDLE,
    ) -> None:
        self.credentials = credentials
        self.server = credentials.server
        self._timeout = timeout
        self.retry: RetryPolicy | None = None  # see RetryPolicy; None: no retries but the 401 one
        # Whether reflectors stream their lists (a watch with sendInitialEvents, client-go's
        # WatchList); None: try, and learn from the first refusal so the others list in pages.
        # Off by default: the one server here that serves it (kubesim) streamed lists slower than
        # paged LISTs on one connection (docs/benchmarks.md), no real server we can run serves it
        # (1.20 refuses it), and the stream's connection keeps a LIST-deep read buffer until the
        # watch ends (minutes) where a paged LIST's connection closes after its last page.
        self.watch_list: bool | None = watch_list
        # Watches and small requests apart from bulk bodies. A connection's TLS read buffer (256 KB
        # under uvloop) is touched as deep as the largest read it served, and stays resident while
        # the connection lives. Bulk bodies (LIST pages) therefore travel on connections that close
        # soon after, so the long-lived ones that carry watches and small requests keep their
        # buffers shallow. Over HTTP/1.1: idle pooled connections (left by bursts of small
        # requests) close after a few seconds; watches hold theirs, and a watch that ends is
        # followed at once by the next one; `bulk=True` requests go on connections that close.
        self._session = self._new_session(
            aiohttp.TCPConnector(
                ssl=credentials.ssl_context, limit=limit, keepalive_timeout=5, enable_cleanup_closed=True
            )
        )
        self._bulk = self._new_session(
            aiohttp.TCPConnector(ssl=credentials.ssl_context, limit=limit, force_close=True, enable_cleanup_closed=True)
        )
        # HTTP/2: one connection carries the watches and small requests. Offered in ALPN on the
        # credentials' TLS context; None once the server chose HTTP/1.1 (or when http2 is off),
        # after which the context offers http/1.1 only, so that aiohttp's connections can never be
        # answered in HTTP/2.
        self._h2: Http2Client | None = None
        self._retired_h2: list[Http2Client] = []  # let go for HTTP/1.1 (_use_http11), closed by close()
        # LIST pages travel apart from the watches (see above), on connections shared by this
        # client's lists (one HTTP/2 connection, or an aiohttp pool), opened for a burst of lists
        # and closed `list_idle` seconds after its last list.
        self._list_idle = list_idle
        self._h2_lists: Http2Client | None = None
        self._h1_lists: aiohttp.ClientSession | None = None
        self._lists_running = 0
        self._lists_timer: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Future[None]] = set()  # list connections being closed
        if http2 and self.server.startswith("https://"):
            self._h2 = self._new_h2()

    @staticmethod
    def _new_session(connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT}, auto_decompress=True)

    def _new_h2(self) -> Http2Client:
        creds = self.credentials
        return Http2Client(
            self.server, alpn_context(creds.ssl_context), creds.server_hostname, connect_timeout=self._timeout
        )

    @property
    def protocol(self) -> str | None:
        """`HTTP/2` or `HTTP/1.1` once known (after the first request), None before."""
        if self._h2 is None:
            return "HTTP/1.1"
        return "HTTP/2" if self._h2.http2 else None

    @property
    def connections(self) -> int:
        """The HTTP/2 connections open now (watches and requests, LIST pages); 0 over HTTP/1.1."""
        return sum(len(c.connections) for c in (self._h2, self._h2_lists) if c is not None)

    def _use_http11(self) -> None:
        """The server chose HTTP/1.1 in ALPN: every later request goes through aiohttp."""
        if self._h2 is None:
            return
        log.debug("%s chose HTTP/1.1: its requests use HTTP/1.1 connections", self.server)
        # Not closed now: requests that took it before may still be under way (or about to ask
        # it for a connection, which it now answers with NotHttp2); closed with this client.
        self._retired_h2.append(self._h2)
        self._h2 = None
        self.credentials.ssl_context.set_alpn_protocols(["http/1.1"])

    async def close(self) -> None:
        if self._lists_timer is not None:
            self._lists_timer.cancel()
        for h2c in [self._h2, *self._retired_h2]:
            if h2c is not None:
                await h2c.close()
        await self._close_lists()
        if self._closing:
            await asyncio.wait(self._closing)
        await self._session.close()
        await self._bulk.close()

    @contextlib.asynccontextmanager
    async def bulk_session(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The session for a run of bulk requests (the pages of one LIST): connections apart from
        the watches', shared by this client's lists (one over HTTP/2, LIST_CONNECTIONS over
        HTTP/1.1) and closed `list_idle` seconds after the last list ends. Pages and lists that
        follow each other share a TLS handshake, and the connections' deep read buffers still go
        away after the burst (see __init__). Over HTTP/2 the session only names that connection:
        pass it to `stream` or `request` as `session`."""
        if self._h2 is not None and self._h2.http2 is None:
            await self._learn_protocol()
        self._lists_running += 1
        if self._lists_timer is not None:
            self._lists_timer.cancel()
            self._lists_timer = None
        try:
            if self._h2 is not None:
                yield self._bulk  # a name only: _h2_for sends its requests to the lists' connection
            else:
                if self._h1_lists is None:
                    # At most LIST_CONNECTIONS at once: a client's lists beyond that wait for one
                    # to be free rather than pay a handshake each.
                    self._h1_lists = self._new_session(
                        aiohttp.TCPConnector(
                            ssl=self.credentials.ssl_context, limit=LIST_CONNECTIONS, enable_cleanup_closed=True
                        )
                    )
                yield self._h1_lists
        finally:
            self._lists_running -= 1
            if not self._lists_running:
                if self._list_idle <= 0:
                    await self._close_lists()
                else:
                    self._lists_timer = asyncio.get_running_loop().call_later(self._list_idle, self._lists_idle)

    def lists_done(self) -> None:
        """No list is expected soon (every kind is listed and watched): the LIST connections close
        now rather than `list_idle` seconds after the last list, so that a burst's memory goes as
        soon as it is over."""
        if self._lists_timer is not None:
            self._lists_timer.cancel()
        self._lists_idle()

    def _lists_idle(self) -> None:
        self._lists_timer = None
        if not self._lists_running and (self._h2_lists is not None or self._h1_lists is not None):
            closing = asyncio.ensure_future(self._close_lists())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def _close_lists(self) -> asyncio.Future[Any]:
        """Close the LIST connections (their read buffers go with them). They are let go at once,
        before anything else runs, so a list that starts meanwhile opens new ones."""
        h2c, self._h2_lists = self._h2_lists, None
        h1, self._h1_lists = self._h1_lists, None
        return asyncio.gather(*(c.close() for c in (h2c, h1) if c is not None))

    async def _learn_protocol(self) -> None:
        """Connect now to learn whether the server speaks HTTP/2 (raises ConnectionFailed)."""
        assert self._h2 is not None
        try:
            await self._h2.open()
        except NotHttp2:
            self._use_http11()
        except (TimeoutError, ssl.SSLError, OSError) as e:
            raise ConnectionFailed(describe_connection_error(self.server, e)) from e

    def _h2_for(self, session: aiohttp.ClientSession | None, bulk: bool) -> Http2Client | None:
        """The HTTP/2 client a request goes to (None: HTTP/1.1): LIST pages (the session of
        `bulk_session`) on the lists' connection, everything else on the main one."""
        h2c = self._h2
        if h2c is None or session is not self._bulk or not self._lists_running:
            return h2c
        if self._h2_lists is None:
            self._h2_lists = self._new_h2()
            self._h2_lists.http2 = h2c.http2
        return self._h2_lists

    async def _headers(self, accept: str | None, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": accept or JSON}
        if content_type:
            headers["Content-Type"] = content_type
        auth = await self.credentials.authorization()
        if auth:
            headers["Authorization"] = auth
        return headers

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        accept: str | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
        bulk: bool = False,
        read_timeout: float | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> AsyncIterator[Response]:
        """A response whose body the caller reads; non-2xx statuses raise APIError first.

        A 401 makes the credentials refresh (rotated token, exec plugin) and is retried once.
        `bulk` sends the request on a connection that closes afterwards (large bodies; over
        HTTP/1.1 only: HTTP/2 has no connection per request, use `bulk_session`);
        `read_timeout` bounds the wait for each read (a dead peer cannot hold a stream forever).
        Only failures of the request itself are translated: whatever the caller raises while it
        holds the response passes through unchanged. `session` (from `bulk_session`) overrides
        the pool.
        """
        h2c = self._h2_for(session, bulk)
        if h2c is not None:
            h2resp = await self._open_h2(
                h2c, method, path, params, body, accept, content_type, timeout, read_timeout, main=h2c is self._h2
            )
            if h2resp is not None:
                try:
                    yield h2resp
                finally:
                    h2resp.release()
                return
        if session is None:
            session = self._bulk if bulk else self._session
        for attempt in (1, 2):
            COUNTS.requests += 1
            try:
                headers = await self._headers(accept, content_type)
            except CredentialsError as e:
                raise ConnectionFailed(str(e)) from None
            client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=self._timeout, sock_read=read_timeout)
            try:
                resp = await session.request(
                    method,
                    self.server + path,
                    params=params,
                    data=body,
                    headers=headers,
                    timeout=client_timeout,
                    server_hostname=self.credentials.server_hostname,
                )
                if resp.status == 401 and attempt == 1:
                    resp.release()
                    self.credentials.invalidate(rejected=headers.get("Authorization"))
                    continue
                if resp.status >= 400:
                    raw = await resp.read()
                    resp.release()
                    raise APIError.from_response(resp.status, raw)
            except (TimeoutError, aiohttp.ClientError, ssl.SSLError, OSError) as e:
                raise ConnectionFailed(describe_connection_error(self.server, e)) from e
            try:
                yield resp
            finally:
                resp.release()
            return

    async def _open_h2(
        self,
        h2c: Http2Client,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: bytes | None,
        accept: str | None,
        content_type: str | None,
        timeout: float | None,
        read_timeout: float | None,
        main: bool,
    ) -> Http2Response | None:
        """`stream`'s request over HTTP/2, with the same errors and the same 401 retry; None when
        the server turned out to prefer HTTP/1.1 (the caller then sends it over aiohttp)."""
        for attempt in (1, 2):
            try:
                headers = await self._headers(accept, content_type)
            except CredentialsError as e:
                raise ConnectionFailed(str(e)) from None
            try:
                resp = await h2c.request(
                    method, path, params=params, headers=headers, body=body, timeout=timeout, read_timeout=read_timeout
                )
            except NotHttp2:
                if not main:  # learned on the lists' connection: the main one would hear the same
                    await h2c.close()
                    self._h2_lists = None
                self._use_http11()
                return None
            except (TimeoutError, ssl.SSLError, OSError) as e:
                COUNTS.requests += 1
                raise ConnectionFailed(describe_connection_error(self.server, e)) from e
            COUNTS.requests += 1
            if resp.status == 401 and attempt == 1:
                resp.release()
                self.credentials.invalidate(rejected=headers.get("Authorization"))
                continue
            if resp.status >= 400:
                try:
                    raw = await resp.read()
                except (TimeoutError, OSError) as e:
                    raise ConnectionFailed(describe_connection_error(self.server, e)) from e
                finally:
                    resp.release()
                raise APIError.from_response(resp.status, raw)
            return resp
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        accept: str | None = None,
        content_type: str | None = None,
        bulk: bool = False,
        session: aiohttp.ClientSession | None = None,
        decode: bool = True,
    ) -> Any:
        """One JSON request, answered with the decoded JSON body (`decode=False`: its bytes, for a
        caller that decodes only what it needs); sent again as `retry` says."""
        data = orjson.dumps(body) if body is not None and not isinstance(body, bytes) else body
        retry = self.retry
        attempt = 0
        while True:
            try:
                raw, status = await self._request_once(method, path, params, data, accept, content_type, bulk, session)
                if not decode:
                    return raw
                try:
                    return orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    raise APIError(status, "BadResponse", f"{self.server}{path} answered with invalid JSON") from None
            except (ConnectionFailed, APIError) as e:
                if retry is None or attempt >= retry.max_retries or not retry.retries(method, e):
                    raise
                attempt += 1
                log.info("%s %s failed (%s): retry %d of %d", method, path, e, attempt, retry.max_retries)
                await asyncio.sleep(retry.backoff)

    async def _request_once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        data: Any,
        accept: str | None,
        content_type: str | None,
        bulk: bool,
        session: aiohttp.ClientSession | None = None,
    ) -> tuple[bytes, int]:
        """The body's bytes and the status."""
        async with self.stream(
            method,
            path,
            params=params,
            body=data,
            accept=accept,
            content_type=content_type or (JSON if data is not None else None),
            timeout=self._timeout,
            bulk=bulk,
            session=session,
        ) as resp:
            try:
                raw = await resp.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise ConnectionFailed(describe_connection_error(self.server, e)) from e
        return raw, resp.status

    async def get(self, path: str, **kw: Any) -> Any:
        return await self.request("GET", path, **kw)

    async def server_certificate_fingerprint(self) -> str | None:
        """SHA-256 of the server's certificate (uppercase, colon-separated, as openssl prints it).

        Over HTTP/2, read from the connection already open (no handshake of its own)."""
        parts = urlsplit(self.server)
        if parts.scheme != "https":
            return None
        der = self._h2.peer_certificate() if self._h2 is not None else None
        if der is not None:
            return _fingerprint(der)
        port = parts.port or 443
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    parts.hostname,
                    port,
                    ssl=self.credentials.ssl_context,
                    server_hostname=self.credentials.server_hostname or parts.hostname,
                ),
                self._timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError) as e:
            raise ConnectionFailed(describe_connection_error(self.server, e)) from None
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        return _fingerprint(der)


def _fingerprint(der: bytes) -> str:
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
