"""The Kustomize manifests of deploy/ on a real control plane, and agent mode proven with their RBAC.

Every kustomization under deploy/ is rendered through an overlay written by the test (its own
namespace, a name suffix so that cluster-scoped names never collide, the Secrets a user supplies),
passes `kubectl apply --dry-run=server`, is applied for real, and its Deployments' pods are
created by the controllers (which admission refuses when, say, the ServiceAccount is missing).

Then the agent runs as the manifests say, with the identity they give it: a real ServiceAccount
token from the API server (TokenRequest) for the rendered ServiceAccount, written with the
cluster's CA as the kubelet would mount them, the configuration from the rendered ConfigMap and
the environment from the rendered Deployment (only the hub address, its CA and the health port
are changed, to a test hub and free ports). The hub does the same with its Role and its
TokenReview binding.

The real control plane of scripts/real-cluster (or SCALE_AGENT_E2E_KUBECONFIG) is needed: without
it these tests are skipped, except in CI, where its absence is a failure.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.deploy_helpers import (
    AGENT_TOKEN,
    DEPLOY,
    Pod,
    find,
    kubectl,
    kustomizations,
    only,
    render,
    user_secrets,
    write_overlay,
)
from tests.helpers import AgentProcess, HubProcess, account_health, free_port, make_hub_pki, write_yaml

pytestmark = pytest.mark.e2e

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"
KUSTOMIZATIONS = kustomizations()
AGENT_MODE = DEPLOY / "agent" / "overlays" / "agent-mode"
AGENT_MODE_NAMESPACE = DEPLOY / "agent" / "overlays" / "agent-mode-namespace"


@dataclass
class RealCluster:
    kubeconfig: Path
    limited: Path | None
    server: str
    ca_pem: bytes
    served: set[str]

    def kubectl(self, *args: str, stdin: str | None = None):
        return kubectl(*args, kubeconfig=self.kubeconfig, stdin=stdin)

    def json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def _ca_of(kubeconfig: Path) -> tuple[str, bytes]:
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    if cluster.get("certificate-authority-data"):
        return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
    ca = Path(cluster["certificate-authority"])
    return cluster["server"], (ca if ca.is_absolute() else kubeconfig.parent / ca).read_bytes()


@pytest.fixture(scope="module")
def real() -> RealCluster:
    path = os.environ.get(E2E_ENV)
    if not path:
        reason = f"{E2E_ENV} is not set: no real control plane (scripts/test starts one with scripts/real-cluster)"
        if os.environ.get("CI") and os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER", "1") != "0":
            pytest.fail(f"in CI the real control plane is required: {reason}")
        pytest.skip(reason)
    limited = os.environ.get(E2E_ENV + "_LIMITED")
    server, ca = _ca_of(Path(path))
    served = set(kubectl("api-versions", kubeconfig=Path(path)).stdout.split())
    return RealCluster(Path(path), Path(limited) if limited else None, server, ca, served)


@pytest.fixture
def namespace(real: RealCluster) -> Iterator[str]:
    name = f"deploy-{uuid.uuid4().hex[:8]}"
    real.kubectl("create", "namespace", name)
    yield name
    real.kubectl("delete", "namespace", name, "--wait=false")


def as_list(objects: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


@dataclass
class Installed:
    objects: list[dict]
    secrets: dict[str, dict[str, str]]
    namespace: str

    @property
    def deployment(self) -> dict:
        return only(self.objects, "Deployment")

    def pod(self, root: Path) -> Pod:
        return Pod(self.objects, self.deployment, root, secrets=self.secrets)


@pytest.fixture
def install(real: RealCluster, namespace: str, tmp_path: Path) -> Iterator:
    """install(deploy folder, only_kinds=None, **secret options): the folder through a test
    overlay, dry-run then applied for real in the test's namespace (only the objects of
    `only_kinds`, when given). Cluster-scoped objects are deleted afterwards (the namespace takes
    the rest with it)."""
    applied: list[dict] = []

    def run(base: Path, *, only_kinds: set[str] | None = None, **secret_options) -> Installed:
        plain = render(write_overlay(tmp_path / "plain", base, namespace=namespace, served=real.served))
        secrets = {}
        if find(plain, "Deployment"):
            secrets = user_secrets(plain, only(plain, "Deployment"), tmp_path / "probe", **secret_options)
        overlay = write_overlay(
            tmp_path / "overlay",
            base,
            namespace=namespace,
            name_suffix=f"-{namespace}",
            secrets=secrets,
            secret_types={"scale-agent-hub-tls": "kubernetes.io/tls"},
            served=real.served,
        )
        rendered = render(overlay)
        objects = [o for o in rendered if only_kinds is None or o["kind"] in only_kinds]
        dry = real.kubectl("apply", "--dry-run=server", "-f", "-", stdin=as_list(objects)).stdout
        assert dry.count("(server dry run)") == len(objects), dry
        applied.extend(objects)
        real.kubectl("apply", "-f", "-", stdin=as_list(objects))
        renamed = {f"{name}-{namespace}": data for name, data in secrets.items()}
        return Installed([o for o in rendered if o["kind"] != "Secret"], renamed, namespace)

    yield run
    cluster_scoped = [o for o in applied if "namespace" not in o["metadata"]]
    if cluster_scoped:
        real.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=as_list(cluster_scoped))


def wait_for(what: str, check, timeout: float = 60.0, interval: float = 0.2):
    """Poll `check()` until it returns something true; its last value in the failure."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)  # polling a condition with a deadline, not waiting for one
    raise TimeoutError(f"no {what} within {timeout}s; last: {str(value)[:1500]}")


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=[str(p.relative_to(DEPLOY)) for p in KUSTOMIZATIONS])
def test_every_kustomization_applies_to_a_real_api_server(path: Path, real: RealCluster, install, namespace: str):
    installed = install(path)
    for obj in installed.objects:
        meta = obj["metadata"]
        args = [obj["kind"] + "." + obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else obj["kind"]]
        got = real.json("get", *args, meta["name"], *(["-n", meta["namespace"]] if "namespace" in meta else []))
        assert got["metadata"]["uid"], obj
    # The controllers make the Deployments' pods: admission accepts the pod template as it is
    # (its ServiceAccount exists, its security context is valid). The product's image is not on the
    # node (no registry), so they do not start.
    for deployment in find(installed.objects, "Deployment"):
        selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
        wanted = deployment["spec"]["replicas"]

        def pods(selector: str = selector, wanted: int = wanted) -> list[dict] | None:
            items = real.json("get", "pods", "-n", namespace, "-l", selector)["items"]
            return items if len(items) == wanted else None

        created = wait_for(f"{wanted} pods of {deployment['metadata']['name']}", pods)
        spec = created[0]["spec"]
        assert spec["serviceAccountName"] == deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
        assert spec["securityContext"]["runAsNonRoot"] is True


