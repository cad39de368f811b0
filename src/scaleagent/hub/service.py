"""The hub process: the gRPC link for agents and the HTTP API for users, on one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Protocol

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ..configwatch import ReloadStatus
from ..kube.client import KubeClient
from ..kube.credentials import load_credentials
from ..protocol import SERVICE_NAME
from .accounts.credentials import CredentialsService
from .accounts.service import AccountsService
from .agents.dispatch import AccountDispatcher
from .agents.link import GRPC_LIMIT_FACTOR, AgentLinkService, add_agent_link_to_server
from .agents.registry import Registry
from .agents.routing import OperationRouter
from .api.app import create_app
from .api.deps import ApiDeps, GuardSettings
from .api.http_protocol import limited_protocol
from .api.security import Security
from .auth.access import UNRESTRICTED_WARNING, Access
from .auth.agents import AgentIdentities
from .auth.callers import Authenticator, StaticTokens, TokenReviewer
from .auth.throttle import LoginThrottle
from .cache.cache import Cache
from .config import HubConfig, is_loopback
from .metrics import HubMetrics
from .replicas.assignments import Assignments
from .replicas.forwarding import Forwarder
from .replicas.offers import Offers
from .replicas.operations import ReplicaOperations
from .replicas.peers import Peer, PeerSet
from .store import Store, StoreError
from .store.shared import SharedStore
from .tasks import TaskRunner

log = logging.getLogger("scaleagent.hub")
logging.getLogger("alembic").setLevel(logging.WARNING)  # it narrates every start; we log what matters

# Every cached object is one object the garbage collector tracks: with a million of them a full
# collection stops the event loop for about a second (bench/hub_cache_memory.py). Cached objects
# are freed by reference counting and hold no cycles, so they are moved out of the collector's
# sight at this interval, after a young-generation collection has cleared recent cyclic garbage.
GC_FREEZE_SECONDS = 30.0
# Collections of the young generation after this many new tracked objects (CPython: 700), of the
# middle one after 20 of those, of everything after 100 of those: at a few tracked objects per
# event a hub ran one young collection every few hundred events. A young collection of 50,000
# objects takes a few milliseconds.
GC_THRESHOLDS = (50_000, 20, 100)


class _Server(uvicorn.Server):
    """uvicorn without its signal handling: the hub's command owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Hub:
    """A running hub: `hub = await Hub.open(config)` opens the database and builds every part with
    what it needs, in dependency order; `await hub.start()` starts them and listens; `stop()`
    undoes both."""

    def __init__(self, config: HubConfig, store: Store) -> None:
        """Use `Hub.open`: the parts need the store, which is opened asynchronously."""
        self.config = config
        self.replica = config.server.replica_name or socket.gethostname()
        self.store = store
        self.cache = Cache()
        self.metrics = HubMetrics()
        self.registry = Registry(
            self.cache, grace_seconds=config.sessions.grace_seconds, replica=self.replica, store=store
        )
        self.dispatcher = AccountDispatcher(self.registry)
        self.router = OperationRouter(self.registry, self.metrics)
        r = config.replicas
        self.peers = PeerSet(Peer(self.replica, r.base_url or _own_base_url(config)))
        self.shared = SharedStore(store)
        self.forwarder: Forwarder | None = None
        self.assignments: Assignments | None = None
        if r.enabled:
            self.forwarder = Forwarder(self.replica, r.token.get_secret_value())
            self.assignments = Assignments(
                self.shared,
                self.peers,
                self.forwarder,
                period=r.heartbeat.period_seconds,
                missed_periods=r.heartbeat.missed_periods,
            )
            self.assignments.attach(self.registry)
            self.assignments.on_dead.append(self._replicas_died)
        self.operations = ReplicaOperations(self.router, self.registry, self.assignments, self.forwarder)
        self.discovery: PeerDiscovery | None = _discovery(config, self.peers)
        self.link = AgentLinkService(
            self.registry,
            self.cache,
            dispatcher=self.dispatcher,
            router=self.router,
            token=config.auth.token.get_secret_value(),
            max_message_bytes=config.grpc.max_message_bytes,
            identities=AgentIdentities.from_auth(config.auth),
            metrics=self.metrics,
        )
        self.tasks = TaskRunner(
            self.operations,
            self.cache,
            operation_wait_ms=config.operations.operation_wait_ms,
            max_tasks=config.operations.max_tasks,
            shared=self.shared,
            replica=self.replica,
        )
        self.accounts = AccountsService.for_hub(config, store, self.registry, self.dispatcher)
        if self.forwarder is not None:
            offers = Offers(self.peers, self.forwarder, timeout=config.dynamic_accounts.agent_timeout_seconds + 10)
            self.accounts.offer = offers.offer
        self.credentials = CredentialsService(store, self.accounts, config=config.dynamic_accounts)
        self.security = _security(config)
        # The Host and Origin rules, changed in place when the file changes (hub/reload.py).
        self.guard = GuardSettings(
            config.server.allowed_hosts,
            config.server.allowed_origins,
            config.server.http_address,
            self.peers.me.base_url,
        )
        self.reload_status: ReloadStatus | None = None  # set when the hub watches its file
        self.grpc_port = 0
        self.http_port = 0
        self._grpc: grpc.aio.Server | None = None
        self._http: _Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._gc_task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: HubConfig) -> Hub:
        """Open the database (raises StoreError) and build the hub on it; the store is closed again
        if building fails (a bad encryption key, say)."""
        store = await Store.open(config.database.url)
        try:
            return cls(config, store)
        except BaseException:
            await store.close()
            raise

    @property
    def http_url(self) -> str:
        scheme = "https" if self.config.server.http_tls.enabled else "http"
        return f"{scheme}://{_url_host(self.config.server.http_address)}:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"{_url_host(self.config.server.host)}:{self.grpc_port}"

    def api_deps(self) -> ApiDeps:
        return ApiDeps(
            replica=self.replica,
            registry=self.registry,
            cache=self.cache,
            accounts=self.accounts,
            credentials=self.credentials,
            tasks=self.tasks,
            router=self.router,
            link=self.link,
            peers=self.peers,
            operations=self.operations,
            assignments=self.assignments,
            forwarder=self.forwarder,
            security=self.security,
            guard=self.guard,
            reload_status=self.reload_status,
            metrics=self.metrics,
        )

    async def start(self) -> None:
        sock = self._bind_http()
        try:
            held = await self.assignments.start() if self.assignments is not None else None
            await self.registry.start(held)
            await self.tasks.start()
            await self.accounts.start()
            await self.credentials.start()
            if self.discovery is not None:
                await self.discovery.start()
            await self._start_grpc()
        except BaseException:
            sock.close()
            raise
        self._serve_http(sock)
        # A started hub's modules, app and settings live as long as it does: frozen at once, the
        # first burst of agents' objects does not bring on full collections that walk them all
        # (38% of a hub's time in a profile of its first 200,000 events), and the collector runs
        # less often (18% more at CPython's default of a young collection per 700 allocations).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        self._gc_task = asyncio.get_running_loop().create_task(_freeze_periodically(), name="gc freeze")
        self._say_who_may_call()
        await self._name_unrestricted_accounts()
        log.info(
            "hub %s: gRPC on %s (%s), HTTP on %s",
            self.replica,
            self.grpc_target,
            "mTLS" if self.config.tls.client_ca_file else "TLS" if self.config.tls.enabled else "plaintext",
            self.http_url,
        )

    def _say_who_may_call(self) -> None:
        c = self.config
        methods = c.auth.methods(c.server.http_tls)
        if methods:
            log.info("HTTP API: callers log in with %s", ", ".join(methods))
        elif is_loopback(c.server.http_address):
            log.info("HTTP API: no login configured; open to every caller on this machine (loopback)")
        else:
            log.warning(
                "HTTP API: OPEN to anyone who reaches %s (auth.anonymous: true): every caller may read every "
                "cluster and deploy; configure a login method (docs/security.md)",
                c.server.http_address,
            )
        if c.auth.agents.enabled:
            log.info("agents: identities configured; each agent may serve only its zones and accounts")
            if c.auth.token.get_secret_value():
                log.warning(
                    "agents: auth.token is set but admits no agent on its own now that identities are configured "
                    "(auth.agents): give each agent its identity's token, or remove auth.token"
                )
        elif not c.auth.token.get_secret_value() and not c.tls.client_ca_file:
            log.warning(
                "agents: no token and no client certificates: anyone who reaches the gRPC port may connect as an agent"
            )

    async def _name_unrestricted_accounts(self) -> None:
        """With logins on and no auth.defaultPermissions, an account without permissions of its
        own is open to every logged-in caller: the ones known at start are named, and the others
        when first asked about (auth/access.py)."""
        if not self.config.http_auth or any(self.config.auth.default_permissions.values()):
            return
        try:
            rows = await self.store.list_accounts()
        except StoreError as e:
            log.warning("cannot list the accounts without permissions (%s)", e)
            return
        names = sorted(r.name for r in rows if not _has_permissions(r.properties.get("permissions")))
        if names:
            shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
            log.warning("accounts %s: each %s", shown, UNRESTRICTED_WARNING)

    async def _start_grpc(self) -> None:
        c = self.config
        options = [
            ("grpc.max_receive_message_length", GRPC_LIMIT_FACTOR * c.grpc.max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),  # a second hub on the same port must fail, not share it
            # Agents ping every keepAliveHeartbeatSeconds (10 s by default, 1 s at least): allow it,
            # or gRPC answers "too many pings" and cuts the link (the default minimum is 5 minutes).
            ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # grpc.aio takes new streams from gRPC one at a time, each a turn of the event loop;
            # meanwhile gRPC queues them, and past its default of 1,000 queued it refuses new ones
            # at random (all past 3,000), unseen by the hub and unlogged: agents connecting at once
            # were turned away while the hub had room. Queue up to grpc.maxPendingCalls instead.
            ("grpc.server.max_pending_requests", c.grpc.max_pending_calls),
            ("grpc.server.max_pending_requests_hard_limit", c.grpc.max_pending_calls),
            # A connection that has not completed TLS and HTTP/2's preface and SETTINGS by then is
            # closed (gRPC's default: 120 s): connections that never speak cannot pile up.
            ("grpc.server_handshake_timeout_ms", int(c.grpc.handshake_seconds * 1000)),
        ]
        if c.grpc.keep_alive_seconds > 0:
            options += [
                ("grpc.keepalive_time_ms", int(c.grpc.keep_alive_seconds * 1000)),
                ("grpc.keepalive_timeout_ms", 20_000),
            ]
        server = grpc.aio.server(options=options)
        add_agent_link_to_server(self.link, server)
        checks = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checks, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
        )
        address = f"{_url_host(c.server.host)}:{c.server.grpc_port}"
        if c.tls.enabled:
            assert c.tls.cert_file is not None and c.tls.key_file is not None
            creds = grpc.ssl_server_credentials(
                [(c.tls.key_file.read_bytes(), c.tls.cert_file.read_bytes())],
                root_certificates=c.tls.client_ca_file.read_bytes() if c.tls.client_ca_file else None,
                require_client_auth=c.tls.client_ca_file is not None,
            )
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        await server.start()
        for name in ("", SERVICE_NAME):
            await checks.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._grpc, self.grpc_port = server, port

    def _bind_http(self) -> socket.socket:
        """Bound first, so that the port (and with it this replica's base URL) is known before the
        replica announces itself; requests wait in the backlog until `_serve_http`."""
        c = self.config
        family = socket.AF_INET6 if ":" in c.server.http_address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((c.server.http_address, c.server.http_port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.setblocking(False)
        self.http_port = sock.getsockname()[1]
        if not c.replicas.base_url:
            self.peers.me = Peer(self.replica, _own_base_url(c, self.http_port))
            self.peers.replace([])
        return sock

    def _serve_http(self, sock: socket.socket) -> None:
        app = create_app(self.api_deps())
        tls = self.config.server.http_tls
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            http=limited_protocol(
                request_head_seconds=self.config.http.request_head_seconds,
                max_connections=self.config.http.max_connections,
            ),
            timeout_keep_alive=self.config.http.keep_alive_seconds,
            ssl_certfile=tls.cert_file,
            ssl_keyfile=tls.key_file,
            ssl_ca_certs=str(tls.client_ca_file) if tls.client_ca_file else None,
            # Asked for, not required: callers with a token connect without one.
            ssl_cert_reqs=ssl.CERT_OPTIONAL if tls.client_ca_file else ssl.CERT_NONE,
        )
        self._http = _Server(config)
        # The socket already listens: connections wait in its backlog until uvicorn accepts them.
        self._http_task = asyncio.get_running_loop().create_task(self._http.serve(sockets=[sock]), name="hub http")

    async def stop(self) -> None:
        if self.assignments is not None:
            # Sessions end from here on; this replica's rows are freed all at once when it leaves.
            self.assignments.leaving()
        if self._gc_task is not None:
            self._gc_task.cancel()
        if self._http is not None and self._http_task is not None:
            self.cache.close_subscriptions()  # open watch streams end now rather than at the shutdown timeout
            self._http.should_exit = True
            await asyncio.wait([self._http_task])
        await self.tasks.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self.discovery is not None:
            await self.discovery.stop()
        await self.credentials.stop()
        await self.accounts.stop()
        await self.registry.stop()
        if self.assignments is not None:
            await self.assignments.stop()
        if self.forwarder is not None:
            await self.forwarder.close()
        await self.security.close()
        await self.store.close()

    async def _replicas_died(self, replicas: list[str]) -> None:
        """Replicas whose heartbeat stopped: their running tasks end as failed, saying so."""
        await self.tasks.end_tasks_of(
            replicas, f"hub replica {', '.join(replicas)} stopped (its heartbeat stopped in the database)"
        )


async def _freeze_periodically() -> None:
    while True:
        await asyncio.sleep(GC_FREEZE_SECONDS)
        gc.collect(1)
        gc.freeze()


class PeerDiscovery(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class _StaticPeers:
    """`replicas.cluster: static`: the peers listed in the configuration, taken as ready."""

    def __init__(self, config: HubConfig, peers: PeerSet) -> None:
        self.listed = [Peer(p.id, p.base_url) for p in config.replicas.static]
        self.peers = peers

    async def start(self) -> None:
        self.peers.replace(self.listed)

    async def stop(self) -> None:
        pass


def _discovery(config: HubConfig, peers: PeerSet) -> PeerDiscovery | None:
    r = config.replicas
    if r.cluster == "static":
        return _StaticPeers(config, peers)
    if r.cluster == "kubernetes":
        from .replicas.discovery import EndpointsDiscovery, KubernetesDiscoverySettings

        k = r.kubernetes
        settings = KubernetesDiscoverySettings(
            kubeconfig_file=k.kubeconfig_file,
            verify_ssl=k.verify_ssl,
            namespace=k.namespace,
            http_port_name=k.http_port_name,
            service_name_prefix=k.clouddriver_service_name_prefix,
            use_dns=k.use_dns,
            domain_name=k.domain_name,
            fail_fast=k.fail_fast,
        )
        return EndpointsDiscovery(settings, peers.replace, me_id=peers.me.id)
    return None


def _security(config: HubConfig) -> Security:
    """The HTTP API's logins and rules, from `auth` (and `server.httpTls.clientCaFile`)."""
    a = config.auth
    access = Access(
        admin_users=a.admins.users,
        admin_groups=a.admins.groups,
        default_permissions=a.default_permissions,
        cache_seconds=a.decision_cache_seconds,
    )
    static = StaticTokens(a.static_tokens_file) if a.static_tokens_file is not None else None
    reviewer = None
    if a.token_review.enabled:
        k = config.kubernetes

        async def client() -> KubeClient:
            if k.kubeconfig_file is not None:
                credentials = await load_credentials(kubeconfig=k.kubeconfig_file, context=k.context)
            else:
                credentials = await load_credentials(in_cluster=True)
            return KubeClient(credentials, timeout=10.0)

        reviewer = TokenReviewer(client, audiences=a.token_review.audiences, cache_seconds=a.token_review.cache_seconds)
    authenticator = Authenticator(
        static_tokens=static,
        token_reviewer=reviewer,
        client_certificates=config.server.http_tls.client_ca_file is not None,
        is_admin=access.is_admin,
    )
    throttle = LoginThrottle(limit=a.failed_logins.limit, window_seconds=a.failed_logins.window_seconds)
    return Security(authenticator, access, config.replicas.token.get_secret_value(), throttle)


def _own_base_url(config: HubConfig, port: int | None = None) -> str:
    """How the other replicas reach this one when `replicas.baseUrl` is not set: the HTTP address,
    or this host's address when the API listens on every interface (a pod's IP in Kubernetes)."""
    host = config.server.http_address
    if host in ("0.0.0.0", "::", ""):
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    return f"http://{_url_host(host)}:{port if port is not None else config.server.http_port}"


def _has_permissions(permissions: object) -> bool:
    return isinstance(permissions, dict) and any(permissions.values())


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
