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
    done: set[asyncio.Future[Any]] = set()
    stopped: asyncio.CancelledError | None = None
    try:
        if tasks:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError as e:
        stopped = e
    # A failure, or our own cancellation: the others are cancelled, and waited for however often
    # we are cancelled meanwhile (the caller closes the client next).
    for t in tasks:
        if not t.done():
            t.cancel()
    while rest := [t for t in tasks if not t.done()]:
        try:
            await asyncio.wait(rest)
        except asyncio.CancelledError as e:
            stopped = e
    # Every failure is read (asyncio logs those nobody read).
    failures = [t for t in tasks if not t.cancelled() and t.exception() is not None]
    if stopped is not None:
        raise stopped
    if failures:
        # The failure that ended the wait, not one of the others' cancellations told as an error.
        error = next((t for t in failures if t in done), failures[0]).exception()
        assert error is not None
        raise error
    return [t.result() for t in tasks]


def stop_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop and something swallowed the request
    (an error raised while it was being cancelled can take the cancellation's place). Retry
    loops call it before each try: a stop must end them, not pass for one more failure."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
