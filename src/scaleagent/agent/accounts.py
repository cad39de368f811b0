"""One account's lifecycle: connect, discover, follow every readable kind, report its state.

States (as `GET /health` shows them): `connecting` (resolving credentials, reaching the API
server), `syncing` (lists running, or watches being established again after a failure: what the
hub holds may be behind the cluster), `watching` (every followed kind has delivered its snapshot
and its watch is established), `error` (with the reason; the account retries with backoff,
others are unaffected).

Accounts come from the configuration file or, at runtime, from the hub (dynamic accounts:
AddAccounts / DeleteAccounts). Both run the same way; the hub may only replace or remove its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kube.client import KubeClient, RetryPolicy
from ..kube.concurrency import all_or_first_error, stop_if_cancelled
from ..kube.credentials import load_credentials, service_account_namespace
from ..kube.discovery import KindInfo, SharedAnswers, discover, follow_once, readable, readable_in, select_kinds
from ..kube.errors import APIError, ClusterReplaced, CredentialsError, Forbidden, KubeError
from ..kube.events import ObjectEvent
from ..kube.operations import ClusterOperations
from ..kube.reflector import META_LIST, META_ONE, Backoff, Reflector
from ..kube.resources import ResourceMap
from ..protocol.states import AgentAccountState
from .budget import Budget
from .config import ConfigError, dynamic_account
from .memory import ALLOCATOR
from .retry_log import RetryReport
from .scrub import is_secret, transform_for
from .sinks import AccountAnswer, AccountDescription, DynamicAccountRequest, Sink

log = logging.getLogger("scaleagent.agent.accounts")

CONNECTING, SYNCING, WATCHING, ERROR, STOPPED, STANDBY = (
    AgentAccountState.CONNECTING,
    AgentAccountState.SYNCING,
    AgentAccountState.WATCHING,
    AgentAccountState.ERROR,
    AgentAccountState.STOPPED,
    AgentAccountState.STANDBY,
)
STANDING_BY = "standing by:"
"""How the hub's refusal begins when another agent streams the account (hub/agents/registry.py)."""
# Discovery and access reviews are bursts of small requests. Over HTTP/1.1 each request in flight
# at once is a pooled TLS connection that outlives the burst: two at a time keeps an account's
# pool small. Over HTTP/2 they are streams of the account's one connection, and cost nothing more.
REQUEST_PARALLELISM = 2
REQUEST_PARALLELISM_HTTP2 = 8
# Consecutive failed attempts after which a watch makes its account report an error.
FAILING_AFTER = 3
# While an account's state stays the same, its watches' comings and goings reach the hub together,
# this many seconds after the first of them: an account listing 47 kinds would otherwise describe
# itself 47 times in a few seconds, each a gRPC message the hub handles with a database lookup. A
# change of state goes at once.
WATCHES_DESCRIBED_EVERY = 2.0
DYNAMIC_DISABLED = "this agent does not accept dynamic accounts (dynamicAccountsEnabled is false)"


class AccountUnavailable(Exception):
    """An operation names an account this agent does not follow, or cannot reach now."""


@dataclass
class EngineSettings:
    page_size: int = 500
    discovery_interval: float = 60.0
    watch_timeout: tuple[int, int] = (300, 600)
    watch_idle_timeout: float = 90.0
    reconnect_delay: float | None = None  # kubernetes.reconnectTimeoutMs, in seconds; None: the reflector's
    retry: RetryPolicy | None = None  # kubernetes.retries (None: retries.enabled is false)
    http2: bool = True  # kubernetes.http2: HTTP/2 to servers that offer it


@dataclass
class Watch:
    """One followed (kind, namespace): its reflector and task."""

    kind: KindInfo
    namespace: str | None
    reflector: Reflector
    task: asyncio.Task[None]
    state: str = "listing"
    reason: str = ""

    @property
    def label(self) -> str:
        return _label(self.kind, self.namespace)


def _label(kind: KindInfo, namespace: str | None) -> str:
    """How a followed (kind, namespace) is named in /health."""
    return kind.qualified + (f" in {namespace}" if namespace else "")


