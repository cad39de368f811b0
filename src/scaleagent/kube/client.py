"""Raw JSON requests to a Kubernetes API server over aiohttp.

Objects stay bytes or plain dicts (orjson), never generated model classes: the agent forwards
bodies it does not need to understand, and the hot path must be cheap. Every failure becomes
either `APIError` (the server answered with a Status) or `ConnectionFailed` (it could not be
reached), each with a message a platform engineer can act on.
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

log = logging.getLogger("scaleagent.kube.client")

JSON = "application/json"
USER_AGENT = "scale-agent/0.1"


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
    """Turn aiohttp/ssl exceptions into one sentence naming the server and the cause."""
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        return f"cannot verify the TLS certificate of {server}: {e.certificate_error}"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"cannot verify the TLS certificate of {server}: {e.verify_message}"
    if isinstance(e, aiohttp.ClientSSLError):
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
    """One cluster's API, one pooled HTTP session; safe to share between tasks."""

    def __init__(
        self, credentials: Credentials, *, timeout: float = 30.0, limit: int = 0, watch_list: bool | None = False
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
        # Two pools. A connection's TLS read buffer (256 KB under uvloop) is touched as deep as the
        # largest read it served, and stays resident while the connection lives. Bulk bodies (LIST
        # pages) therefore travel on connections that close afterwards, so the long-lived ones that
        # carry watches and small requests keep their buffers shallow.
        # Idle pooled connections (left by bursts of small requests) close after a few seconds;
        # watches hold theirs, and a watch that ends is followed at once by the next one.
        self._session = self._new_session(
            aiohttp.TCPConnector(
                ssl=credentials.ssl_context, limit=limit, keepalive_timeout=5, enable_cleanup_closed=True
            )
        )
        self._bulk = self._new_session(
            aiohttp.TCPConnector(ssl=credentials.ssl_context, limit=limit, force_close=True, enable_cleanup_closed=True)
        )

    @staticmethod
    def _new_session(connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT}, auto_decompress=True)

    async def close(self) -> None:
        await self._session.close()
        await self._bulk.close()

    @contextlib.asynccontextmanager
    async def bulk_session(self) -> AsyncIterator[aiohttp.ClientSession]:
        """A session of one kept-alive connection for a run of bulk requests (the pages of one
        LIST), closed at exit: the pages share one TLS handshake instead of paying one each, and
        the connection's deep read buffer still goes away with the list (see __init__)."""
        session = self._new_session(
            aiohttp.TCPConnector(ssl=self.credentials.ssl_context, limit=1, enable_cleanup_closed=True)
        )
        try:
            yield session
        finally:
            await session.close()

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
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A response whose body the caller reads; non-2xx statuses raise APIError first.

        A 401 makes the credentials refresh (rotated token, exec plugin) and is retried once.
        `bulk` sends the request on a connection that closes afterwards (large bodies);
        `read_timeout` bounds the wait for each read (a dead peer cannot hold a stream forever).
        Only failures of the request itself are translated: whatever the caller raises while it
        holds the response passes through unchanged. `session` (from `bulk_session`) overrides
        the pool.
        """
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
        """SHA-256 of the server's certificate (uppercase, colon-separated, as openssl prints it)."""
        parts = urlsplit(self.server)
        if parts.scheme != "https":
            return None
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
        digest = hashlib.sha256(der).hexdigest().upper()
        return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
