"""Where the watch engine hands its events: the hub link (link.py), stdout, or a counter."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import orjson

from ..kube.events import ObjectEvent


@dataclass
class AccountDescription:
    """What the hub is told about an account: which cluster it is, and how its watch is going."""

    name: str
    state: str
    reason: str = ""
    host: str = ""
    fingerprint: str = ""
    version: str = ""
    properties: dict[str, Any] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)
    # Of `kinds`, those whose watch is not established now: the hub's copy of them may be behind.
    kinds_not_watching: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DynamicAccountRequest:
    """One account of the hub's AddAccounts, as it arrived: validated by the account manager."""

    name: str
    kubeconfig_base64: str = field(default="", repr=False)  # credentials: never shown
    context: str = ""
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AccountAnswer:
    """The agent's answer for one account of an AddAccounts or DeleteAccounts.

    `removed` says that a followed account was stopped: the hub is then told (AccountRemoved),
    before the answer, so that when it reads the answer it has already let the account go.
    """

    name: str
    accepted: bool
    reason: str = ""
    removed: bool = False


class Sink(Protocol):
    async def send(self, events: list[ObjectEvent]) -> None:
        """Take a batch. Awaiting it is the backpressure: a slow consumer slows the watches."""

    def describe(self, account: AccountDescription) -> None:
        """An account's identity or state changed; called before its first events are sent."""

    def removed(self, name: str) -> None:
        """The agent stopped following an account on purpose (its file no longer names it)."""


def event_json(e: ObjectEvent) -> bytes:
    doc: dict[str, Any] = {
        "account": e.account,
        "type": e.type,
        "group": e.group,
        "version": e.version,
        "kind": e.kind,
        "namespace": e.namespace,
        "name": e.name,
        "uid": e.uid,
        "resourceVersion": e.resource_version,
    }
    if e.object is not None:
        doc["object"] = orjson.Fragment(e.object)  # the object's own bytes, not re-encoded
    return orjson.dumps(doc)


class PrintSink:
    """One JSON line per event on stdout (`--print-events`): for debugging and for piping into jq."""

    def __init__(self, out: BinaryIO | None = None) -> None:
        self.out = out or sys.stdout.buffer

    def describe(self, account: AccountDescription) -> None:
        pass

    def removed(self, name: str) -> None:
        pass

    async def send(self, events: list[ObjectEvent]) -> None:
        self.out.write(b"".join(event_json(e) + b"\n" for e in events))
        self.out.flush()


class CountingSink:
    """Counts and drops: what the agent does with no hub to send to, and what benchmarks measure."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.bytes = 0

    def describe(self, account: AccountDescription) -> None:
        pass

    def removed(self, name: str) -> None:
        pass

    async def send(self, events: list[ObjectEvent]) -> None:
        for e in events:
            self.counts[e.type] += 1
            if e.object is not None:
                self.bytes += len(e.object)