@dataclass
class AccountRunner:
    config: Any  # AccountConfig
    settings: EngineSettings
    sink: Sink
    budget: Budget
    # Discovery and access reviews shared with the agent's other accounts of the same server and
    # identity (AccountManager gives them one): activating a hundred accounts of a cluster at once
    # asks it once per question, not a hundred times.
    shared: SharedAnswers = field(default_factory=SharedAnswers)
    # Told when the account's watches are about to open connections or have let them go: the
    # agent's allocator setting follows how many it holds (memory.AllocatorSetting).
    on_connections: Callable[[], None] | None = None
    state: str = CONNECTING
    reason: str = ""
    host: str = ""
    fingerprint: str = ""
    version: str = ""
    since: float = field(default_factory=time.time)
    events: int = 0
    relists_before: int = 0  # relists of watches since stopped, so the total never goes down
    watches: dict[tuple[KindInfo, str | None], Watch] = field(default_factory=dict)
    # Keys of the watches in WATCHING, and of those that backed off since they last were, kept as
    # the watches report their states: the account's state is derived from them at each report,
    # and a scan of every watch there made an account's start quadratic in its watches (50 kinds
    # in 100 namespaces are 5,000 watches, each reporting at least twice on the way up).
    _watching: set[tuple[KindInfo, str | None]] = field(default_factory=set)
    # (a dict: in the order they backed off, so that the reason named among several is always the same)
    _troubled: dict[tuple[KindInfo, str | None], None] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)
    discovery_failures: dict[str, str] = field(default_factory=dict)
    _aliases: dict[str, str] = field(default_factory=dict)  # kinds not followed: another delivers their objects
    _client: KubeClient | None = None
    # Connections operations still run on (operating), and those of them the account let go.
    _in_use: dict[KubeClient, int] = field(default_factory=dict)
    _let_go: set[KubeClient] = field(default_factory=set)
    _closing: set[asyncio.Task[None]] = field(default_factory=set)  # let-go connections being closed
    _operations: ClusterOperations | None = None
    _discovery_error: str = ""
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _retries: RetryReport | None = None
    # Which cluster the watches' resourceVersions belong to: (namespace, uid) of kube-system (or
    # default, when kube-system may not be read); empty when neither may be read.
    _identity: tuple[str, str] = ("", "")
    _identity_check: asyncio.Future[tuple[str, str]] | None = None
    _restarting: asyncio.Task[None] | None = None
    _not_watching_described: set[str] = field(default_factory=set)  # as the hub last heard it
    _describe_later: asyncio.TimerHandle | None = None  # _describe_watches, waiting to run
    _fresh: bool = False  # rediscover() asked: the next discovery asks the server, not the shared answers

    @property
    def retries(self) -> RetryReport:
        if self._retries is None:
            self._retries = RetryReport(self.name)
        return self._retries

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def connections(self) -> int:
        """TLS connections the account's watches hold: one each over HTTP/1.1, one for all of
        them over HTTP/2 (LIST connections, open during syncs only, are not counted)."""
        client = self._client
        if client is None or not self.watches:
            return 0
        return 1 if client.protocol == "HTTP/2" else len(self.watches)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"account {self.name}")

    async def stop(self, quietly: bool = False) -> None:
        """Stop following the account; `quietly`: without telling the hub it stopped (a state
        the caller sets at once replaces it)."""
        if self._restarting is not None and self._restarting is not asyncio.current_task():
            self._restarting.cancel()  # stopped for good: a restart under way must not start it again
        try:
            if self._task:
                self._task.cancel()
                await asyncio.wait([self._task])  # a cancellation of our caller still propagates
            await self._stop_watches(list(self.watches))
            await self._close_client()
            self.budget.forget(self.name)
        finally:
            # Even when this stop is itself cancelled: a description after it would tell the hub
            # of an account no longer followed.
            if self._describe_later is not None:
                self._describe_later.cancel()
                self._describe_later = None
        if self._closing:
            await asyncio.wait(list(self._closing))  # connections let go by operations that ended
        if not quietly:
            self._set(STOPPED, "")

    async def _reset_connection(self) -> None:
        await self._stop_watches(list(self.watches))
        await self._close_client()
        self._discovery_error = ""

    def rediscover(self) -> None:
        """Run discovery now rather than at the next interval, with answers fresh from the server
        (whoever asks for it expects a change made since to be seen)."""
        self._fresh = True
        self._wake.set()

    def _set(self, state: str, reason: str) -> None:
        if (state, reason) != (self.state, self.reason):
            if state == ERROR:
                log.warning("account %s: %s", self.name, reason)
            else:
                log.info("account %s: %s%s", self.name, state, f" ({reason})" if reason else "")
            self.state, self.reason, self.since = state, reason, time.time()
            self.sink.describe(self.description())

    def _describe_watches(self) -> None:
        """While the account's state stays the same, its watches still come and go one by one:
        the hub shows each kind's freshness, so it hears when the set not watching changes (at
        most every WATCHES_DESCRIBED_EVERY seconds)."""
        if self._describe_later is None:
            self._describe_later = asyncio.get_running_loop().call_later(
                WATCHES_DESCRIBED_EVERY, self._describe_watches_now
            )

    def _describe_watches_now(self) -> None:
        self._describe_later = None
        not_watching = {w.kind.qualified for w in self.watches.values() if w.state != WATCHING}
        if not_watching != self._not_watching_described:
            self.sink.describe(self.description())

    def description(self) -> AccountDescription:
        """The account as the hub sees it: its cluster's identity, its configuration, its state."""
        cfg = self.config
        properties = {
            key: value
            for key, value in (
                ("namespaces", list(cfg.namespaces)),
                ("omitNamespaces", list(cfg.omit_namespaces)),
                ("kinds", list(cfg.kinds)),
                ("omitKinds", list(cfg.omit_kinds)),
                ("customResourceDefinitions", list(cfg.custom_resource_definitions)),
                ("onlyNamespacedResources", cfg.only_namespaced_resources),
                ("context", cfg.context),
                ("permissions", {k: list(v) for k, v in cfg.permissions.items()}),
            )
            if value
        }
        self._not_watching_described = {w.kind.qualified for w in self.watches.values() if w.state != WATCHING}
        return AccountDescription(
            self.name,
            self.state,
            self.reason,
            self.host,
            self.fingerprint,
            self.version,
            properties,
            sorted({w.kind.qualified for w in self.watches.values()}),
            sorted(self._not_watching_described),
        )

    def operations(self) -> ClusterOperations:
        """The account's operations, on its current connection to the cluster.

        Raises AccountUnavailable, saying why, while the account has no connection. The kinds
        the account follows do not matter: operations reach whatever the credentials allow.
        """
        client = self._client
        if client is None:
            why = f"{self.state}: {self.reason}" if self.reason else self.state
            raise AccountUnavailable(f"account {self.name!r} has no connection to its cluster ({why})")
        if self._operations is None or self._operations.client is not client:
            self._operations = ClusterOperations(client, ResourceMap(client))
        return self._operations

    @contextlib.asynccontextmanager
    async def operating(self) -> AsyncIterator[ClusterOperations]:
        """`operations()` for the time of one operation: the connection it runs on stays open
        until it ends, even when the account stops or starts over meanwhile (standing by for
        another agent, a resync after a hub failover). An operation cut halfway by a restart
        would leave a deploy half applied and fail with the transport's words."""
        ops = self.operations()
        client = ops.client
        self._in_use[client] = self._in_use.get(client, 0) + 1
        try:
            yield ops
        finally:
            left = self._in_use.pop(client) - 1
            if left:
                self._in_use[client] = left
            elif client in self._let_go:
                self._let_go.discard(client)
                # Not awaited here: the operation's deadline or cancellation must neither cut the
                # close short (the client would leak) nor turn into the operation's outcome.
                self._close_later(client)

    def _close_later(self, client: KubeClient) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closed_one)

    def _closed_one(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("account %s: closing a connection it let go failed: %s", self.name, task.exception())

    def follows(self, group: str, kind: str, namespace: str) -> bool:
        """Whether a change to such an object reaches the hub through this account's watches."""
        for k, ns in self.watches:
            if k.group == group and k.kind == kind:
                if ns is None:
                    return namespace not in self.config.omit_namespaces
                if ns == namespace:
                    return True
        return False

    def set_rejected(self, reason: str) -> None:
        if reason.startswith(STANDING_BY):
            self._set(STANDBY, reason.removeprefix(STANDING_BY).strip())
        else:
            self._set(ERROR, f"rejected by the hub: {reason}")

    async def restart(self) -> None:
        """Start over from a fresh connection: every kind is listed (and so snapshotted) again."""
        await self.stop()
        self.start()

    async def run(self) -> None:
        backoff = Backoff(initial=1.0, maximum=60.0)
        while True:
            stop_if_cancelled()  # stop() waits for this loop to end
            try:
                await self._connect()
                backoff.reset()
                await self._follow()
            except (CredentialsError, KubeError) as e:
                await self._reset_connection()
                self._set(ERROR, str(e))
            except Exception as e:  # a server answering nonsense must not end the account silently
                log.exception("account %s: unexpected failure", self.name)
                await self._reset_connection()
                self._set(ERROR, f"unexpected failure: {type(e).__name__}: {e}")
            await asyncio.sleep(backoff.next())

    async def _connect(self) -> None:
        self._set(CONNECTING, "")
        cfg = self.config
        creds = await load_credentials(
            kubeconfig=cfg.kubeconfig_file,
            context=cfg.context,
            in_cluster=cfg.service_account,
            kubeconfig_content=getattr(cfg, "kubeconfig", None),
        )
        if getattr(cfg, "insecure", False):
            # Armory's account `insecure`: the API server's certificate is not verified.
            creds.ssl_context.check_hostname = False
            creds.ssl_context.verify_mode = ssl.CERT_NONE
        self._client = KubeClient(creds, http2=self.settings.http2)
        self._client.retry = self.settings.retry
        version = await self._client.get("/version")
        self.version = str((version or {}).get("gitVersion", ""))
        self.fingerprint = await self._client.server_certificate_fingerprint() or ""
        self._identity = ("", "")
        self._identity = await self._read_identity()
        self.host = creds.server  # the API server URL, as Clouddriver records it
        self.sink.describe(self.description())  # the hub checks the cluster's identity before any event

    async def _read_identity(self) -> tuple[str, str]:
        """(namespace, uid) of a namespace no one can delete: it changes only with the storage."""
        assert self._client is not None
        recorded = self._identity[0]
        for namespace in [recorded] if recorded else ["kube-system", "default"]:
            try:
                doc = await self._client.get(f"/api/v1/namespaces/{namespace}", accept=META_ONE)
            except APIError as e:
                if recorded and e.status == 404:
                    return recorded, ""  # gone: not the cluster we listed
                if recorded and e.status in (401, 403):
                    return self._identity  # may no longer be read: nothing says the cluster changed
                if e.status in (401, 403, 404):
                    continue
                raise
            return namespace, str(((doc or {}).get("metadata") or {}).get("uid") or "")
        return "", ""

    async def _confirm_cluster(self) -> None:
        """Before a watch resumes after a failure: raise ClusterReplaced when the API server now
        serves other storage (a rebuilt or restored cluster), whose resourceVersions would resume
        silently past objects we never saw. Watches resuming together share one request."""
        if not self._identity[1]:
            return
        if self._identity_check is None or self._identity_check.done():
            self._identity_check = asyncio.ensure_future(self._read_identity())
        namespace, uid = await asyncio.shield(self._identity_check)
        if uid != self._identity[1]:
            raise ClusterReplaced(
                f"the {namespace} namespace's uid changed from {self._identity[1]} to "
                f"{uid or 'none (it is gone)'}: the cluster was rebuilt or restored"
            )

    def _replaced(self, why: str) -> None:
        """Start over from a fresh connection: every kind is listed again, and the hub's snapshot
        of each replaces what it held."""
        if self._restarting is not None and not self._restarting.done():
            return
        log.warning("account %s: %s; listing every kind again", self.name, why)
        self._restarting = asyncio.get_running_loop().create_task(self.restart(), name=f"restart {self.name}")

    async def _close_client(self) -> None:
        client = self._client
        if client is None:
            return
        if self._in_use.get(client):
            self._client = None
            self._let_go.add(client)  # closed when the last operation on it ends (operating)
            return
        await client.close()  # cancelled halfway, the client stays here for the next stop to close
        self._client = None

    async def _follow(self) -> None:
        """Discover periodically and keep one reflector per readable (kind, namespace)."""
        backoff = Backoff(initial=1.0, maximum=60.0)
        while True:
            stop_if_cancelled()
            try:
                await self._reconcile()
                self._discovery_error = ""
                backoff.reset()
                wait = self.settings.discovery_interval
            except KubeError as e:
                if isinstance(e, APIError) and e.status == 401:
                    raise  # credentials no longer accepted (expired certificate, replaced token): reload them
                # Reflectors keep resuming on their own; only discovery is retried here.
                self._discovery_error = f"discovery failed: {e}"
                wait = backoff.next()
            self._update_state()
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _wanted(self, kinds: list[KindInfo]) -> list[tuple[KindInfo, str | None]]:
        cfg = self.config
        include = list(cfg.kinds) + list(cfg.custom_resource_definitions) if cfg.kinds else []
        selected, unmatched = select_kinds(kinds, include, cfg.omit_kinds, cfg.only_namespaced_resources)
        if unmatched and unmatched != self.unmatched:  # a typo ("deploymnt") would otherwise be silent
            log.warning(
                "account %s: kinds that name nothing the cluster serves: %s (they are not followed)",
                self.name,
                ", ".join(unmatched),
            )
        self.unmatched = unmatched
        selected, self._aliases = follow_once(selected)
        out: list[tuple[KindInfo, str | None]] = []
        for k in selected:
            if k.namespaced and cfg.namespaces:
                out += [(k, ns) for ns in cfg.namespaces]
            else:
                out.append((k, None))
        return out

    async def _reconcile(self) -> None:
        assert self._client is not None
        shared = None if self._fresh else self.shared
        self._fresh = False
        parallel = self._parallelism()
        found = await discover(self._client, concurrency=parallel, shared=shared)
        self.discovery_failures = found.failed
        wanted = self._wanted(found.kinds)
        checks = [key for key in wanted if key not in self.watches]
        # readable() asks list and watch at once: two requests per kind checked.
        limit = asyncio.Semaphore(max(1, parallel // 2))
        client = self._client

        async def check(key: tuple[KindInfo, str | None]) -> tuple[tuple[KindInfo, str | None], bool, str]:
            async with limit:
                ok, why = await readable(client, key[0], key[1], shared)
            return key, ok, why

        skipped = {alias: f"the same objects as {kept}, which is followed" for alias, kept in self._aliases.items()}
        for key, ok, why in await all_or_first_error(check(k) for k in checks):
            if not ok:
                skipped[_label(*key)] = why
        denied = [k for k, ns in wanted if ns is None and k.namespaced and _label(k, ns) in skipped]
        by_namespace = await self._readable_namespaces(denied, shared) if denied else {}
        for kind, namespaces in by_namespace.items():
            if namespaces:
                skipped[_label(kind, None)] += f"; followed in the namespaces it may read: {', '.join(namespaces)}"
        keep = [key for key in wanted if _label(*key) not in skipped]
        keep += [(kind, ns) for kind, namespaces in by_namespace.items() for ns in namespaces]
        # Kinds that stopped being readable since they started are found by their watches (403).
        kept = set(keep)
        for key in [k for k in self.watches if k not in kept]:
            await self._stop_watches([key])
        for key in keep:
            if key not in self.watches:
                self._start_watch(*key)
        self._connections_changed()  # before the watches started above run and connect
        self.skipped = skipped
        self.sink.describe(self.description())

    def _parallelism(self) -> int:
        """How many discovery or access-review requests may be in flight at once (see above)."""
        http2 = self._client is not None and self._client.protocol == "HTTP/2"
        return REQUEST_PARALLELISM_HTTP2 if http2 else REQUEST_PARALLELISM

    async def _readable_namespaces(
        self, kinds: list[KindInfo], shared: SharedAnswers | None = None
    ) -> dict[KindInfo, list[str]]:
        """For kinds the identity may not read cluster-wide: the namespaces where it may.

        A user allowed to read Secrets only in its own namespaces still has those followed,
        each namespace with its own watch. Needs the right to list namespaces; without it the
        kinds stay skipped, except that an account of the pod's own service account (agent mode
        with a Role) tries the namespace the service account lives in. New namespaces are found
        at the next discovery.
        """
        assert self._client is not None
        omit = set(self.config.omit_namespaces)
        try:
            listed = await self._client.get("/api/v1/namespaces", accept=META_LIST)
        except APIError as e:
            if e.status != 403:
                raise
            own = service_account_namespace() if self.config.service_account else None
            if own is None or own in omit:
                return {}
            listed = {"items": [{"metadata": {"name": own}}]}
        names = sorted(
            n for n in ((i.get("metadata") or {}).get("name") for i in listed.get("items") or []) if n and n not in omit
        )
        limit = asyncio.Semaphore(self._parallelism())
        client = self._client

        async def check(namespace: str) -> tuple[str, set[KindInfo]]:
            async with limit:
                return namespace, await readable_in(client, kinds, namespace, shared)

        out: dict[KindInfo, list[str]] = {k: [] for k in kinds}
        for namespace, allowed in await all_or_first_error(check(n) for n in names):
            for k in allowed:
                out[k].append(namespace)
        return out

    def _start_watch(self, kind: KindInfo, namespace: str | None) -> None:
        assert self._client is not None
        field_selector = ""
        if kind.namespaced and namespace is None and self.config.omit_namespaces:
            field_selector = ",".join(f"metadata.namespace!={ns}" for ns in self.config.omit_namespaces)
        key = (kind, namespace)
        reflector = Reflector(
            self._client,
            kind,
            self._deliver,
            account=self.name,
            namespace=namespace,
            budget=self.budget.for_account(self.name),
            page_size=self.settings.page_size,
            field_selector=field_selector,
            metadata_only=is_secret(kind),
            transform=transform_for(kind),
            on_state=lambda state, reason: self._on_watch_state(key, state, reason),
            watch_timeout=self.settings.watch_timeout,
            idle_timeout=self.settings.watch_idle_timeout,
            before_resume=self._confirm_cluster,
            reconnect_delay=self.settings.reconnect_delay,
        )
        task = asyncio.get_running_loop().create_task(
            self._run_watch(key, reflector), name=f"{self.name} {kind.qualified}"
        )
        self.watches[key] = Watch(kind, namespace, reflector, task)

    async def _run_watch(self, key: tuple[KindInfo, str | None], reflector: Reflector) -> None:
        try:
            await reflector.run()
        except ClusterReplaced as e:
            self._replaced(str(e))
        except Forbidden as e:
            # Rights can change: the kind is checked again at the next discovery, not retried in a loop.
            watch = self._drop_watch(key)
            if watch is not None:
                self.skipped[watch.label] = f"forbidden: {e}"
            self._update_state()
            self._connections_changed()
        except Exception as e:  # a bug must not take the account down; report it and retry at rediscovery
            log.exception("account %s: watch of %s failed", self.name, key[0].qualified)
            watch = self._drop_watch(key)
            if watch is not None:
                self.skipped[watch.label] = f"failed: {type(e).__name__}: {e}"
            self._update_state()
            self._connections_changed()

    def _on_watch_state(self, key: tuple[KindInfo, str | None], state: str, reason: str) -> None:
        watch = self.watches.get(key)
        if watch is not None:
            watch.state, watch.reason = state, reason
            if state == WATCHING:
                self._watching.add(key)
                self._troubled.pop(key, None)
            else:
                self._watching.discard(key)
            if state == "backoff":
                self._troubled[key] = None
                self.retries.retrying(watch.label, reason)
            elif state == WATCHING:
                self.retries.recovered(watch.label)
            self._update_state()
            self._describe_watches()

    def _connections_changed(self) -> None:
        if self.on_connections is not None:
            self.on_connections()

    def _drop_watch(self, key: tuple[KindInfo, str | None]) -> Watch | None:
        self._watching.discard(key)
        self._troubled.pop(key, None)
        return self.watches.pop(key, None)

    @property
    def relists(self) -> int:
        return self.relists_before + sum(w.reflector.relists for w in self.watches.values())

    def _update_state(self) -> None:
        """Derived from the parts: connection problems are set by run() before a client exists."""
        if self._client is None:
            return
        # A watch's failures grow only as it reports a backoff, and are reset before it reports
        # WATCHING: every watch failing is among the troubled.
        troubled = [self.watches[key] for key in self._troubled]
        failing = [w for w in troubled if w.reflector.failures >= FAILING_AFTER]
        if self._discovery_error:
            self._set(ERROR, self._discovery_error)
        elif failing:
            # One outage, one reason (counts and each watch's cause are in /health's `retrying`):
            # a reason that changed with every watch failing would be a new log line and a new
            # description for the hub each time. The first one stays until the account recovers.
            if self.state == ERROR and self.reason.startswith(("watch of ", "watches keep failing")):
                return
            ((cause, _),) = Counter(w.reason for w in failing).most_common(1)
            what = f"watch of {failing[0].label}" if len(failing) == 1 else "watches"
            self._set(ERROR, f"{what} keep{'s' if len(failing) == 1 else ''} failing: {cause}")
        elif (
            not self.watches
            and self.skipped
            and any(not r.startswith("the same objects") for r in self.skipped.values())
        ):
            # Nothing readable: "watching" would tell the hub and the probes all is well.
            reasons = [f"{label}: {why}" for label, why in sorted(self.skipped.items())]
            more = f" (and {len(reasons) - 3} more, in /health's skipped)" if len(reasons) > 3 else ""
            self._set(ERROR, f"may read none of the kinds it follows: {'; '.join(reasons[:3])}{more}")
        elif len(self._watching) == len(self.watches):
            # Every watch established: until then the hub may hold objects the cluster has deleted.
            if self.state != WATCHING:
                self._client.lists_done()  # every kind is listed: the LIST connections may go
            self._set(WATCHING, "")
        elif any(w.state == "backoff" for w in troubled):
            self._set(SYNCING, "watches are being established again after a failure")
        else:
            self._set(SYNCING, "")

    async def _deliver(self, events: list[ObjectEvent]) -> None:
        await self.sink.send(events)
        self.events += len(events)

    async def _stop_watches(self, keys: list[tuple[KindInfo, str | None]]) -> None:
        tasks = []
        for key in keys:
            watch = self._drop_watch(key)
            if watch is not None:
                self.retries.forget(watch.label)
                self.relists_before += watch.reflector.relists
                watch.task.cancel()
                tasks.append(watch.task)
        if tasks:
            try:
                # asyncio.wait: the watches' own cancellation stays theirs, ours still reaches us.
                await asyncio.wait(tasks)
            finally:
                self._connections_changed()

    def watch_documents(self) -> list[dict[str, Any]]:
        """`GET /watches`: each followed (kind, namespace) of this account, as it stands."""
        out = []
        for w in self.watches.values():
            r = w.reflector
            doc: dict[str, Any] = {
                "account": self.name,
                "kind": w.kind.qualified,
                "namespace": w.namespace or "",
                "scope": "namespace" if w.namespace else ("cluster" if not w.kind.namespaced else "all namespaces"),
                "state": w.state,
                "lastEventAt": r.last_event_at or None,
                "resourceVersion": r.resource_version or "",
                "relists": r.relists,
                "resumes": r.resumes,
                "failures": r.failures,
            }
            if w.reason:
                doc["error"] = w.reason
            out.append(doc)
        return out

    def health(self) -> dict[str, Any]:
        states: dict[str, int] = {}
        for w in self.watches.values():
            states[w.state] = states.get(w.state, 0) + 1
        doc: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "since": self.since,
            "host": self.host,
            "certificateFingerprint": self.fingerprint,
            "serverVersion": self.version,
            "protocol": self._client.protocol if self._client is not None else None,
            "events": self.events,
            "kinds": sorted({w.kind.qualified for w in self.watches.values()}),
            "watches": states,
            "skipped": dict(sorted(self.skipped.items())),
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.config.dynamic:
            doc["dynamic"] = True
        if self.unmatched:
            doc["unmatchedKinds"] = self.unmatched
        if self.discovery_failures:
            doc["discoveryFailures"] = self.discovery_failures
        backing_off = {w.label: w.reason for w in self.watches.values() if w.state == "backoff"}
        if backing_off:
            doc["retrying"] = backing_off
        return doc


class AccountManager:
    """The accounts an agent follows; accounts can be added and removed while it runs.

    `dynamic_enabled` (the config's `dynamicAccountsEnabled`) says whether the hub may add
    accounts. Dynamic accounts live in memory only: after a restart the agent follows its file's
    accounts, and the hub sends the dynamic ones again.
    """

    def __init__(self, settings: EngineSettings, sink: Sink, budget: Budget, *, dynamic_enabled: bool = True) -> None:
        self.settings, self.sink, self.budget = settings, sink, budget
        self.dynamic_enabled = dynamic_enabled
        self.runners: dict[str, AccountRunner] = {}
        # An answer shared for at most half a discovery interval: each periodic discovery still
        # sees the rights and kinds of the moment, give or take that.
        self.shared = SharedAnswers(ttl=min(5.0, settings.discovery_interval / 2))

    def connections(self) -> int:
        """TLS connections the accounts' watches hold (AccountRunner.connections)."""
        return sum(r.connections for r in self.runners.values())

    def _connections_changed(self) -> None:
        ALLOCATOR.follow(self.connections())

    def add(self, config: Any) -> AccountRunner:
        if config.name in self.runners:
            raise ValueError(f"account {config.name!r} is already followed")
        runner = AccountRunner(
            config, self.settings, self.sink, self.budget, self.shared, on_connections=self._connections_changed
        )
        self.runners[config.name] = runner
        runner.start()
        return runner

    async def add_dynamic(self, requests: Sequence[DynamicAccountRequest]) -> list[AccountAnswer]:
        """Start the accounts the hub sent, one answer each, in order.

        An account already added by the hub starts over with the settings given (a fresh
        connection and a full snapshot), which is also how the hub retries a failed one. Each
        account is judged alone: one refused does not stop the others.
        """
        seen: set[str] = set()
        answers = []
        for request in requests:
            answer = await self._add_dynamic(request, seen)
            if answer.accepted:
                log.info("dynamic account %s: started", answer.name)
            else:
                log.warning("dynamic account %s refused: %s", answer.name, answer.reason)
            answers.append(answer)
        return answers

    async def _add_dynamic(self, request: DynamicAccountRequest, seen: set[str]) -> AccountAnswer:
        name = request.name
        if not self.dynamic_enabled:
            return AccountAnswer(name, False, DYNAMIC_DISABLED)
        if name in seen:
            return AccountAnswer(name, False, f"account {name!r} appears more than once in this request")
        seen.add(name)
        current = self.runners.get(name)
        if current is not None and not current.config.dynamic:
            return AccountAnswer(
                name,
                False,
                f"account {name!r} is configured in this agent's configuration file; the hub cannot replace it",
            )
        try:
            config = dynamic_account(name, request.kubeconfig_base64, request.context, request.properties)
        except ConfigError as e:
            return AccountAnswer(name, False, "; ".join(e.problems))
        if current is not None:
            await self.remove(name)
        runner = self.add(config)
        self.sink.describe(runner.description())  # `connecting`: the hub hears of it before it reaches its server
        return AccountAnswer(name, True)

    async def delete_dynamic(self, names: Sequence[str]) -> list[AccountAnswer]:
        """Stop accounts the hub added. A name not followed is already where the hub wants it;
        an account of the configuration file is refused (only the file can remove it)."""
        answers = []
        for name in names:
            runner = self.runners.get(name)
            if runner is None:
                answers.append(AccountAnswer(name, True, "not followed"))
            elif not runner.config.dynamic:
                reason = f"account {name!r} is configured in this agent's configuration file; remove it there"
                log.warning("dynamic account %s: not removed: %s", name, reason)
                answers.append(AccountAnswer(name, False, reason))
            else:
                await self.remove(name)
                log.info("dynamic account %s: stopped at the hub's request", name)
                answers.append(AccountAnswer(name, True, removed=True))
        return answers

    async def remove(self, name: str) -> None:
        runner = self.runners.pop(name, None)
        if runner is not None:
            await runner.stop()

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.runners.values()))
        self.runners.clear()

    def runner(self, name: str) -> AccountRunner:
        """The account an operation names; AccountUnavailable if this agent does not follow it."""
        runner = self.runners.get(name)
        if runner is None:
            raise AccountUnavailable(f"this agent does not follow account {name!r}")
        return runner

    def descriptions(self) -> list[AccountDescription]:
        return [r.description() for r in self.runners.values()]

    async def resync(self, name: str | None = None) -> None:
        """Relist one account, or all: how the hub converges after events may have been lost."""
        runners = [self.runners[name]] if name in self.runners else [] if name else list(self.runners.values())
        await asyncio.gather(*(r.restart() for r in runners))

    async def reject(self, name: str, reason: str) -> None:
        """The hub refused the account (another cluster has its name), or another agent streams it
        (this one stands by): stop it until the next resync."""
        runner = self.runners.get(name)
        if runner is not None:
            await runner.stop(quietly=True)
            runner.set_rejected(reason)

    def health(self) -> dict[str, Any]:
        accounts = [r.health() for r in self.runners.values()]
        healthy = all(a["state"] in (WATCHING, STANDBY) for a in accounts)
        return {"status": "ok" if healthy else "degraded", "accounts": accounts}
