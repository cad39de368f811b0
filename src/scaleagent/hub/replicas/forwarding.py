"""Requests from one replica to another, over the peers' HTTP APIs.

Every forwarded request carries `HOP_HEADER` naming the replica that sent it. A replica answers
a request that has it from what it holds itself and never forwards it again, so a request makes
at most one hop, whatever two replicas believe about each other.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..auth.principal import CURRENT

log = logging.getLogger("scaleagent.hub.replicas.forwarding")

HOP_HEADER = "X-Scale-Agent-Forwarded-By"
"""Set on every request a replica sends to another: the receiver answers it locally."""

REPLICA_TOKEN_HEADER = "X-Scale-Agent-Replica-Token"
"""The replicas' shared token (`replicas.token`): proves the request comes from a replica."""

ON_BEHALF_HEADER = "X-Scale-Agent-On-Behalf-Of"
"""The caller (JSON: name, groups, admin) a replica forwards a request for; believed only with
the replicas' token, and checked again by the receiver against the accounts it holds."""

CONNECT_TIMEOUT_SECONDS = 2.0
"""A live replica accepts a connection in milliseconds; one that does not within this is down."""

# Request headers passed on (the rest, Host and hop-by-hop ones included, are the client's
# business with the first replica). The caller's own credentials are not: with logins on, the
# replicas' token and the caller's identity travel instead (a client certificate cannot).
_PASSED = ("accept", "content-type")


class PeerUnreachable(Exception):
    """The peer could not be reached or broke the connection: it is down or cut off."""

    def __init__(self, replica: str, base_url: str, reason: str) -> None:
        super().__init__(f"replica {replica} at {base_url} is unreachable: {reason}")
        self.replica, self.base_url, self.reason = replica, base_url, reason


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class Forwarder:
    """One pooled HTTP client for everything this replica asks its peers."""

    def __init__(self, me: str, token: str = "") -> None:
        self.me = me
        self._token = token
        self._session: aiohttp.ClientSession | None = None
        self.forwarded = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS),
                json_serialize=lambda o: orjson.dumps(o).decode(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self, given: Mapping[str, str] | None) -> dict[str, str]:
        headers = {k: v for k, v in (given or {}).items() if k.lower() in _PASSED}
        headers[HOP_HEADER] = self.me
        if self._token:
            headers[REPLICA_TOKEN_HEADER] = self._token
            caller = CURRENT.get()
            if caller is not None:
                headers[ON_BEHALF_HEADER] = orjson.dumps(caller.document()).decode()
        return headers

    async def request(
        self,
        replica: str,
        base_url: str,
        method: str,
        path_and_query: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Answer:
        """Send one request to a peer and read its whole answer. Raises PeerUnreachable when the
        peer cannot be reached, breaks the connection or does not answer within `timeout`."""
        self.forwarded += 1
        try:
            async with self._client().request(
                method,
                base_url + path_and_query,
                data=body,
                headers=self._headers(headers),
                timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=CONNECT_TIMEOUT_SECONDS),
            ) as response:
                return Answer(response.status, response.headers.get("Content-Type", ""), await response.read())
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise PeerUnreachable(replica, base_url, _reason(e)) from None

    async def stream(
        self, replica: str, base_url: str, path_and_query: str, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """A peer's streamed answer (the multi-cluster watch), chunk by chunk, starting with an
        empty chunk once the peer has answered; raises PeerUnreachable when it cannot be opened
        (before that empty chunk) or breaks (after it)."""
        try:
            async with self._client().get(
                base_url + path_and_query,
                headers=self._headers(headers),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS),
            ) as response:
                if response.status != 200:
                    raise PeerUnreachable(
                        replica, base_url, f"HTTP {response.status}: {(await response.read())[:200]!r}"
                    )
                yield b""
                async for chunk in response.content.iter_any():
                    yield chunk
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise PeerUnreachable(replica, base_url, _reason(e)) from None

    async def alive(self, base_url: str) -> bool:
        """Whether a replica answers its liveness check now (a refused connection answers at once)."""
        try:
            async with self._client().get(
                base_url + "/health", headers=self._headers(None), timeout=aiohttp.ClientTimeout(total=3.0)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False


def _reason(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
