"""Failed logins, counted per client address: past `limit` in one window, that address's logins
are refused (429, with when to try again) until the window ends.

Each failed bearer token may cost a TokenReview against the hub's cluster, and a client free to
fail as often as it likes can guess tokens or load the API server through the hub. The table is
bounded: beyond `max_clients` addresses, those whose window has ended are forgotten first, then
the oldest. IPv6 clients are counted by their /64, the block one host usually holds.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable

__all__ = ["LoginThrottle"]


class LoginThrottle:
    def __init__(
        self,
        *,
        limit: int = 10,
        window_seconds: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window_seconds, self.max_clients = limit, window_seconds, max_clients
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # client -> (failures, end of its window)

    def retry_after(self, client: str | None) -> int:
        """0 when `client` may try to log in; otherwise the whole seconds until it may."""
        entry = self._failures.get(_key(client))
        if entry is None or entry[0] < self.limit:
            return 0
        left = entry[1] - self._clock()
        return math.ceil(left) if left > 0 else 0

    def failed(self, client: str | None) -> bool:
        """A login from `client` was refused; True when this failure reaches the limit."""
        key, now = _key(client), self._clock()
        count, until = self._failures.pop(key, (0, 0.0))
        if until <= now:
            count, until = 0, now + self.window_seconds
        if len(self._failures) >= self.max_clients:
            self._failures = {k: v for k, v in self._failures.items() if v[1] > now}
            while len(self._failures) >= self.max_clients:
                del self._failures[next(iter(self._failures))]
        self._failures[key] = (count + 1, until)
        return count + 1 == self.limit


def _key(client: str | None) -> str:
    if not client:
        return ""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client  # a Unix socket's path, say
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else str(address)
