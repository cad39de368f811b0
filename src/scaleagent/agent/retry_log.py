"""What an account's watches go through during an outage, said in a few lines rather than one per watch.

An API server that goes away breaks every watch of the account at once: with hundreds of kinds,
a line per watch and retry buried the log (one outage of 61 s wrote 760 lines). Here the
retries are gathered per account and cause: one line shortly after the outage begins, one a
minute while it lasts, one when every watch is established again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

log = logging.getLogger("scaleagent.agent.watches")

GATHER = 1.0  # seconds: how long to gather retries before the first line of an outage
EVERY = 60.0  # seconds: at most one line this often while an outage lasts


class RetryReport:
    def __init__(self, account: str, *, gather: float = GATHER, every: float = EVERY) -> None:
        self.account, self.gather, self.every = account, gather, every
        self.causes: dict[str, str] = {}  # watch label -> why it is retrying now
        self.retries = 0  # retries since the outage began
        self.began: float | None = None
        self.reported = False
        self._timer: asyncio.TimerHandle | None = None

    def retrying(self, label: str, cause: str) -> None:
        if self.began is None:
            self.began, self.retries, self.reported = time.monotonic(), 0, False
        self.causes[label] = cause
        self.retries += 1
        self._schedule(self.gather)

    def recovered(self, label: str) -> None:
        if self.causes.pop(label, None) is not None and not self.causes:
            self._recovered()

    def forget(self, label: str) -> None:
        """A watch that stopped (kind gone, account stopping) no longer counts."""
        self.recovered(label)

    def summary(self) -> str:
        counts = Counter(self.causes.values())
        causes = "; ".join(f"{cause} ({n})" for cause, n in counts.most_common())
        watches = "watch" if len(self.causes) == 1 else "watches"
        return f"account {self.account}: {len(self.causes)} {watches} retrying: {causes}"

    def flush(self) -> None:
        """Log the state of the outage now (the timer calls this; tests may too)."""
        self._timer = None
        if self.causes:
            log.warning("%s", self.summary())
            self.reported = True
            self._schedule(self.every)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            return
        try:
            self._timer = asyncio.get_running_loop().call_later(delay, self.flush)
        except RuntimeError:  # no loop (a unit test calling in directly): flush() is called by hand
            pass

    def _recovered(self) -> None:
        self.close()
        lasted = time.monotonic() - (self.began or time.monotonic())
        retries = "1 retry" if self.retries == 1 else f"{self.retries} retries"
        if self.reported:
            log.warning("account %s: every watch is established again after %.0f s (%s)", self.account, lasted, retries)
        else:
            log.info("account %s: watches re-established after %.1f s (%s)", self.account, lasted, retries)
        self.began = None
