"""Give memory back to the operating system after bursts.

Initial syncs and relists parse whole LIST pages; Python frees those objects afterwards, but
glibc keeps the freed heap pages mapped, so the process would stay at its burst size forever.
`malloc_trim` returns them. It runs when no LIST is in flight any more (debounced), which is
exactly when a burst has ended. On other C libraries it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

log = logging.getLogger("scaleagent.agent.memory")


def _malloc_trim():  # noqa: ANN202
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return freed heap memory to the OS; False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class Releaser:
    """Calls release_free_memory once things have been quiet for `delay` seconds."""

    def __init__(self, delay: float = 2.0) -> None:
        self.delay = delay
        self._handle: asyncio.TimerHandle | None = None
        self.releases = 0

    def burst_ended(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.delay, self._release)

    def _release(self) -> None:
        self._handle = None
        if release_free_memory():
            self.releases += 1

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
