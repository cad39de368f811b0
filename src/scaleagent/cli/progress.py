"""Progress of long work on stderr, for a person watching a terminal, and silence for a pipe.

A `get --all-accounts` over hundreds of accounts, or a rollout that takes minutes, looks hung
without a sign of life; but a script that reads stderr must not find progress lines in it. So
progress is drawn only when stderr is a terminal, on one line that is rewritten (`\\r`) and erased
before anything else is printed.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """One line of progress on `err` when it is a terminal; nothing otherwise.

    `update(text)` replaces the line; with `ticking=True` the elapsed time is redrawn every second
    by a thread, so a wait with no news still shows that time passes. Use it as a context
    manager: the line is erased at the end, before the command prints its result.
    """

    def __init__(self, err: TextIO, *, ticking: bool = False) -> None:
        isatty = getattr(err, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.err = err
        self.text = ""
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled and ticking:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            if not self.enabled or not self.text:
                return
            elapsed = int(time.monotonic() - self.started)
            self.err.write(f"\r\x1b[K{self.text} ({elapsed}s)")
            self.err.flush()

    def update(self, text: str) -> None:
        """Show `text` as the progress line (a no-op unless stderr is a terminal)."""
        if not self.enabled:
            return
        self.text = text
        self._draw()

    def clear(self) -> None:
        """Erase the line, so what is printed next starts at the left margin."""
        with self._lock:
            if self.enabled and self.text:
                self.err.write("\r\x1b[K")
                self.err.flush()
            self.text = ""

    def close(self) -> None:
        self._stop.set()
        self.clear()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
