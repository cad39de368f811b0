"""The live set of hub replicas, as discovery reports it (Endpoints, a static list, or only us).

A replica is known by the id it gives itself (its pod name in Kubernetes, `server.replicaName`
elsewhere) and reached at its HTTP base URL. The set is kept in memory and replaced whole by the
discovery source on every change: nothing polls it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("scaleagent.hub.replicas")


@dataclass(frozen=True)
class Peer:
    """One hub replica: what `GET /armory/clouddrivers` shows for it."""

    id: str
    base_url: str  # e.g. http://10.0.15.246:7002, no trailing slash
    ready: bool = True
    last_updated: float = field(default_factory=time.time)

    def document(self) -> dict[str, Any]:
        return {
            "baseUrl": self.base_url,
            "id": self.id,
            "lastUpdated": _iso_ms(self.last_updated),
            "ready": self.ready,
        }


class PeerSet:
    """The replicas discovery knows now (this one included), by id."""

    def __init__(self, me: Peer) -> None:
        self.me = me
        self._peers: dict[str, Peer] = {me.id: me}
        self.listeners: list[Callable[[list[Peer]], None]] = []

    def replace(self, peers: Iterable[Peer]) -> None:
        """Discovery's whole view; this replica stays in it whatever discovery says of it."""
        found = {p.id: p for p in peers}
        found.setdefault(self.me.id, self.me)
        if found == self._peers:
            return
        if {p.id: p.ready for p in found.values()} != {p.id: p.ready for p in self._peers.values()}:
            log.info(
                "hub replicas: %s",
                ", ".join(
                    f"{p.id}{'' if p.ready else ' (not ready)'}" for p in sorted(found.values(), key=lambda p: p.id)
                ),
            )
        self._peers = found
        for listener in self.listeners:
            listener(self.all())

    def all(self) -> list[Peer]:
        return sorted(self._peers.values(), key=lambda p: p.id)

    def others(self, ready_only: bool = True) -> list[Peer]:
        """The other replicas (only those ready to take requests, unless told otherwise)."""
        return [p for p in self.all() if p.id != self.me.id and (p.ready or not ready_only)]

    def get(self, replica_id: str) -> Peer | None:
        return self._peers.get(replica_id)


def _iso_ms(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