# --- agent mode, run with the manifests' own identity ----------------------------------------------


def service_account_dir(real: RealCluster, namespace: str, account: str, directory: Path) -> Path:
    """A real token of the ServiceAccount (TokenRequest), the cluster's CA and the namespace, laid
    out as the kubelet mounts them in /var/run/secrets/kubernetes.io/serviceaccount."""
    token = real.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    assert token.count(".") == 2, "not a JWT"
    directory.mkdir(parents=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(real.ca_pem)
    (directory / "namespace").write_text(namespace)
    return directory


def in_cluster_env(real: RealCluster, sa_dir: Path) -> dict[str, str]:
    server = urlparse(real.server)
    return {
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        "SCALE_AGENT_SERVICE_ACCOUNT_DIR": str(sa_dir),
    }


@pytest.fixture
def test_hub(tmp_path: Path) -> Iterator[tuple[HubProcess, Path]]:
    """A hub over TLS that wants the agents' token of the manifests' Secret."""
    directory = tmp_path / "hub"
    directory.mkdir()
    pki = make_hub_pki(directory)
    hub = HubProcess(
        write_yaml(
            directory / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                "auth": {"token": AGENT_TOKEN},
                "database": {"url": f"sqlite:///{directory / 'hub.db'}"},
            },
        )
    )
    try:
        yield hub, pki.ca
    finally:
        hub.stop()


