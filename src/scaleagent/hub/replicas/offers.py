"""Dynamic-account work this replica cannot do for lack of agents, offered to the others.

A migration whose zone has no agent here is offered to each other replica in turn, which sends the
account to its own agents if it has any (reading the encrypted kubeconfig from the database: no
secret travels between replicas). A deletion or deactivation asks every other replica to stop its
agents following the accounts. Offers go through the replicas' HTTP APIs with the hop header, and
are never offered further.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from .forwarding import Forwarder, PeerUnreachable
from .peers import PeerSet

log = logging.getLogger("scaleagent.hub.replicas.offers")

OFFER_PATHS = {"migrate": "/armory/replicas/migrate", "stop": "/armory/replicas/stop"}


class Offers:
    def __init__(self, peers: PeerSet, forwarder: Forwarder, *, timeout: float) -> None:
        self.peers, self.forwarder, self.timeout = peers, forwarder, timeout

    async def offer(self, what: str, names: list[str]) -> list[str]:
        """`migrate`: the names another replica took; `stop`: warnings of agents that did not stop."""
        remaining, out = list(names), []
        for peer in self.peers.others():
            if not remaining:
                break
            try:
                answer = await self.forwarder.request(
                    peer.id,
                    peer.base_url,
                    "POST",
                    OFFER_PATHS[what],
                    body=orjson.dumps({"names": remaining}),
                    headers={"content-type": "application/json"},
                    timeout=self.timeout,
                )
            except PeerUnreachable as e:
                log.warning("could not offer %s of %s to replica %s: %s", what, ", ".join(remaining), peer.id, e)
                continue
            doc: Any = answer.json() if answer.status == 200 else {}
            if what == "migrate":
                taken = [n for n in doc.get("taken") or [] if n in remaining]
                out += taken
                remaining = [n for n in remaining if n not in taken]
            else:
                out += [str(w) for w in doc.get("warnings") or []]
        return out
