"""Noticing that a configuration file changed, the way Kubernetes changes a mounted ConfigMap.

The kubelet never rewrites a mounted ConfigMap's file in place: it writes the new content into a
new timestamped directory and swaps the `..data` symlink to it in one rename, so the file's path
resolves to another inode. An inotify watch on the file keeps following the old inode and misses
the swap; a watch on the directory misses a file reached through a symlink elsewhere. So the file
is polled: one `stat` (following symlinks) per period, and its bytes read and hashed only when
that stat changed. `poke()` (SIGHUP) reads it at once, whatever the stat says.

What the change means is the caller's business (`on_change` gets the new text); this module only
says that the bytes are different from the last ones handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from .configfile import ConfigError

log = logging.getLogger("scaleagent.config")

_Signature = tuple[int, int, int, int]


def _signature(path: Path) -> _Signature | None:
    try:
        st = os.stat(path)  # follows `..data` to the file the kubelet wrote last
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` as `{"a.b": 1}`: the dotted keys messages name (lists stay whole)."""
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for key, value in doc.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: doc}


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two documents (values are never returned:
    they may be secrets)."""
    a, b = flatten(old), flatten(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


class FileWatch:
    """Calls `on_change(text)` when the file's bytes change; polls every `period` seconds (0: only
    when poked). A file that disappears or cannot be read is reported once and waited for: the
    last good configuration keeps running."""

    def __init__(self, path: Path, on_change: Callable[[str], Awaitable[None]], period: float) -> None:
        self.path, self.on_change, self.period = path, on_change, period
        self._signature: _Signature | None = None
        self._digest = ""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unreadable = ""

    def start(self) -> None:
        """Start watching. The file is read once at once: what the process loaded a moment ago may
        already be out of date, and `on_change` finds nothing to do when it is not."""
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"watch {self.path}")

    def poke(self) -> None:
        """Read the file now (SIGHUP), even if its stat looks the same."""
        self._signature = None
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
            self._task = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period if self.period > 0 else None)
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # a bug in applying must not end the watch: the next change is tried
                log.exception("configuration %s: applying a change failed", self.path)

    async def check(self) -> bool:
        """Hand over the file's text if its bytes changed; whether they did."""
        signature = _signature(self.path)
        if signature is not None and signature == self._signature:
            return False
        try:
            data = await asyncio.to_thread(self.path.read_bytes)
        except OSError as e:
            why = e.strerror or str(e)
            if why != self._unreadable:
                log.error("configuration %s: cannot read it (%s); the running configuration stays", self.path, why)
                self._unreadable = why
            return False
        self._unreadable = ""
        self._signature = signature
        digest = _digest(data)
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            log.error("configuration %s: not UTF-8 text (%s); the running configuration stays", self.path, e)
            return False
        await self.on_change(text)
        return True


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class ReloadStatus:
    """How applying a configuration file went, for `/health` and `/metrics`."""

    file: str
    applied_at: float = field(default_factory=time.time)
    applied: int = 0  # changes applied
    refused: int = 0  # changes refused (the file did not load)
    last_error: str = ""  # why the file's current content is refused ("" once a good one is applied)
    restart_needed: list[str] = field(default_factory=list)  # keys changed that are read at start only

    def was_applied(self) -> None:
        self.applied += 1
        self.applied_at = time.time()

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "file": self.file,
            "appliedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.applied_at)),
            "changesApplied": self.applied,
            "changesRefused": self.refused,
        }
        if self.last_error:
            doc["refused"] = self.last_error
        if self.restart_needed:
            doc["restartNeeded"] = self.restart_needed
        return doc


class _Reloadable(Protocol):
    @property
    def reload(self) -> Any: ...  # configfile.ReloadConfig


C = TypeVar("C", bound=_Reloadable)


class ConfigReloader(ABC, Generic[C]):
    """A process's configuration file, applied again as it changes (the agent's and the hub's
    reloaders): the watch, SIGHUP, refusals and what waits for a restart are kept here; a
    subclass says how to read the text (`parse`) and what a new configuration changes (`apply`)."""

    process = "process"  # in messages: "taking effect when the <process> restarts"
    keeps_going = "the running configuration stays"

    def __init__(self, path: Path, started: C, logger: logging.Logger) -> None:
        self.path, self.started, self.running = path, started, started
        self.log = logger
        self.status = ReloadStatus(str(path))
        self._lock = asyncio.Lock()
        self.watch = FileWatch(path, self.apply_text, started.reload.period_seconds)

    def start(self) -> None:
        self.watch.start()

    async def stop(self) -> None:
        await self.watch.stop()

    def poke(self) -> None:
        """SIGHUP: read the file now."""
        self.log.info("configuration %s: SIGHUP, reading it again", self.path)
        self.watch.poke()

    @abstractmethod
    def parse(self, text: str) -> C:
        """The configuration the text holds; raises ConfigError saying what is wrong."""

    @abstractmethod
    async def apply(self, new: C) -> None:
        """Make the running process follow `new` (what it can change without a restart)."""

    async def apply_text(self, text: str) -> None:
        async with self._lock:
            try:
                new = self.parse(text)
            except ConfigError as e:
                self.status.refused += 1
                self.status.last_error = str(e)
                self.log.error("configuration %s refused, %s: %s", self.path, self.keeps_going, e)
                return
            if self.status.last_error:
                self.log.info("configuration %s loads again", self.path)
            self.status.last_error = ""
            await self.apply(new)
            self.running = new
            self.watch.period = new.reload.period_seconds

    def restart_needed(self, keys: list[str]) -> None:
        """The changed keys read at start only (said once per new list)."""
        if keys and keys != self.status.restart_needed:
            self.log.warning(
                "configuration %s: %s changed; read at start only, taking effect when the %s restarts",
                self.path,
                ", ".join(keys),
                self.process,
            )
        self.status.restart_needed = keys