def run_agent(
    installed: Installed, tmp: Path, hub: HubProcess, hub_ca: Path, extra_env: dict[str, str]
) -> AgentProcess:
    """The agent as the rendered Deployment runs it: its ConfigMap's file, its environment (the
    hub token from the Secret), with the hub address and CA and the health port changed."""
    pod = installed.pod(tmp / "pod")
    config = pod.config_file()
    env = {
        **pod.rooted_env(),
        "SCALE_AGENT_SERVER__HOST": "127.0.0.1",
        "SCALE_AGENT_SERVER__PORT": str(free_port()),
        "SCALE_AGENT_CLOUDDRIVER__GRPC": f"localhost:{hub.grpc_port}",
        "SCALE_AGENT_CLOUDDRIVER__TLS__CACERTFILE": str(hub_ca),
        **extra_env,
    }
    agent = AgentProcess(config, env, print_events=False)
    try:
        agent.health_url()  # started, or its refusal (a bad configuration) at once
    except BaseException:
        agent.stop()
        raise
    return agent


def account_name(installed: Installed, tmp: Path) -> str:
    config = yaml.safe_load(installed.pod(tmp / "read").mounted_config().read_text())
    (account,) = config["kubernetes"]["accounts"]
    return account["name"]


def probe(agent: AgentProcess, container: dict, which: str) -> int:
    """The status the kubelet's probe would get from the agent (same path)."""
    url = agent.health_url() + container[which]["httpGet"]["path"]
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_agent_mode_with_its_cluster_role_follows_every_namespace(real, install, namespace, test_hub, tmp_path):
    hub, hub_ca = test_hub
    installed = install(AGENT_MODE)
    spec = installed.deployment["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is True  # the pod gets the token it runs with
    sa_dir = service_account_dir(real, namespace, spec["serviceAccountName"], tmp_path / "sa")
    name = account_name(installed, tmp_path)
    agent = run_agent(installed, tmp_path, hub, hub_ca, in_cluster_env(real, sa_dir))
    try:
        hub.wait_until(
            f"/api/v1/accounts/{name}",
            lambda d: d["agentState"] == "watching",
            timeout=120,
            what="the account watching",
        )
        config_map = only(installed.objects, "ConfigMap")["metadata"]["name"]
        mine = hub.objects(name, f"?namespace={namespace}")
        assert config_map in {o["metadata"]["name"] for o in mine if o["kind"] == "ConfigMap"}
        assert hub.objects(name, "?namespace=kube-system"), "nothing from kube-system"
        namespaces = {o["metadata"]["name"] for o in hub.objects(name, "?kind=Namespace")}
        assert {"kube-system", "default", namespace} <= namespaces  # cluster-scoped kinds too
        # Secrets are followed too, as metadata only.
        assert any(o["kind"] == "Secret" and "data" not in o for o in hub.objects(name, "?kind=Secret"))
        health = agent.health()
        refused = {k: why for k, why in account_health(health, name)["skipped"].items() if "not allowed" in why}
        assert health["status"] == "ok" and refused == {}, "the ClusterRole leaves kinds unreadable"
        container = installed.deployment["spec"]["template"]["spec"]["containers"][0]
        assert probe(agent, container, "livenessProbe") == 200
        wait_for("the readiness probe passing", lambda: probe(agent, container, "readinessProbe") == 200)
    finally:
        agent.stop()


def namespace_variant(real, install, namespace, test_hub, tmp_path) -> tuple[str, AgentProcess]:
    hub, hub_ca = test_hub
    installed = install(AGENT_MODE_NAMESPACE)
    assert not find(installed.objects, "ClusterRole") and not find(installed.objects, "ClusterRoleBinding")
    spec = installed.deployment["spec"]["template"]["spec"]
    sa_dir = service_account_dir(real, namespace, spec["serviceAccountName"], tmp_path / "sa")
    name = account_name(installed, tmp_path)
    return name, run_agent(installed, tmp_path, hub, hub_ca, in_cluster_env(real, sa_dir))


def assert_follows_only(hub: HubProcess, agent: AgentProcess, name: str, namespace: str) -> None:
    hub.wait_until(f"/api/v1/accounts/{name}", lambda d: d["agentState"] == "watching", 120, "the account watching")
    # Watching: every followed kind has delivered its snapshot; the hub holds what it sent.
    doc = hub.wait_until(f"/api/v1/accounts/{name}", lambda d: d["objects"] > 0, 10, "objects of the namespace")
    items = hub.objects(name)
    assert items and {o["metadata"].get("namespace") for o in items} == {namespace}, "objects outside its namespace"
    assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("scale-agent-config-") for o in items)
    assert "Namespace" not in doc["kinds"] and "Node" not in doc["kinds"]
    health = agent.health()
    assert health["status"] == "ok" and account_health(health, name)["state"] == "watching"


