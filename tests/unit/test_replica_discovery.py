"""Hub replicas find each other through the Endpoints of their Service, against kubesim in-process
(TLS, real RBAC, the admin and the limited identities it writes kubeconfigs for)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from scaleagent.hub.replicas.discovery import (
    DiscoveryError,
    EndpointsDiscovery,
    KubernetesDiscoverySettings,
    endpoints_peers,
)
from scaleagent.hub.replicas.peers import Peer
from scaleagent.kube.credentials import SERVICE_ACCOUNT_DIR_ENV
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.pki import LIMITED_USER
from scaleagent.kubesim.simulator import LIMITED_NAMESPACE, Simulator

NS = "spinnaker"
WAIT = 20.0


class Sim:
    def __init__(self, sim: Simulator, admin: Path, limited: Path) -> None:
        self.sim, self.admin, self.limited = sim, admin, limited
        self.cluster: Cluster = sim.members[0].cluster

    def create(self, obj: dict) -> None:
        self.cluster.create(self.cluster.rt_for(obj), obj["metadata"].get("namespace", ""), obj)

    def put_endpoints(self, name: str, subsets: list[dict], namespace: str = NS) -> None:
        rt = self.cluster.rt("", "v1", "endpoints")
        obj = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace}}
        obj["subsets"] = subsets
        if self.cluster.store.get("/endpoints", namespace, name) is None:
            self.cluster.create(rt, namespace, obj)
        else:
            self.cluster.update(rt, namespace, name, obj)

    def delete_endpoints(self, name: str, namespace: str = NS) -> None:
        self.cluster.delete(self.cluster.rt("", "v1", "endpoints"), namespace, name)


@pytest.fixture
async def sim(tmp_path, monkeypatch):
    # No service account directory on the test machine counts: the kubeconfig's context decides.
    monkeypatch.setenv(SERVICE_ACCOUNT_DIR_ENV, str(tmp_path / "no-service-account"))
    simulator = Simulator(clusters=1)
    await simulator.start()
    try:
        [(admin, limited)] = simulator.write_kubeconfigs(tmp_path)
        s = Sim(simulator, admin, limited)
        s.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield s
    finally:
        await simulator.stop()


class Changes:
    """What on_change was told, in order, with a way to wait for a condition on it."""

    def __init__(self) -> None:
        self.calls: list[list[Peer]] = []
        self._changed = asyncio.Condition()

    def __call__(self, peers: list[Peer]) -> None:
        self.calls.append(peers)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[list[Peer]], bool], what: str) -> list[Peer]:
        async def satisfied() -> list[Peer]:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self.calls) and predicate(self.calls[-1]))
                return self.calls[-1]

        try:
            return await asyncio.wait_for(satisfied(), WAIT)
        except TimeoutError:
            raise AssertionError(f"no change with {what} within {WAIT}s; calls: {self.calls}") from None


def view(peers: list[Peer]) -> list[tuple[str, str, bool]]:
    return [(p.id, p.base_url, p.ready) for p in peers]


def pod(name: str, ip: str, **extra) -> dict:
    return {"ip": ip, "targetRef": {"kind": "Pod", "name": name, "namespace": NS}, **extra}


HTTP_AND_GRPC = [{"name": "http", "port": 7002, "protocol": "TCP"}, {"name": "grpc", "port": 9091, "protocol": "TCP"}]


async def started(settings: KubernetesDiscoverySettings, **kw) -> tuple[EndpointsDiscovery, Changes]:
    changes = Changes()
    discovery = EndpointsDiscovery(settings, changes, me_id="spin-clouddriver-a", **kw)
    await discovery.start()
    return discovery, changes


async def test_peers_follow_the_endpoints_of_services_with_the_prefix_and_the_http_port(sim, caplog):
    sim.put_endpoints(
        "spin-clouddriver",
        [
            {
                "addresses": [pod("cd-a", "10.0.0.1")],
                "notReadyAddresses": [pod("cd-b", "10.0.0.2")],
                "ports": HTTP_AND_GRPC,
            }
        ],
    )
    # Another Service, and one of ours without the HTTP port: neither names replicas.
    sim.put_endpoints("redis", [{"addresses": [pod("redis-0", "10.0.1.1")], "ports": [{"name": "http", "port": 80}]}])
    sim.put_endpoints(
        "spin-clouddriver-grpc", [{"addresses": [pod("cd-x", "10.0.2.1")], "ports": [{"name": "grpc", "port": 9091}]}]
    )
    discovery, changes = await started(KubernetesDiscoverySettings(kubeconfig_file=sim.admin, namespace=NS))
    try:
        # start() returns once the first list is known, and on_change was told it.
        assert view(changes.calls[0]) == [
            ("cd-a", "http://10.0.0.1:7002", True),
            ("cd-b", "http://10.0.0.2:7002", False),
        ]
        assert view(discovery.peers) == view(changes.calls[0])
        # This replica's own pod is not among them: the log says what to check.
        assert any(
            "this replica (spin-clouddriver-a) is not in the endpoints spin-clouddriver* of namespace spinnaker"
            in r.getMessage()
            for r in caplog.records
        )
        first_a = discovery.peers[0]

        # The not-ready pod becomes ready: only its entry is new.
        sim.put_endpoints(
            "spin-clouddriver",
            [{"addresses": [pod("cd-a", "10.0.0.1"), pod("cd-b", "10.0.0.2")], "ports": HTTP_AND_GRPC}],
        )
        peers = await changes.wait_for(lambda p: all(x.ready for x in p), "cd-b ready")
        assert view(peers) == [("cd-a", "http://10.0.0.1:7002", True), ("cd-b", "http://10.0.0.2:7002", True)]
        assert peers[0] is first_a  # unchanged: same lastUpdated

        # A change elsewhere tells nobody; the next call is the next real change.
        calls = len(changes.calls)
        sim.put_endpoints(
            "redis", [{"addresses": [pod("redis-0", "10.0.1.9")], "ports": [{"name": "http", "port": 80}]}]
        )
        sim.put_endpoints(
            "spin-clouddriver-ha", [{"addresses": [pod("cd-c", "10.0.3.1")], "ports": [{"name": "http", "port": 7002}]}]
        )
        peers = await changes.wait_for(lambda p: len(p) == 3, "cd-c")
        assert len(changes.calls) == calls + 1
        assert view(peers)[2] == ("cd-c", "http://10.0.3.1:7002", True)

        # A deleted Endpoints takes its replicas with it.
        sim.delete_endpoints("spin-clouddriver")
        peers = await changes.wait_for(lambda p: len(p) == 1, "only cd-c")
        assert view(peers) == [("cd-c", "http://10.0.3.1:7002", True)]
    finally:
        await discovery.stop()


async def test_the_watch_survives_a_compacted_history(sim):
    sim.put_endpoints("spin-clouddriver", [{"addresses": [pod("cd-a", "10.0.0.1")], "ports": HTTP_AND_GRPC}])
    discovery, changes = await started(KubernetesDiscoverySettings(kubeconfig_file=sim.admin, namespace=NS))
    try:
        assert [p.id for p in discovery.peers] == ["cd-a"]
        # Other writes move the cluster past the watch's version; etcd compacts; the watch breaks;
        # a replica comes while it is down. All in one step, so the watch cannot see it live.
        sim.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump", "namespace": NS}})
        sim.cluster.store.compact()
        sim.cluster.store.close_watchers()
        sim.put_endpoints(
            "spin-clouddriver",
            [{"addresses": [pod("cd-a", "10.0.0.1"), pod("cd-b", "10.0.0.2")], "ports": HTTP_AND_GRPC}],
        )
        peers = await changes.wait_for(lambda p: len(p) == 2, "cd-b after the relist")
        assert [p.id for p in peers] == ["cd-a", "cd-b"]
        assert discovery.relists >= 1  # resuming answered 410 Gone: listed again
        # And it watches again afterwards.
        sim.delete_endpoints("spin-clouddriver")
        await changes.wait_for(lambda p: p == [], "no replicas")
    finally:
        await discovery.stop()


async def test_an_identity_without_access_gets_a_message_saying_what_is_missing(sim):
    settings = KubernetesDiscoverySettings(kubeconfig_file=sim.limited, fail_fast=True)
    discovery = EndpointsDiscovery(settings, Changes(), me_id="me")
    # No namespace set, no service account: the kubeconfig context's namespace.
    assert discovery.namespace == LIMITED_NAMESPACE
    with pytest.raises(DiscoveryError) as e:
        await discovery.start()
    assert str(e.value) == (
        f"the identity in kubeconfig {sim.limited} cannot list, watch endpoints in namespace {LIMITED_NAMESPACE} "
        f"(kubectl auth can-i list endpoints -n {LIMITED_NAMESPACE}; "
        f"kubectl auth can-i watch endpoints -n {LIMITED_NAMESPACE}): give it the Role in docs/ha.md"
    )


async def test_without_fail_fast_the_hub_runs_alone_until_access_is_given(sim, caplog):
    caplog.set_level(logging.INFO, logger="scaleagent.hub.replicas.discovery")
    settings = KubernetesDiscoverySettings(kubeconfig_file=sim.limited)
    discovery, changes = await started(settings)
    try:
        assert changes.calls == [[]]
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors  # said once, not once per retry
        assert f"cannot list, watch endpoints in namespace {LIMITED_NAMESPACE}" in errors[0]
        assert "runs with no peers" in errors[0]

        rbac = "rbac.authorization.k8s.io/v1"
        sim.create(
            {
                "apiVersion": rbac,
                "kind": "Role",
                "metadata": {"name": "hub-replicas", "namespace": LIMITED_NAMESPACE},
                "rules": [{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get", "list", "watch"]}],
            }
        )
        sim.create(
            {
                "apiVersion": rbac,
                "kind": "RoleBinding",
                "metadata": {"name": "hub-replicas", "namespace": LIMITED_NAMESPACE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub-replicas"},
                "subjects": [{"kind": "User", "name": LIMITED_USER, "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )
        sim.put_endpoints(
            "spin-clouddriver", [{"addresses": [pod("cd-a", "10.0.0.1")], "ports": HTTP_AND_GRPC}], LIMITED_NAMESPACE
        )
        peers = await changes.wait_for(lambda p: len(p) == 1, "cd-a once access is given")
        assert view(peers) == [("cd-a", "http://10.0.0.1:7002", True)]
    finally:
        await discovery.stop()


async def test_in_cluster_the_service_account_and_its_namespace_are_used(sim, tmp_path):
    member = sim.sim.members[0]
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(sim.cluster.add_token("system:serviceaccount:spinnaker:hub", ("system:masters",)))
    (sa / "ca.crt").write_bytes(member.pki.ca_pem)
    (sa / "namespace").write_text(NS)
    host, port = member.url.removeprefix("https://").rsplit(":", 1)
    environ = {SERVICE_ACCOUNT_DIR_ENV: str(sa), "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    sim.put_endpoints("spin-clouddriver", [{"addresses": [pod("cd-a", "10.0.0.1")], "ports": HTTP_AND_GRPC}])
    discovery, changes = await started(KubernetesDiscoverySettings(kubeconfig_file=None), environ=environ)
    try:
        assert discovery.namespace == NS
        assert [p.id for p in changes.calls[0]] == ["cd-a"]
    finally:
        await discovery.stop()


def _unreachable_kubeconfig(admin: Path, tmp_path: Path) -> Path:
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = yaml.safe_load(admin.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_an_unreachable_api_server_fails_fast_or_leaves_the_hub_alone(sim, tmp_path):
    path = _unreachable_kubeconfig(sim.admin, tmp_path)
    with pytest.raises(
        DiscoveryError, match=r"cannot check access to endpoints in namespace spinnaker .*cannot connect"
    ):
        await started(KubernetesDiscoverySettings(kubeconfig_file=path, namespace=NS, fail_fast=True))

    discovery, changes = await started(KubernetesDiscoverySettings(kubeconfig_file=path, namespace=NS))
    try:
        assert changes.calls == [[]]
    finally:
        await discovery.stop()


async def test_missing_credentials_fail_fast_or_leave_the_hub_alone(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(DiscoveryError, match=r"cannot load the credentials .*the file does not exist"):
        await started(KubernetesDiscoverySettings(kubeconfig_file=missing, fail_fast=True))
    discovery, changes = await started(KubernetesDiscoverySettings(kubeconfig_file=missing))
    assert changes.calls == [[]]
    await discovery.stop()


def test_base_urls_by_ip_or_by_dns_name():
    obj = {
        "metadata": {"name": "spin-clouddriver"},
        "subsets": [
            {
                "addresses": [
                    {"ip": "10.0.0.1", "hostname": "cd-0", "targetRef": {"kind": "Pod", "name": "cd-0"}},
                    {"ip": "10.0.0.2", "targetRef": {"kind": "Pod", "name": "cd-x"}},
                    {"ip": "fd00::5", "hostname": "node-five"},
                    {"ip": "10.0.0.6"},
                ],
                "ports": [{"name": "http", "port": 7002}],
            }
        ],
    }
    plain = KubernetesDiscoverySettings(kubeconfig_file=None)
    assert endpoints_peers(obj, NS, plain) == [
        ("cd-0", "http://10.0.0.1:7002", True),
        ("cd-x", "http://10.0.0.2:7002", True),
        ("node-five", "http://[fd00::5]:7002", True),
        ("10.0.0.6", "http://10.0.0.6:7002", True),
    ]
    dns = KubernetesDiscoverySettings(kubeconfig_file=None, use_dns=True, domain_name="corp.example")
    assert [url for _, url, _ in endpoints_peers(obj, NS, dns)] == [
        "http://cd-0.spin-clouddriver.spinnaker.svc.corp.example:7002",
        "http://10-0-0-2.spinnaker.pod.corp.example:7002",
        "http://node-five.spin-clouddriver.spinnaker.svc.corp.example:7002",
        "http://10-0-0-6.spinnaker.pod.corp.example:7002",
    ]
    other_port = KubernetesDiscoverySettings(kubeconfig_file=None, http_port_name="web")
    assert endpoints_peers(obj, NS, other_port) == []


async def test_kubesim_defaults_endpoint_ports_to_tcp_as_a_real_apiserver_does(sim):
    sim.put_endpoints(
        "spin-clouddriver", [{"addresses": [pod("cd-a", "10.0.0.1")], "ports": [{"name": "http", "port": 7002}]}]
    )
    stored = sim.cluster.store.get("/endpoints", NS, "spin-clouddriver")
    assert stored["subsets"][0]["ports"] == [{"name": "http", "port": 7002, "protocol": "TCP"}]


async def test_verify_ssl_false_accepts_a_server_certificate_nobody_vouches_for(sim, tmp_path):
    doc = yaml.safe_load(sim.admin.read_text())
    del doc["clusters"][0]["cluster"]["certificate-authority-data"]  # kubesim's CA is in no trust store
    path = tmp_path / "no-ca.yaml"
    path.write_text(yaml.safe_dump(doc))
    sim.put_endpoints("spin-clouddriver", [{"addresses": [pod("cd-a", "10.0.0.1")], "ports": HTTP_AND_GRPC}])
    with pytest.raises(DiscoveryError, match="cannot verify the TLS certificate"):
        await started(KubernetesDiscoverySettings(kubeconfig_file=path, namespace=NS, fail_fast=True))
    discovery, changes = await started(
        KubernetesDiscoverySettings(kubeconfig_file=path, namespace=NS, verify_ssl=False)
    )
    try:
        assert [p.id for p in changes.calls[0]] == ["cd-a"]
    finally:
        await discovery.stop()
