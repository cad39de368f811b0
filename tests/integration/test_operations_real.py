"""Operations against a real kube-apiserver: what kubesim cannot show, because it answers as a
recent server does and has a scheduler of sorts.

Kubernetes before 1.25 has no strict field validation: its server-side apply answers a field the
schema does not know with a 500 and no reason, which the task must turn into the caller's error,
naming the field and the manifest. And on a cluster where a Job's pods cannot run (the control
plane of scripts/real-cluster has no scheduler and no kubelet), a runJob that reaches its deadline
must say what the pods are doing and keep the Job.

Skipped unless SCALE_AGENT_E2E_KUBECONFIG names an admin kubeconfig of a real cluster
(`./scripts/test` sets it to the control plane it starts).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from tests.helpers import AgentProcess, HubProcess, make_hub_pki, write_yaml

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"
WAIT_MS = 10000  # the hub's operationWaitMs: the runJob below waits this long
# This module's namespaces on a shared cluster: a prefix of their own, so they are known as its.
NAMESPACE_PREFIX = "h2-ops-"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.environ.get(E2E_ENV),
        reason=f"{E2E_ENV} is not set: no real cluster to test against (scripts/test starts one and sets it)",
    ),
]


@pytest.fixture(scope="module")
def kubeconfig() -> Path:
    return Path(os.environ[E2E_ENV])


@pytest.fixture(scope="module")
def hub(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    tmp = tmp_path_factory.mktemp("ops-real")
    pki = make_hub_pki(tmp)
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
                "kubernetes": {"accounts": [{"name": "real", "kubeConfigFile": str(kubeconfig)}]},
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
            },
        ),
        print_events=False,
    )
    try:
        agent.wait_health(
            lambda d: d["status"] == "ok" and len(d["accounts"]) == 1, timeout=120, what="the account watching"
        )
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: len(d) == 1 and d[0]["agentState"] == "watching",
            what="the account in the hub",
        )
        yield hub
    finally:
        agent.stop()
        hub.stop()


@pytest.fixture(scope="module")
def api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def ns(api: client.ApiClient) -> Iterator[str]:
    """A namespace of this test's, in which pods may be created: its default ServiceAccount exists
    (and, before 1.24, has its token), or the Job controller's pods would be refused for a while."""
    core = client.CoreV1Api(api)
    name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    minor = int("".join(ch for ch in client.VersionApi(api).get_code().minor if ch.isdigit()) or 0)
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_service_account, name, field_selector="metadata.name=default", timeout_seconds=60
    ):
        if event["object"].secrets or minor >= 24:
            w.stop()
    yield name
    core.delete_namespace(name)


def failed(task: dict) -> dict:
    assert task["state"] == "failed", task
    return task["exception"]


def test_a_deploy_with_an_unknown_field_fails_as_the_callers_error_naming_field_and_manifest(hub, ns, api):
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "typo"},
        "spec": {
            "replicaz": 2,
            "selector": {"matchLabels": {"app": "typo"}},
            "template": {
                "metadata": {"labels": {"app": "typo"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
            },
        },
    }
    exception = failed(
        hub.run_task([{"deployManifest": {"account": "real", "manifests": [bad], "namespaceOverride": ns}}], timeout=90)
    )
    # 1.20 answers 500 "failed to create typed patch object: .spec.replicaz: field not declared in
    # schema"; 1.25 and later 400 'strict decoding error: unknown field "spec.replicaz"'.
    assert (exception["code"], exception["reason"]) == (400, "BadRequest"), exception
    assert f"deployment.apps typo in namespace {ns}: " in exception["message"], exception
    assert "replicaz" in exception["message"] and exception["message"].endswith("; nothing was applied")
    assert client.AppsV1Api(api).list_namespaced_deployment(ns).items == []


def test_a_run_job_whose_pods_never_run_says_what_they_are_doing_and_keeps_the_job(hub, ns, api):
    # No node carries this label; with no scheduler at all, no node is ever assigned either.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"scale-agent.io/test": "nowhere"},
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }
    task = hub.run_task([{"runJob": {"account": "real", "manifest": job, "namespace": ns}}], timeout=90)
    exception = failed(task)
    assert (exception["code"], exception["reason"]) == (504, "Timeout"), exception
    message = exception["message"]
    assert f"job migrate in namespace {ns} did not complete before the operation's deadline: pod migrate-" in message
    assert " Pending (" in message and ("no node assigned yet" in message or "not scheduled" in message), message
    assert message.endswith(
        f"The Job {ns}/migrate was left in place; delete it with a deleteManifest of 'job migrate'"
    ), message
    (pod,) = task["resultObjects"][0]["jobStatus"]["pods"]
    assert pod.startswith("pod migrate-") and " Pending (" in pod
    assert client.BatchV1Api(api).read_namespaced_job("migrate", ns).status.active == 1, "the Job was kept"