def test_agent_mode_with_a_role_follows_only_its_namespace(real, install, namespace, test_hub, tmp_path):
    """As shipped: agent.yaml names no namespace; the agent follows its service account's own."""
    hub, _ = test_hub
    name, agent = namespace_variant(real, install, namespace, test_hub, tmp_path)
    try:
        assert_follows_only(hub, agent, name, namespace)
    finally:
        agent.stop()


def without_bindings(real, install, namespace, test_hub, tmp_path) -> tuple[str, AgentProcess]:
    """The agent of agent-mode, but with its ServiceAccount alone: what a user gets who forgets
    (or may not apply) the ClusterRole and its binding."""
    hub, hub_ca = test_hub
    installed = install(AGENT_MODE, only_kinds={"ServiceAccount"})
    spec = installed.deployment["spec"]["template"]["spec"]
    sa_dir = service_account_dir(real, namespace, spec["serviceAccountName"], tmp_path / "sa")
    return account_name(installed, tmp_path), run_agent(installed, tmp_path, hub, hub_ca, in_cluster_env(real, sa_dir))


def test_agent_mode_without_its_bindings_names_each_permission_it_lacks(real, install, namespace, test_hub, tmp_path):
    name, agent = without_bindings(real, install, namespace, test_hub, tmp_path)
    try:
        health = agent.wait_health(
            lambda d: account_health(d, name)["skipped"], timeout=120, what="the kinds it may not read"
        )
        account = account_health(health, name)
        skipped = account["skipped"]
        assert skipped["Pod"].startswith("not allowed to list pods cluster-wide"), skipped
        assert skipped["Deployment.apps"].startswith("not allowed to list deployments.apps cluster-wide"), skipped
        assert skipped["Secret"].startswith("not allowed to list secrets cluster-wide"), skipped
        assert account["kinds"] == []
    finally:
        agent.stop()


def test_agent_mode_without_its_bindings_is_not_reported_healthy(real, install, namespace, test_hub, tmp_path):
    hub, _ = test_hub
    name, agent = without_bindings(real, install, namespace, test_hub, tmp_path)
    try:
        agent.wait_health(lambda d: account_health(d, name)["skipped"], timeout=120, what="the kinds it may not read")
        account = hub.wait_until(f"/api/v1/accounts/{name}", lambda d: d["agentState"] != "connecting")
        assert account["agentState"] == "error", account
        assert "not allowed to list" in account.get("reason", ""), account
        assert agent.health()["status"] != "ok"
    finally:
        agent.stop()


