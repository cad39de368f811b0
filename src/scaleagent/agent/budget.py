"""How many initial LISTs may run at once, overall and per account (`tasks.*Budget`).

A LIST holds a page of objects in memory while it runs; bounding concurrent lists bounds the
burst when hundreds of accounts start or relist together. 0 means unlimited.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable


class Budget:
    def __init__(self, total: int = 0, per_account: int = 0, on_idle: Callable[[], None] | None = None) -> None:
        self._total = asyncio.Semaphore(total) if total > 0 else None
        self._on_idle = on_idle
        self._per_account_size = per_account
        self._per_account: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(per_account))
        self.running = 0
        self.peak = 0

    @contextlib.asynccontextmanager
    async def slot(self, account: str) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if self._per_account_size > 0:
                await stack.enter_async_context(self._per_account[account])
            if self._total is not None:
                await stack.enter_async_context(self._total)
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                yield
            finally:
                self.running -= 1
                if self.running == 0 and self._on_idle is not None:
                    self._on_idle()

    def for_account(self, account: str):
        return lambda: self.slot(account)

    def forget(self, account: str) -> None:
        self._per_account.pop(account, None)
