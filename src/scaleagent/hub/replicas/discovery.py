"""Find the sibling hub replicas by watching the Endpoints of the hub's own Service.

This is what Armory's Clouddriver plugin does ("Communication With Clouddriver Instances in
Kubernetes"): at start it checks `kubectl auth can-i list endpoints` and `... watch endpoints` in
its namespace, lists the Endpoints there, and keeps them up to date with a watch (no polling).
Every Endpoints object whose name starts with a prefix, every address of a subset that has a port
named `http`, is a replica: its id is the pod's name, its base URL `http://<pod IP>:<port>`, and
it is ready while the address is in `addresses` (not `notReadyAddresses`), which is the Ready
column of `kubectl get pods`.

The settings mirror Armory's `kubesvc.cluster-kubernetes.*` keys (armory/docs,
`content/en/plugins/scale-agent/release-notes/agent-plugin/agent-plug-v-0-10-24.md`, `-0-10-50.md`,
`-0-10-52.md`, `static/csv/agent/agent-plugin-config-options.csv`):

- `kubeconfigFile` (`kubeconfig_file`): the kubeconfig to reach the API server with; unset, the
  service account mounted in the pod (in-cluster).
- `verifySsl` (`verify_ssl`): verify the API server's certificate (default true).
- `namespace`: where to watch Endpoints; unset, the pod's own namespace (the service account
  directory's `namespace` file), else the kubeconfig context's namespace, else `default`.
- `httpPortName` (`http_port_name`): the name of the Service port that carries the HTTP API
  (Armory: "Name of the port in the clouddriver Kubernetes Service selector for port 7002"); it
  tells that port from the gRPC port agents connect to. Default `http`.
- `clouddriverServiceNamePrefix` (`service_name_prefix`): a prefix, not a name, so that several
  Services (HA set-ups) all match. Default `spin-clouddriver`.
- `useDNS` (`use_dns`) and `domainName` (`domain_name`): "use DNS URLs for communication between
  clouddrivers" instead of pod IPs; the domain defaults to `cluster.local`. Armory's docs do not
  spell the name out; here it is the address's own DNS record: `<hostname>.<service>.<namespace>.svc.<domain>`
  when the Endpoints address has a `hostname` (a pod with `hostname` and `subdomain` behind a
  headless Service, a StatefulSet's pods), else the pod record `<a-b-c-d>.<namespace>.pod.<domain>`
  (the IP with dashes; CoreDNS answers it in its default `pods insecure` mode).
- `failFast` (`fail_fast`): Armory 0.10.52: "Startup fails purposely at start when the endpoint
  discovery fails to get the clouddriver replicas", turned off with `failFast: false`. Here:
  `start()` raises `DiscoveryError` when the credentials cannot be loaded, the access check
  fails, or the first list does not succeed. Off (the default here; Armory's default became true),
  each of these is logged as an error and the hub carries on with no peers (one replica) while
  discovery keeps retrying in the background, so peers appear once the cause is fixed.

Only Endpoints are watched: every server up to 1.32 serves them (1.33 deprecates them with a
warning), the suite's real control plane (1.20) serves EndpointSlices only as v1beta1 and kubesim
not at all. EndpointSlices (`discovery.k8s.io/v1`, label `kubernetes.io/service-name`) are the
next step once Endpoints go away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DIR_ENV, Credentials, load_credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.errors import APIError, ClusterReplaced, CredentialsError, Forbidden, KubeError
from scaleagent.kube.events import ADDED, DELETED, MODIFIED, SNAPSHOT_BEGIN, SNAPSHOT_END, ObjectEvent
from scaleagent.kube.reflector import Backoff, Reflector

from .peers import Peer

log = logging.getLogger("scaleagent.hub.replicas.discovery")

ENDPOINTS = KindInfo("", "v1", "Endpoints", "endpoints", True)
VERBS = ("list", "watch")
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
FIRST_LIST_TIMEOUT = 30.0  # seconds start() waits for the first list before going on without it
ACCOUNT = "hub replicas"  # how the reflector names this watch in its messages


@dataclass(frozen=True)
class KubernetesDiscoverySettings:
    """Armory's `kubesvc.cluster-kubernetes.*`: see the module's docstring for each."""

    kubeconfig_file: Path | None = None
    verify_ssl: bool = True
    namespace: str | None = None
    http_port_name: str = "http"
    service_name_prefix: str = "spin-clouddriver"
    use_dns: bool = False
    domain_name: str = "cluster.local"
    fail_fast: bool = False


class DiscoveryError(Exception):
    """Replica discovery cannot work; the message says what is missing and how to check it.

    `missing` names the verbs on endpoints the identity lacks, when that is the cause.
    """

    def __init__(self, message: str, *, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


# -- Endpoints to peers ------------------------------------------------------------------------

# What one address says of a replica: (id, base URL, ready).
Seen = tuple[str, str, bool]


def _host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


def _base_url(
    address: dict[str, Any], port: int, service: str, namespace: str, settings: KubernetesDiscoverySettings
) -> str:
    ip = str(address.get("ip") or "")
    if not settings.use_dns:
        return f"http://{_host(ip)}:{port}"
    domain = settings.domain_name.strip(".")
    hostname = address.get("hostname")
    if hostname:
        return f"http://{hostname}.{service}.{namespace}.svc.{domain}:{port}"
    dashed = ip.replace(".", "-").replace(":", "-")
    return f"http://{dashed}.{namespace}.pod.{domain}:{port}"


def _address_id(address: dict[str, Any]) -> str:
    ref = address.get("targetRef") or {}
    if ref.get("kind") == "Pod" and ref.get("name"):
        return str(ref["name"])
    return str(address.get("hostname") or address.get("ip") or "")


def endpoints_peers(obj: dict[str, Any], namespace: str, settings: KubernetesDiscoverySettings) -> list[Seen]:
    """The replicas one Endpoints object names: addresses of subsets with the HTTP port."""
    service = str((obj.get("metadata") or {}).get("name") or "")
    out: list[Seen] = []
    for subset in obj.get("subsets") or ():
        port = next(
            (p.get("port") for p in subset.get("ports") or () if p.get("name") == settings.http_port_name),
            None,
        )
        if not isinstance(port, int):
            continue
        for key, ready in (("addresses", True), ("notReadyAddresses", False)):
            for address in subset.get(key) or ():
                if not address.get("ip"):
                    continue
                out.append((_address_id(address), _base_url(address, port, service, namespace, settings), ready))
    return out


# -- where and as whom -------------------------------------------------------------------------


def _context_namespace(path: Path) -> str | None:
    """The namespace of the kubeconfig's current context, if it names one."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
        current = doc.get("current-context")
        for entry in doc.get("contexts") or ():
            if entry.get("name") == current:
                ns = (entry.get("context") or {}).get("namespace")
                return str(ns) if ns else None
    except (OSError, yaml.YAMLError, AttributeError, TypeError):
        return None
    return None