# --- the kubeconfig modes and the hub, run from their manifests --------------------------------------


@pytest.mark.parametrize("mode", ["infrastructure-mode", "service-mode"])
def test_kubeconfig_modes_follow_the_clusters_of_their_mounted_secret(
    mode, real, install, namespace, test_hub, tmp_path
):
    hub, hub_ca = test_hub
    # The user's Secret holds real kubeconfigs: the admin one, and the limited identity's when
    # there is one (it may read everything but Secrets cluster-wide).
    texts = [real.kubeconfig.read_text(), (real.limited or real.kubeconfig).read_text()]
    keys: list[str] = []

    def kubeconfig_for(key: str) -> str:
        keys.append(key)
        return texts[min(len(keys) - 1, 1)]

    installed = install(DEPLOY / "agent" / "overlays" / mode, file_for=kubeconfig_for)
    assert installed.deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    config = yaml.safe_load(installed.pod(tmp_path / "read").mounted_config().read_text())
    names = [a["name"] for a in config["kubernetes"]["accounts"]]
    assert len(names) == len(keys) >= 1
    agent = run_agent(installed, tmp_path, hub, hub_ca, {})
    try:
        accounts = hub.wait_until(
            "/api/v1/accounts",
            lambda d: sorted(a["name"] for a in d) == sorted(names) and all(a["agentState"] == "watching" for a in d),
            timeout=120,
            what="every account of the Secret watching",
        )
        for account in accounts:
            assert hub.objects(account["name"], f"?namespace={namespace}&kind=ConfigMap"), account
        assert agent.health()["status"] == "ok"
    finally:
        agent.stop()


def http_status(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_the_hub_runs_with_its_manifests_role_and_token_review(real, install, namespace, postgres_db, tmp_path):
    installed = install(DEPLOY / "hub" / "base", database_url=postgres_db)
    spec = installed.deployment["spec"]["template"]["spec"]
    sa_dir = service_account_dir(real, namespace, spec["serviceAccountName"], tmp_path / "sa")
    pod = installed.pod(tmp_path / "pod")
    env = {
        **pod.rooted_env(),
        **in_cluster_env(real, sa_dir),
        # Loopback and free ports instead of the pod's 0.0.0.0:9091/7002.
        "SCALE_AGENT_HUB_SERVER__HOST": "127.0.0.1",
        "SCALE_AGENT_HUB_SERVER__HTTP_HOST": "127.0.0.1",
        "SCALE_AGENT_HUB_SERVER__GRPC_PORT": str(free_port()),
        "SCALE_AGENT_HUB_SERVER__HTTP_PORT": str(free_port()),
        # Refuse to start unless replica discovery works with the manifests' Role.
        "SCALE_AGENT_HUB_REPLICAS__KUBERNETES__FAIL_FAST": "true",
    }
    hub = HubProcess(pod.config_file(), extra_env=env)
    try:
        container = spec["containers"][0]
        for which in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert http_status(hub.url + container[which]["httpGet"]["path"])[0] == 200, which
        assert http_status(hub.url + "/api/v1/whoami")[0] == 401
        # A login with a real Kubernetes token: the hub asks the API server (TokenReview), which
        # its ClusterRoleBinding to system:auth-delegator allows.
        real.kubectl("create", "serviceaccount", "caller", "-n", namespace)
        token = real.kubectl("create", "token", "caller", "-n", namespace, "--audience", "scale-agent-hub").stdout
        status, me = http_status(hub.url + "/api/v1/whoami", token.strip())
        assert status == 200 and me["name"] == f"system:serviceaccount:{namespace}:caller", me
        # A token made for the API server (what every pod has mounted) is not a login here.
        plain = real.kubectl("create", "token", "caller", "-n", namespace).stdout.strip()
        assert http_status(hub.url + "/api/v1/whoami", plain)[0] == 401
    finally:
        hub.stop()
