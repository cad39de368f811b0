"""What the HTTP API reads and calls: the running hub's parts, and nothing else of the hub (its
servers, its configuration, its start and stop), so that a route cannot reach around them and a
test can build an app from the parts it has."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...configwatch import ReloadStatus
from ..accounts.credentials import CredentialsService
from ..accounts.service import AccountsService
from ..agents.link import AgentLinkService
from ..agents.registry import Registry
from ..agents.routing import OperationRouter
from ..cache.cache import Cache
from ..metrics import HubMetrics
from ..replicas.assignments import Assignments
from ..replicas.forwarding import Forwarder
from ..replicas.operations import ReplicaOperations
from ..replicas.peers import PeerSet
from ..tasks import TaskRunner
from .security import Security

__all__ = ["ApiDeps", "GuardSettings"]


@dataclass
class GuardSettings:
    """What the request guard (api/guard.py) checks Host and Origin headers against: the hub
    config's `server.allowedHosts` and `server.allowedOrigins` (lowercase), the address the HTTP
    API listens on, and this replica's base URL (how the other replicas reach it)."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    listen_address: str = "127.0.0.1"
    base_url: str = ""


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
    # Who may call and what they may do; an open hub (everyone is admin) unless given.
    security: Security = field(default_factory=Security.open)
    # With replicas (replicas.cluster other than none): who streams what, and the client to the others.
    assignments: Assignments | None = None
    forwarder: Forwarder | None = None
    # Host and Origin checks (api/guard.py); None (an app built from parts in a test): none.
    guard: GuardSettings | None = None
    # How applying the configuration file went (None: the hub does not watch one).
    reload_status: ReloadStatus | None = None
    # Latency histograms and the event rate (hub/metrics.py); each app built alone gets its own.
    metrics: HubMetrics = field(default_factory=HubMetrics)

    @property
    def replicated(self) -> bool:
        return self.assignments is not None and self.forwarder is not None
