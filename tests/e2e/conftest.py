"""The product (an agent and a hub, as processes) against kubesim and against a real kube-apiserver.

Every test here runs twice: on kubesim, and on the real control plane that `scripts/test` starts
with `scripts/real-cluster` (or any cluster named by SCALE_AGENT_E2E_KUBECONFIG, with
SCALE_AGENT_E2E_KUBECONFIG_LIMITED for the limited identity). Where the two disagree, the real
server is right.

The agent follows two accounts: `admin` (every kind, through a TCP proxy the tests can cut, to
make outages) and `limited` (an identity that may read everything but Secrets cluster-wide and
may do anything in namespace `team-a`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.e2e.e2e_stack import Cluster, Stack, through
from tests.helpers import AgentProcess, HubProcess, TcpProxy, make_hub_pki, write_yaml

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"
WAIT_MS = 15000  # the hub's operationWaitMs


@pytest.fixture(scope="module", params=["kubesim", pytest.param("real", marks=pytest.mark.e2e)])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "kubesim":
        k = request.getfixturevalue("kubesim")
        return Cluster("kubesim", k.admin(0), k.limited(0))
    admin, limited = os.environ.get(E2E_ENV), os.environ.get(E2E_ENV + "_LIMITED")
    if not admin or not limited:
        pytest.skip(f"{E2E_ENV} and {E2E_ENV}_LIMITED are not set: no real cluster (scripts/test starts one)")
    real_dir = os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER_DIR")
    return Cluster("real", Path(admin), Path(limited), Path(real_dir) if real_dir else None)


@pytest.fixture(scope="module")
def stack(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"e2e-{cluster.name}")
    pki = make_hub_pki(tmp)
    server = urlparse(yaml.safe_load(cluster.admin.read_text())["clusters"][0]["cluster"]["server"])
    proxy = TcpProxy(server.hostname or "127.0.0.1", server.port or 443)
    hub = HubProcess(
        write_yaml(
            tmp / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                "operations": {"operationWaitMs": WAIT_MS},
            },
        )
    )
    agent = AgentProcess(
        write_yaml(
            tmp / "agent.yaml",
            {
                "kubernetes": {
                    "discoveryIntervalSeconds": 3,
                    "accounts": [
                        {"name": "admin", "kubeConfigFile": str(through(cluster.admin, proxy, tmp / "admin.yaml"))},
                        {"name": "limited", "kubeConfigFile": str(cluster.limited)},
                    ],
                },
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
            },
        ),
        print_events=False,
    )
    try:
        agent.wait_health(
            lambda d: d["status"] == "ok" and len(d["accounts"]) == 2, timeout=120, what="both accounts watching"
        )
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: len(d) == 2 and all(a["agentState"] == "watching" for a in d),
            what="both accounts in the hub",
        )
        yield Stack(cluster, hub, agent, proxy)
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
