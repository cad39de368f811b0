"""Run a handful of requests at once without leaving any behind."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any


async def all_or_first_error(coros: Iterable[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Like gather, but a failure cancels the rest (no orphaned requests on a closed client),
    and the failure itself is raised rather than wrapped in an ExceptionGroup, so callers keep
    catching the error types they expect.

    Not asyncio.TaskGroup: there a child's error wins over the caller's own cancellation, so an
    account stopped while one of its requests failed took its stop for a failed discovery and
    went on retrying (and Python 3.11's TaskGroup leaves the caller marked as being cancelled
    after a child fails while it waits)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # a failure, or our own cancellation: nothing is left running
        rest = [t for t in tasks if not t.done()]
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest)
        # Every failure is retrieved (asyncio logs the ones nobody read); the first is raised.
        failures = [e for t in tasks if t.done() and not t.cancelled() and (e := t.exception()) is not None]
    if failures:
        raise failures[0]
    return [t.result() for t in tasks]


def stop_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop and something swallowed the request
    (an error raised while it was being cancelled can take the cancellation's place). Retry
    loops call it before each try: a stop must end them, not pass for one more failure."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