def resolve_namespace(settings: KubernetesDiscoverySettings, environ: Mapping[str, str] | None = None) -> str:
    """The configured namespace, else the pod's, else the kubeconfig context's, else `default`."""
    if settings.namespace:
        return settings.namespace
    env = os.environ if environ is None else environ
    directory = Path(env.get(SERVICE_ACCOUNT_DIR_ENV, str(SERVICE_ACCOUNT_DIR)))
    with contextlib.suppress(OSError, UnicodeDecodeError):
        ns = (directory / "namespace").read_text().strip()
        if ns:
            return ns
    if settings.kubeconfig_file is not None:
        ns_ = _context_namespace(Path(settings.kubeconfig_file))
        if ns_:
            return ns_
    return "default"


def _unverified(credentials: Credentials) -> None:
    """`verifySsl: false`: keep the client certificate the context holds, stop checking the server's."""
    ctx: ssl.SSLContext = credentials.ssl_context
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE


# -- discovery ---------------------------------------------------------------------------------


class EndpointsDiscovery:
    """The hub replicas behind the hub's Service, kept current by a watch of Endpoints.

    `on_change` gets the whole list (sorted by id) after the first list and after every change
    that alters it; it is called on the event loop and must not block. `me_id` is this replica's
    own id (its pod name), only used in messages: the caller's `PeerSet` keeps it in the set.
    """

    def __init__(
        self,
        settings: KubernetesDiscoverySettings,
        on_change: Callable[[list[Peer]], None],
        *,
        me_id: str,
        environ: Mapping[str, str] | None = None,
        first_list_timeout: float = FIRST_LIST_TIMEOUT,
    ) -> None:
        self.settings = settings
        self.on_change = on_change
        self.me_id = me_id
        self._environ = dict(os.environ if environ is None else environ)
        self._first_list_timeout = first_list_timeout
        self.namespace = resolve_namespace(settings, self._environ)
        self._client: KubeClient | None = None
        self._identity = "the hub's service account"
        self._task: asyncio.Task[None] | None = None
        self._reflector: Reflector | None = None
        self._relists_before = 0
        self._objects: dict[str, list[Seen]] = {}
        self._pending: dict[str, list[Seen]] | None = None
        self._peers: list[Peer] = []
        self._published = False
        self._settled = asyncio.Event()  # the first list came, or the first attempt failed
        self._first_failure = ""
        self._logged_reason = ""
        self._backoff = Backoff(initial=1.0, maximum=60.0)  # between watches that ended in failure

    # -- public ------------------------------------------------------------------------------

    @property
    def peers(self) -> list[Peer]:
        return list(self._peers)

    @property
    def relists(self) -> int:
        """How many times the Endpoints were listed again after a 410 Gone (history compacted)."""
        return self._relists_before + (self._reflector.relists if self._reflector else 0)

    async def start(self) -> None:
        """Check access, list, and keep watching in the background.

        With `fail_fast`, raises DiscoveryError when discovery cannot work now; without, logs
        the reason and returns (the hub acts alone until discovery works).
        """
        if self._task is not None:
            raise RuntimeError("EndpointsDiscovery.start() called twice")
        try:
            self._client = await self._connect()
        except DiscoveryError as e:
            if self.settings.fail_fast:
                raise
            log.error("replica discovery is off: %s; this hub runs as a single replica", e)
            self._publish(force=True)
            return
        try:
            await self._check_access(self._client)
        except DiscoveryError as e:
            if self.settings.fail_fast:
                await self._close_client()
                raise
            log.error("replica discovery: %s; this hub runs with no peers until that is fixed (retrying)", e)
            self._logged_reason = "forbidden" if e.missing else str(e)
        self._task = asyncio.get_running_loop().create_task(self._run(self._client), name="hub-replica-discovery")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), self._first_list_timeout)
        if self._published:
            log.info(
                "replica discovery: watching endpoints %s* in namespace %s; %d replica(s): %s",
                self.settings.service_name_prefix,
                self.namespace,
                len(self._peers),
                ", ".join(p.id for p in self._peers) or "none",
            )
            if all(p.id != self.me_id for p in self._peers):
                log.warning(
                    "replica discovery: this replica (%s) is not in the endpoints %s* of namespace %s with a port "
                    "named %r: check that the hub's Service selects its pods and names its HTTP port %r",
                    self.me_id,
                    self.settings.service_name_prefix,
                    self.namespace,
                    self.settings.http_port_name,
                    self.settings.http_port_name,
                )
            return
        reason = self._first_failure or f"no answer within {self._first_list_timeout:g}s"
        error = DiscoveryError(f"cannot list endpoints in namespace {self.namespace}: {reason}")
        if self.settings.fail_fast:
            await self.stop()
            raise error
        self._publish(force=True)  # nothing known yet: the hub runs as one replica meanwhile
        if not self._logged_reason:  # a failure already logged is not said twice
            log.error("replica discovery: %s; this hub runs with no peers meanwhile (retrying)", error)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_client()

    # -- start-up ----------------------------------------------------------------------------

    async def _connect(self) -> KubeClient:
        kubeconfig = self.settings.kubeconfig_file
        try:
            if kubeconfig is None:
                credentials = await load_credentials(in_cluster=True, environ=self._environ)
            else:
                credentials = await load_credentials(kubeconfig=Path(kubeconfig))
                self._identity = f"the identity in kubeconfig {kubeconfig}"
        except CredentialsError as e:
            raise DiscoveryError(f"cannot load the credentials to watch endpoints with: {e}") from None
        if not self.settings.verify_ssl:
            _unverified(credentials)
        return KubeClient(credentials)

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def _can(self, client: KubeClient, verb: str) -> bool | None:
        """Whether the identity may `verb` endpoints in the namespace; None if it cannot be told."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": self.namespace, "verb": verb, "resource": "endpoints"}},
        }
        try:
            answer = await client.request("POST", SSAR_PATH, body=body)
        except APIError as e:
            if e.status in (403, 404):  # reviews not allowed or not served: the list will tell
                log.debug("replica discovery: cannot review access (%s); going on", e)
                return None
            raise
        return bool(((answer or {}).get("status") or {}).get("allowed"))

    async def _check_access(self, client: KubeClient) -> None:
        """`kubectl auth can-i list|watch endpoints -n <namespace>`, as Armory's plugin does."""
        try:
            answers = [await self._can(client, verb) for verb in VERBS]
        except KubeError as e:
            raise DiscoveryError(
                f"cannot check access to endpoints in namespace {self.namespace} at {client.server}: {e}"
            ) from None
        missing = [verb for verb, allowed in zip(VERBS, answers, strict=True) if allowed is False]
        if missing:
            checks = "; ".join(f"kubectl auth can-i {v} endpoints -n {self.namespace}" for v in missing)
            raise DiscoveryError(
                f"{self._identity} cannot {', '.join(missing)} endpoints in namespace {self.namespace} "
                f"({checks}): give it the Role in docs/ha.md",
                missing=tuple(missing),
            )

    # -- the watch ---------------------------------------------------------------------------

    async def _run(self, client: KubeClient) -> None:
        """List and watch until cancelled, whatever happens: every failure is logged and retried."""
        backoff = self._backoff
        while True:
            if self._reflector is not None:
                self._relists_before += self._reflector.relists
            self._reflector = Reflector(
                client, ENDPOINTS, self._handle, account=ACCOUNT, namespace=self.namespace, on_state=self._on_state
            )
            try:
                await self._reflector.run()
            except Forbidden as e:
                reason = (
                    f"{self._identity} may not list and watch endpoints in namespace {self.namespace} "
                    f"({e}): give it the Role in docs/ha.md"
                )
                self._failed(reason, key="forbidden")
                await asyncio.sleep(backoff.next())
            except ClusterReplaced as e:
                log.warning("replica discovery: %s; listing the endpoints again", e)
                await asyncio.sleep(backoff.next())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let discovery take the hub down
                log.exception("replica discovery failed unexpectedly: %s: %s; retrying", type(e).__name__, e)
                self._failed(f"{type(e).__name__}: {e}", key="unexpected", log_it=False)
                await asyncio.sleep(backoff.next())

    def _failed(self, reason: str, *, key: str = "", log_it: bool = True) -> None:
        if not self._settled.is_set():
            self._first_failure = reason
            self._settled.set()
        if log_it and self._logged_reason != (key or reason):
            # Before the first list, or without access, the hub is alone: an error. Later, the
            # peers known stay in use while the watch comes back: a warning.
            level = logging.ERROR if key == "forbidden" or not self._published else logging.WARNING
            log.log(level, "replica discovery: %s; retrying", reason)
        self._logged_reason = key or reason

    def _on_state(self, state: str, reason: str) -> None:
        if state == "backoff":
            self._failed(f"the API server at {self._client.server if self._client else '?'}: {reason}")
        elif state == "watching" and self._logged_reason:
            log.info("replica discovery: watching endpoints in namespace %s again", self.namespace)
            self._logged_reason = ""

    async def _handle(self, events: list[ObjectEvent]) -> None:
        changed = False
        for ev in events:
            if ev.type == SNAPSHOT_BEGIN:
                self._pending = {}
            elif ev.type == SNAPSHOT_END:
                self._objects, self._pending = self._pending or {}, None
                self._backoff.reset()
                changed = True
            elif ev.type in (ADDED, MODIFIED, DELETED):
                if not ev.name.startswith(self.settings.service_name_prefix):
                    continue
                target = self._objects if self._pending is None else self._pending
                if ev.type == DELETED:
                    target.pop(ev.name, None)
                else:
                    target[ev.name] = self._seen(ev)
                changed = changed or self._pending is None
        if changed and self._pending is None:
            self._publish(force=not self._published)
            self._settled.set()

    def _seen(self, ev: ObjectEvent) -> list[Seen]:
        try:
            obj = orjson.loads(ev.object or b"{}")
        except orjson.JSONDecodeError:
            log.warning("replica discovery: endpoints %s is not valid JSON; ignoring it", ev.name)
            return []
        return endpoints_peers(obj, self.namespace, self.settings) if isinstance(obj, dict) else []

    def _publish(self, *, force: bool = False) -> None:
        """Tell on_change the whole list, if it changed (or always, with force)."""
        found: dict[str, Seen] = {}
        for name in sorted(self._objects):
            for seen in self._objects[name]:
                held = found.get(seen[0])
                if held is None or (seen[2] and not held[2]):  # one address of a pod that is ready wins
                    found[seen[0]] = seen
        old = {p.id: p for p in self._peers}
        now = time.time()
        peers: list[Peer] = []
        for replica_id in sorted(found):
            _, url, ready = found[replica_id]
            before = old.get(replica_id)
            if before is not None and before.base_url == url and before.ready == ready:
                peers.append(before)
            else:
                peers.append(Peer(replica_id, url, ready, now))
        if not force and peers == self._peers:
            return
        self._peers = peers
        self._published = True
        try:
            self.on_change(list(peers))
        except Exception:  # a listener's bug must not stop the watch
            log.exception("replica discovery: the change listener failed")
