"""Operations on workloads that really run: the real control plane with its node (`scripts/real-cluster
start --with-node`, docs/real-cluster.md), a hub and an agent as processes. A Job run through the
hub runs on the node and the task reports its real logs; a Deployment deployed through the hub
becomes Available, and the hub's cache shows it so.

Skipped unless SCALE_AGENT_E2E_NODE_IMAGE names the node's test image (the node's `env` sets it).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from tests.helpers import AgentProcess, HubProcess, make_hub_pki, write_yaml

E2E_ENV, IMAGE_ENV = "SCALE_AGENT_E2E_KUBECONFIG", "SCALE_AGENT_E2E_NODE_IMAGE"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (os.environ.get(E2E_ENV) and os.environ.get(IMAGE_ENV)),
        reason=f"{IMAGE_ENV} is not set: no real cluster with a node (scripts/real-cluster start --with-node)",
    ),
]


@pytest.fixture(scope="module")
def image() -> str:
    return os.environ[IMAGE_ENV]


@pytest.fixture(scope="module")
def api() -> client.ApiClient:
    return config.new_client_from_config(config_file=os.environ[E2E_ENV])


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    tmp = tmp_path_factory.mktemp("node")
    pki = make_hub_pki(tmp)
    hub = HubProcess(
        write_yaml(
            tmp / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                "operations": {"operationWaitMs": 90_000},
            },
        )
    )
    agent = AgentProcess(
        write_yaml(
            tmp / "agent.yaml",
            {
                "kubernetes": {
                    "accounts": [
                        {"name": "node", "kubeConfigFile": os.environ[E2E_ENV], "kinds": ["Deployment", "Job", "Pod"]}
                    ]
                },
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
            },
        ),
        print_events=False,
    )
    try:
        hub.wait_until(
            "/api/v1/accounts", lambda d: len(d) == 1 and d[0]["agentState"] == "watching", timeout=120, what="watching"
        )
        yield hub
    finally:
        agent.stop()
        hub.stop()


@pytest.fixture
def ns(api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"node-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 60  # pods are refused until the namespace's default ServiceAccount has its token
    while not [
        s for s in core.list_namespaced_service_account(name).items if s.metadata.name == "default" and s.secrets
    ]:
        assert time.monotonic() < deadline, "the default ServiceAccount never got its token"
        time.sleep(0.2)  # a poll interval: the condition is checked again
    yield name
    core.delete_namespace(name)


def test_a_job_run_through_the_hub_runs_on_the_node_and_the_task_reports_its_logs(hub, ns, image):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "hello-"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "say",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "echo hello from the node; ls /sys/class/net"],
                        }
                    ],
                }
            },
        },
    }
    task = hub.run_task([{"runJob": {"account": "node", "manifest": job, "namespace": ns}}], timeout=120)
    assert task["state"] == "completed", task
    result = task["resultObjects"][0]
    assert result["jobStatus"]["status"] == "succeeded", result["jobStatus"]
    (logs,) = result["logs"].values()
    print(f"\nnode: the Job's logs as the task reports them: {logs}")
    assert logs["say"].split() == ["hello", "from", "the", "node", "lo"]  # a pod network of `lo` alone


def test_a_deployment_deployed_through_the_hub_becomes_available_on_the_node(hub, ns, image, api):
    labels = {"app": "sleeper"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sleeper"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "sleep", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
                    ],
                },
            },
        },
    }
    task = hub.run_task([{"deployManifest": {"account": "node", "manifests": [deployment], "namespaceOverride": ns}}])
    assert task["state"] == "completed", task
    cached = hub.wait_until(
        f"/api/v1/accounts/node/objects?kind=Deployment&namespace={ns}&name=sleeper",
        lambda d: bool(d["items"]) and (d["items"][0].get("status") or {}).get("availableReplicas") == 2,
        timeout=120,
        what="the Deployment Available in the hub's cache",
    )
    live = client.AppsV1Api(api).read_namespaced_deployment("sleeper", ns)
    assert live.status.available_replicas == 2
    assert cached["items"][0]["metadata"]["uid"] == live.metadata.uid  # type: ignore[index]
