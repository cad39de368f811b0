"""When a test hangs, say what its event loop was waiting on.

pytest-timeout dumps the threads' stacks, and an asyncio hang shows there only as a loop asleep
in `select`. A little before its deadline this plugin reads every task of the loops still
running and keeps each one's innermost frames; the run's summary ends with them, so the part
of a CI log one reads first names the await that never returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Generator, Iterator
from types import AsyncGeneratorType, FrameType

import pluggy
import pytest

LEAD = 20.0  # seconds before pytest-timeout's deadline
FRAMES = 4  # innermost frames kept per task

_reports: list[tuple[str, list[str]]] = []


def _frames(awaitable: object) -> list[FrameType]:
    """The frames of a chain of awaits, outermost first (Task.get_stack stops at an async
    generator, as in a fixture's teardown)."""
    frames = []
    while awaitable is not None:
        frame = next(
            (getattr(awaitable, a) for a in ("cr_frame", "ag_frame", "gi_frame") if hasattr(awaitable, a)), None
        )
        if frame is not None:
            frames.append(frame)
        awaitable = next(
            (getattr(awaitable, a) for a in ("cr_await", "ag_await", "gi_yieldfrom") if hasattr(awaitable, a)), None
        )
    return frames


def _line(name: str, frames: list[FrameType]) -> str:
    where = " <- ".join(
        f"{f.f_code.co_name} {'/'.join(f.f_code.co_filename.rsplit('/', 2)[-2:])}:{f.f_lineno}"
        for f in reversed(frames[-FRAMES:])
    )
    return f"{name}: {where or 'not started'}"


def _snapshot() -> list[str]:
    objects = gc.get_objects()
    loops = [o for o in objects if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]
    lines = []
    for loop in loops:
        # The loop is asleep (that is the hang), so its set of tasks is not changing; read it
        # again in case it was.
        for _ in range(5):
            with contextlib.suppress(RuntimeError):
                lines += sorted(_line(t.get_name(), _frames(t.get_coro())) for t in asyncio.all_tasks(loop))
                break
    # A task awaiting an async generator (a fixture's teardown) shows no further: the generator
    # itself says where it waits.
    lines += [
        _line(f"async generator {g.__qualname__}", _frames(g))
        for g in objects
        if isinstance(g, AsyncGeneratorType) and g.ag_running
    ]
    return lines or ["(no event loop was running)"]


@contextlib.contextmanager
def _watching(item: pytest.Item) -> Iterator[list[tuple[str, list[str]]]]:
    """Snapshot the loops if this phase is still running LEAD seconds before its timeout (which
    pytest-timeout counts for setup, call and teardown one by one)."""
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    taken: list[tuple[str, list[str]]] = []
    timer = None
    if timeout > LEAD:
        timer = threading.Timer(timeout - LEAD, lambda: taken.append((item.nodeid, _snapshot())))
        timer.daemon = True
        timer.start()
    try:
        yield taken
    finally:
        if timer is not None:
            timer.cancel()


def _phase(item: pytest.Item) -> Generator[None, pluggy.Result[None], None]:
    with _watching(item) as taken:
        outcome = yield
    if taken and outcome.excinfo is not None:  # it did time out (or failed late): keep what it waited on
        _reports.extend(taken)


pytest_runtest_setup = pytest.hookimpl(hookwrapper=True)(_phase)
pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(_phase)
pytest_runtest_teardown = pytest.hookimpl(hookwrapper=True)(_phase)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _reports:
        return
    terminalreporter.section(f"asyncio tasks of tests still running {LEAD:g}s before their timeout")
    for nodeid, lines in _reports:
        terminalreporter.write_line(nodeid)
        for line in lines:
            terminalreporter.write_line(f"  {line}")
