"""Run a handful of requests at once without leaving any behind."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any


async def all_or_first_error(coros: Iterable[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Like gather, but a failure cancels the rest (no orphaned requests on a closed client),
    and the failure itself is raised rather than wrapped in an ExceptionGroup, so callers keep
    catching the error types they expect."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:
        first = eg.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [t.result() for t in tasks]
