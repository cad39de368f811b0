"""What the HTTP API reads and calls: the running hub's parts, and nothing else of the hub (its
servers, its configuration, its start and stop), so that a route cannot reach around them and a
test can build an app from the parts it has."""

from __future__ import annotations

from dataclasses import dataclass

from ..accounts.credentials import CredentialsService
from ..accounts.service import AccountsService
from ..agents.link import AgentLinkService
from ..agents.registry import Registry
from ..agents.routing import OperationRouter
from ..cache.cache import Cache
from ..replicas.assignments import Assignments
from ..replicas.forwarding import Forwarder
from ..replicas.operations import ReplicaOperations
from ..replicas.peers import PeerSet
from ..tasks import TaskRunner

__all__ = ["ApiDeps"]


@dataclass(frozen=True)
class ApiDeps:
    replica: str
    registry: Registry
    cache: Cache
    accounts: AccountsService
    credentials: CredentialsService
    tasks: TaskRunner
    router: OperationRouter
    link: AgentLinkService  # its count of refused streams, for /metrics
    peers: PeerSet
    operations: ReplicaOperations
    # With replicas (replicas.cluster other than none): who streams what, and the client to the others.
    assignments: Assignments | None = None
    forwarder: Forwarder | None = None

    @property
    def replicated(self) -> bool:
        return self.assignments is not None and self.forwarder is not None
