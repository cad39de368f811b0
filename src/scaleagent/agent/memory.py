"""Give memory back to the operating system after bursts.

Initial syncs and relists parse whole LIST pages; Python frees those objects afterwards, but
glibc keeps the freed heap pages mapped, so the process would stay at its burst size forever.
`malloc_trim` returns them. It runs when no LIST is in flight any more (debounced), which is
exactly when a burst has ended, and every few minutes for what is freed later (connections that
close, say). On other C libraries it does nothing.
"""

from __future__ import annotations

import asyncio
import logging

from ..allocator import release_free_memory, tune_allocator, tune_unless_set

log = logging.getLogger("scaleagent.agent.memory")

# Each TLS connection allocates a 256 KB read buffer (uvloop) that it mostly never touches; from a
# fresh mapping the untouched part costs nothing, from a heap region a LIST already wrote to it is
# all resident. By default, freeing a large block (a LIST page's body) raises glibc's mmap
# threshold, and later large blocks come from the heap. Measured: steady memory of 1,000 watches
# after syncing a million objects halves with the threshold fixed here.
MMAP_THRESHOLD = 128 * 1024
TRIM_THRESHOLD = 128 * 1024  # glibc's own default

# But mapping every LIST page's body and every batch for the hub afresh (about 1 MiB each) costs
# a page fault per 4 KiB: 90,000 in a 100,000-object sync, 15-20% of the agent's CPU then
# (bench/hub_end_to_end.py). While the agent holds few TLS connections, those blocks come from
# the heap instead. Measured (bench/agent_memory.py): that costs about 130 KB of steady memory per
# connection, nothing to see over HTTP/2 (a connection per account) and 133 MB with 1,000
# watches over HTTP/1.1 (a connection per watch), so above WIDE_UP_TO connections the agent goes
# back to the setting above (and to the heap again at WIDE_AGAIN_AT). The limit counts HTTP/2
# connections alike: 100 accounts over HTTP/2 measured the same either way.
WIDE_MMAP_THRESHOLD = 4 * 1024 * 1024
WIDE_TRIM_THRESHOLD = 8 * 1024 * 1024
WIDE_UP_TO = 64
WIDE_AGAIN_AT = WIDE_UP_TO // 2  # not back and forth at every watch around the limit


class AllocatorSetting:
    """glibc's thresholds for the connections the agent holds (see WIDE_UP_TO). Does nothing
    until `enable` (the agent's process, when the environment leaves the allocator to it)."""

    def __init__(self) -> None:
        self.wide: bool | None = None  # None: not enabled

    def enable(self, wide: bool) -> None:
        """From now on follow the connections; `wide`: the setting the process has now."""
        self.wide = wide

    def follow(self, connections: int) -> None:
        if self.wide is None:
            return
        wide = connections <= (WIDE_UP_TO if self.wide else WIDE_AGAIN_AT)
        if wide == self.wide:
            return
        if wide:
            tune_allocator(mmap_threshold=WIDE_MMAP_THRESHOLD, trim_threshold=WIDE_TRIM_THRESHOLD)
        else:
            tune_allocator(mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD)
        log.info(
            "%d TLS connections to API servers: large blocks now come from %s",
            connections,
            "the heap" if wide else "mappings of their own",
        )
        self.wide = wide


ALLOCATOR = AllocatorSetting()


def tune_agent_allocator() -> bool:
    """Let the agent's connections choose glibc's thresholds (AllocatorSetting), starting with
    none; False where glibc is not used, or where the environment sets its thresholds."""
    if not tune_unless_set("agent", mmap_threshold=WIDE_MMAP_THRESHOLD, trim_threshold=WIDE_TRIM_THRESHOLD):
        return False
    ALLOCATOR.enable(wide=True)
    return True


class Releaser:
    """Calls release_free_memory once things have been quiet for `delay` seconds, and every `period`."""

    def __init__(self, delay: float = 2.0, period: float = 120.0) -> None:
        self.delay, self.period = delay, period
        self._handle: asyncio.TimerHandle | None = None
        self._periodic: asyncio.TimerHandle | None = None
        self.releases = 0

    def start(self) -> None:
        self._periodic = asyncio.get_running_loop().call_later(self.period, self._tick)

    def _tick(self) -> None:
        self._release()
        self._periodic = asyncio.get_running_loop().call_later(self.period, self._tick)

    def burst_ended(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.delay, self._release)

    def _release(self) -> None:
        self._handle = None
        if release_free_memory():
            self.releases += 1

    def cancel(self) -> None:
        for handle in (self._handle, self._periodic):
            if handle is not None:
                handle.cancel()
        self._handle = self._periodic = None
