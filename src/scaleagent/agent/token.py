"""The hub token from a program (`clouddriver.auth.tokenCommand`), for tokens that rotate.

The program runs before the first connection and again whenever the token is older than
`refreshIntervalSeconds` (0: it is run once, and again only after the hub refused it). Its output
is the token (`format: raw`) or a JSON document `{"token": "..."}` (`json`, or empty: Armory's
default). The token is never logged, and neither is the program's output: a message says what was
wrong with it (its length, its shape), and the program's standard error, which is the program's
own diagnostics, is shown cut short.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field

import orjson

log = logging.getLogger("scaleagent.agent.token")

MAX_OUTPUT = 64 * 1024


class TokenCommandError(Exception):
    """The program failed, or its output is not a token; the message never holds the output."""


@dataclass
class TokenCommand:
    """Runs `command args...` for a token; `token()` gives the current one, running the program
    when it is due. `timeout` bounds one run."""

    command: str
    args: tuple[str, ...] = ()
    format: str = ""
    refresh_interval: float = 0.0
    timeout: float = 30.0
    runs: int = 0
    _token: str = field(default="", repr=False)
    _fetched: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def due(self) -> bool:
        """Whether the next `token()` runs the program."""
        if not self._token:
            return True
        return self.refresh_interval > 0 and time.monotonic() - self._fetched >= self.refresh_interval

    def invalidate(self) -> None:
        """The hub refused the token: the next `token()` runs the program again."""
        self._token = ""

    async def token(self) -> str:
        """The current token, from a new run of the program when it is due. Raises TokenCommandError."""
        async with self._lock:
            if self.due():
                self._token = await self._run()
                self._fetched = time.monotonic()
            return self._token

    async def _run(self) -> str:
        self.runs += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=os.environ.copy(),
            )
        except OSError as e:
            raise TokenCommandError(f"tokenCommand {self.command!r} cannot be run: {e.strerror or e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TokenCommandError(f"tokenCommand {self.command!r} did not finish within {self.timeout:g}s") from None
        if proc.returncode != 0:
            detail = err.decode("utf-8", "replace").strip()[:300]
            code = proc.returncode or 0
            how = f"was killed by signal {-code} ({_signal_name(-code)})" if code < 0 else f"exited with status {code}"
            raise TokenCommandError(f"tokenCommand {self.command!r} {how}" + (f": {detail}" if detail else ""))
        return self._parse(out[:MAX_OUTPUT])

    def _parse(self, out: bytes) -> str:
        try:
            text = out.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise TokenCommandError(f"tokenCommand {self.command!r}: the output is not UTF-8 text") from None
        if self.format == "raw":
            token = text
        else:
            try:
                doc = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise TokenCommandError(
                    f"tokenCommand {self.command!r}: the output is not JSON (format is json; "
                    "set format: raw for a bare token)"
                ) from None
            value = doc.get("token") if isinstance(doc, dict) else None
            if not isinstance(value, str):
                raise TokenCommandError(
                    f'tokenCommand {self.command!r}: the JSON output has no "token" string '
                    '(expected {"token": "..."})'
                )
            token = value.strip()
        if not token:
            raise TokenCommandError(f"tokenCommand {self.command!r}: the output is empty")
        if not all("!" <= c <= "~" for c in token):
            raise TokenCommandError(
                f"tokenCommand {self.command!r}: the token ({len(token)} characters) is not printable ASCII "
                "without spaces (it is sent in a header); it is not shown"
            )
        return token


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"
